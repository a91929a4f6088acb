#include "channel_walk.hpp"

#include <algorithm>

namespace mlph::onednn {

std::optional<ChannelWalk> ChannelWalk::of(const memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.format_kind != dnnl_blocked || d.data_type != dnnl_f32 || d.ndims < 2) return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  ChannelWalk w;
  w.channels_ = d.dims[1];
  w.offset0_ = d.offset0;
  if (b.inner_nblks == 0 && b.strides[1] == 1) w.block_ = w.channels_;  // channels-last: one block
  else if (b.inner_nblks == 1 && b.inner_idxs[0] == 1) w.block_ = b.inner_blks[0];
  else return std::nullopt;
  const int last = d.ndims - 1;
  w.outer_sizes_ = {d.dims[0], (d.padded_dims[1] + w.block_ - 1) / w.block_};
  w.outer_strides_ = {b.strides[0], b.strides[1]};
  for (int k = 2; k < last; ++k) w.outer_sizes_.push_back(d.dims[k]), w.outer_strides_.push_back(b.strides[k]);
  if (last >= 2) w.length_ = d.dims[last], w.stride_ = b.strides[last];
  for (int64_t size : w.outer_sizes_) w.lines_ *= size;
  return w;
}

ChannelWalk::Line ChannelWalk::line(int64_t i) const {
  Line l{0, 0, offset0_, length_, stride_};
  for (size_t k = outer_sizes_.size(); k-- > 0;) {
    const int64_t index = i % outer_sizes_[k];
    i /= outer_sizes_[k];
    l.offset += index * outer_strides_[k];
    if (k == 1) l.channel0 = index * block_;
  }
  l.width = std::min(block_, channels_ - l.channel0);
  return l;
}

}  // namespace mlph::onednn
