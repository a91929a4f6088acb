// Spatial parallelism (ABI 1.5): one sample split over a grid of ranks (the core's parallel.spatial).
// What the core, the workloads and the host backends share of it: the grid's text and a rank's block,
// boxes of row-major arrays, the communicators of consecutive ranks, and the two ops of docs/ops.md
// (halo_exchange, spatial_gather) on channels-last float32 host buffers.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/comms.h"
#include "mlph/sdk/comms/halo.hpp"
#include "mlph/sdk/comms/rank_groups.hpp"
#include "mlph/sdk/comms/table.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk::spatial {

using Dims = std::vector<int64_t>;

// ---- the grid ---------------------------------------------------------------------------------

// "2x1x1" -> {2, 1, 1}, "1" -> {1}: ranks per sample along each spatial dim. Throws
// MLPH_INVALID_ARGUMENT naming `key` for anything else.
inline Dims parse_grid(std::string_view text, const std::string& key) {
  Dims grid;
  const auto bad = [&] {
    fail(MLPH_INVALID_ARGUMENT, "'" + key + "' = '" + std::string(text) +
                                    "': expected ranks per spatial dim as positive integers joined by x, e.g. 2x1x1");
  };
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(text.find('x', start), text.size());
    int64_t ranks = 0;
    const auto [ptr, error] = std::from_chars(text.data() + start, text.data() + end, ranks);
    if (error != std::errc() || ptr != text.data() + end || ranks < 1 || ranks > (1 << 20)) bad();
    grid.push_back(ranks);
    if (end == text.size()) break;
    start = end + 1;
  }
  return grid;
}

// The product of the dims: a grid's ranks, a shape's elements.
inline int64_t volume(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}
inline int64_t ranks(const Dims& grid) { return volume(grid); }

inline std::string grid_text(const Dims& grid) {
  std::string out;
  for (size_t d = 0; d < grid.size(); ++d) {
    if (d) out += 'x';
    out += std::to_string(grid[d]);
  }
  return out;
}

// Row-major coordinates of the `index`-th rank of a sample (0 <= index < ranks(grid)).
inline Dims coordinates(const Dims& grid, int64_t index) {
  Dims c(grid.size());
  for (size_t d = grid.size(); d-- > 0;) c[d] = index % grid[d], index /= grid[d];
  return c;
}

// ---- boxes of row-major arrays ----------------------------------------------------------------

// A box of `extent` elements per dim at `from` in an array of `shape` (all the same length).
struct Box {
  Dims shape, from;
};

// Calls run(source_offset, destination_offset, count), in elements, for every contiguous run of the
// box `extent` at src.from in src.shape that lands at dst.from in dst.shape. Trailing dims that both
// boxes cover whole merge into one run.
template <class Run>
void for_each_run(const Box& src, const Box& dst, const Dims& extent, Run&& run) {
  const size_t ndim = extent.size();
  if (ndim == 0) return run(int64_t{0}, int64_t{0}, int64_t{1});
  const auto whole = [&](size_t d) {
    return src.from[d] == 0 && dst.from[d] == 0 && extent[d] == src.shape[d] && extent[d] == dst.shape[d];
  };
  size_t inner = ndim;
  int64_t count = 1;
  do count *= extent[--inner];
  while (inner > 0 && whole(inner));
  Dims src_stride(ndim, 1), dst_stride(ndim, 1);
  for (size_t d = ndim - 1; d > 0; --d)
    src_stride[d - 1] = src_stride[d] * src.shape[d], dst_stride[d - 1] = dst_stride[d] * dst.shape[d];
  int64_t outer = 1;
  for (size_t d = 0; d < inner; ++d) outer *= extent[d];
  if (count == 0 || outer == 0) return;
  Dims index(inner, 0);
  for (int64_t i = 0; i < outer; ++i) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < ndim; ++d) {
      const int64_t at = d < inner ? index[d] : 0;
      s += (src.from[d] + at) * src_stride[d];
      t += (dst.from[d] + at) * dst_stride[d];
    }
    run(s, t, count);
    for (size_t d = inner; d-- > 0;) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
  }
}

// Copies (or, with `add`, adds) the box `extent` of `src` at src_box.from into `dst` at dst_box.from.
template <class T>
void copy_box(const T* src, const Box& src_box, T* dst, const Box& dst_box, const Dims& extent, bool add = false) {
  for_each_run(src_box, dst_box, extent, [&](int64_t s, int64_t t, int64_t n) {
    if (!add) return static_cast<void>(std::memcpy(dst + t, src + s, static_cast<size_t>(n) * sizeof(T)));
    for (int64_t i = 0; i < n; ++i) dst[t + i] += src[s + i];
  });
}

// ---- the ops (docs/ops.md) on channels-last float32 host buffers ----------------------------------

// halo_exchange: x [N, S.., C] -> y [N, S + before + after.., C]. Along a split dim the halos are
// exchanged symmetrically (the wider of before and after on both sides, in a scratch block when they
// differ); along a dim of one rank they are zeros.
class HaloExchange {
 public:
  // `group` (null when the grid is all 1) holds the sample's ranks; it and `host` outlive this object.
  HaloExchange(const MLPH_HostApi* host, const MLPH_CommsHandle* group, const Dims& x_shape, const Dims& grid,
               const Dims& before, const Dims& after, std::string where)
      : host_(host), group_(group), where_(std::move(where)), x_shape_(x_shape), y_shape_(x_shape) {
    const size_t spatial = grid.size();
    if (group_ && !(has_halo_exchange(group_->api) && has_halo_accumulate(group_->api)))
      fail(MLPH_UNIMPLEMENTED, where_ + " needs a comms plug-in with halo_exchange and halo_accumulate (ABI 1.5)");
    ext_shape_ = x_shape;
    x_at_.assign(x_shape.size(), 0);
    y_at_.assign(x_shape.size(), 0);
    spec_.struct_size = sizeof spec_;
    spec_.dtype = MLPH_DTYPE_F32;
    spec_.ndim = static_cast<int32_t>(x_shape.size());
    spec_.grid_ndim = static_cast<int32_t>(spatial + 1);  // the batch dim leads, over one rank
    spec_.grid[0] = 1;
    for (size_t d = 0; d < spatial; ++d) {
      const size_t e = d + 1;
      y_shape_[e] += before[d] + after[d];
      const int64_t h = grid[d] > 1 ? std::max(before[d], after[d]) : 0;
      ext_shape_[e] = grid[d] > 1 ? x_shape[e] + 2 * h : y_shape_[e];
      x_at_[e] = grid[d] > 1 ? h : before[d];
      y_at_[e] = grid[d] > 1 ? h - before[d] : 0;
      spec_.grid[e] = static_cast<int32_t>(grid[d]);
      spec_.halo[e] = static_cast<int32_t>(h);
    }
    for (size_t e = 0; e < ext_shape_.size(); ++e) spec_.shape[e] = ext_shape_[e];
    direct_ = ext_shape_ == y_shape_;
    sent_ = group_ ? halo::bytes_sent(spec_, rank_in(host_, group_, where_)) : 0;
  }

  const Dims& output_shape() const { return y_shape_; }
  // The bytes this rank sends in one forward (and again in one backward): for benchmarks.
  size_t bytes_sent() const { return sent_; }

  void forward(const float* x, float* y) {
    float* ext = direct_ ? y : scratch();
    std::fill(ext, ext + volume(ext_shape_), 0.0f);
    copy_box(x, {x_shape_, Dims(x_shape_.size(), 0)}, ext, {ext_shape_, x_at_}, x_shape_);
    if (group_) check(host_, group_->api->halo_exchange(group_->comm, ext, &spec_), where_ + ": halo exchange");
    if (!direct_) copy_box(ext, {ext_shape_, y_at_}, y, {y_shape_, Dims(y_shape_.size(), 0)}, y_shape_);
  }

  // dx = (or += with `accumulate`) dL/dx given dy = dL/dy: the halos' gradients added where they came from.
  void backward(const float* dy, float* dx, bool accumulate) {
    float* ext = scratch();
    if (!direct_) std::fill(ext, ext + volume(ext_shape_), 0.0f);
    copy_box(dy, {y_shape_, Dims(y_shape_.size(), 0)}, ext, {ext_shape_, y_at_}, y_shape_);
    if (group_) check(host_, group_->api->halo_accumulate(group_->comm, ext, &spec_), where_ + ": halo accumulate");
    copy_box(ext, {ext_shape_, x_at_}, dx, {x_shape_, Dims(x_shape_.size(), 0)}, x_shape_, accumulate);
  }

 private:
  float* scratch() {
    ext_.resize(static_cast<size_t>(volume(ext_shape_)));
    return ext_.data();
  }

  const MLPH_HostApi* host_;
  const MLPH_CommsHandle* group_;
  std::string where_;
  Dims x_shape_, y_shape_, ext_shape_;  // ext: x with symmetric halos on the split dims, zeros elsewhere
  Dims x_at_, y_at_;                    // where x and y lie in ext
  MLPH_HaloSpec spec_{};
  bool direct_ = false;  // ext is y: the exchange runs in the output
  size_t sent_ = 0;
  std::vector<float> ext_;  // scratch: the extended block (backward always, forward unless direct)
};

// spatial_gather: x [N, S.., C] -> y [N, S*grid.., C], the sample's blocks put together on every rank.
class SpatialGather {
 public:
  SpatialGather(const MLPH_HostApi* host, const MLPH_CommsHandle* group, const Dims& x_shape, const Dims& grid,
                std::string where)
      : host_(host), group_(group), where_(std::move(where)), grid_(grid), x_shape_(x_shape), y_shape_(x_shape) {
    for (size_t d = 0; d < grid.size(); ++d) y_shape_[d + 1] *= grid[d];
    rank_ = rank_in(host_, group_, where_);
  }

  void forward(const float* x, float* y) {
    const size_t block = static_cast<size_t>(volume(x_shape_));
    if (!group_) return static_cast<void>(std::memcpy(y, x, block * sizeof(float)));
    blocks_.resize(block * static_cast<size_t>(ranks(grid_)));
    check(host_, group_->api->allgather(group_->comm, x, blocks_.data(), block * sizeof(float)),
          where_ + ": allgather");
    for (int64_t r = 0; r < ranks(grid_); ++r)
      copy_box(blocks_.data() + static_cast<size_t>(r) * block, {x_shape_, Dims(x_shape_.size(), 0)}, y,
               {y_shape_, at(r)}, x_shape_);
  }

  // dx = (or +=) this rank's block of the sum of dy over the sample's ranks.
  void backward(const float* dy, float* dx, bool accumulate) {
    const size_t whole = static_cast<size_t>(volume(y_shape_));
    const float* sum = dy;
    if (group_) {
      sum_.assign(dy, dy + whole);
      check(host_, group_->api->allreduce(group_->comm, sum_.data(), whole, MLPH_DTYPE_F32, MLPH_REDUCE_SUM),
            where_ + ": gradient allreduce");
      sum = sum_.data();
    }
    copy_box(sum, {y_shape_, at(rank_)}, dx, {x_shape_, Dims(x_shape_.size(), 0)}, x_shape_, accumulate);
  }

 private:
  // Where the block of the sample's rank `r` starts in the whole.
  Dims at(int64_t r) const {
    const Dims c = coordinates(grid_, r);
    Dims from(x_shape_.size(), 0);
    for (size_t d = 0; d < c.size(); ++d) from[d + 1] = c[d] * x_shape_[d + 1];
    return from;
  }

  const MLPH_HostApi* host_;
  const MLPH_CommsHandle* group_;
  std::string where_;
  Dims grid_, x_shape_, y_shape_;
  int32_t rank_ = 0;
  std::vector<float> blocks_, sum_;
};

}  // namespace mlph::sdk::spatial
