#include "net.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "mlph/sdk/util/error.hpp"

namespace mlph::onednn {

int64_t Value::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

memory::data_type onednn_type(MLPH_DType dtype) {
  switch (dtype) {
    case MLPH_DTYPE_F32: return memory::data_type::f32;
    case MLPH_DTYPE_I16: return memory::data_type::f32;  // oneDNN has no int16: converted on load
    case MLPH_DTYPE_I32: return memory::data_type::s32;
    default: sdk::fail(MLPH_UNIMPLEMENTED, "onednn-cpu backend: only float32, int16 and int32 values are supported");
  }
}

memory::desc plain_desc(const std::vector<int64_t>& shape, MLPH_DType dtype) {
  const memory::data_type type = onednn_type(dtype);
  if (shape.size() == 4 || shape.size() == 5) {
    Dims dims{shape.front(), shape.back()};  // oneDNN's logical order: N, C, spatial...
    dims.insert(dims.end(), shape.begin() + 1, shape.end() - 1);
    return {dims, type, shape.size() == 4 ? Tag::nhwc : Tag::ndhwc};
  }
  if (shape.empty()) return {Dims{1}, type, Tag::a};
  Dims dims(shape.begin(), shape.end()), strides(shape.size(), 1);
  for (size_t i = shape.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  return {dims, type, strides};
}

memory::desc retyped(const memory::desc& desc, memory::data_type type) {
  dnnl_memory_desc_t d = desc.data;
  d.data_type = static_cast<dnnl_data_type_t>(type);
  return memory::desc(d);
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& f) {
  if (n < (1 << 14)) return f(0, n);  // waking the team costs more than the work
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
    const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    if (begin < end) f(begin, end);
  }
}

memory Scratchpad::bind(const dnnl::engine& engine, const memory::desc& desc) {
  size_ = std::max(size_, desc.get_size());
  return bound_.emplace_back(desc, engine, static_cast<void*>(DNNL_MEMORY_NONE));
}

void Scratchpad::allocate(const dnnl::engine& engine) {
  buffer_ = memory(memory::desc({static_cast<memory::dim>(std::max<size_t>(size_, 1))}, memory::data_type::u8, Tag::a),
                   engine);
  for (memory& m : bound_) m.set_data_handle(buffer_.get_data_handle());
}

void Net::define(int32_t v, const memory::desc& desc, std::optional<memory> alias) {
  Value& value = at(v);
  value.mem = alias ? *alias : memory(desc, engine);
  if (needs_grad(v) && !value.grad) value.grad = memory(desc, engine);
}

dnnl::primitive_attr Net::attr() const {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

Step Net::reorder(const memory& from, const memory& to, const dnnl::primitive_attr& with) {
  return step<dnnl::reorder>(dnnl::reorder::primitive_desc(engine, from.get_desc(), engine, to.get_desc(), with),
                             {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

memory Net::convert(const memory& src, const memory::desc& want, std::vector<Step>& steps) {
  if (src.get_desc() == want) return src;
  memory dst(want, engine);
  steps.push_back(reorder(src, dst));
  return dst;
}

memory::desc Net::stored(int32_t v, const memory::desc& desc) const { return retyped(desc, stored_type(v)); }

memory Net::as_type(int32_t v, memory::data_type type, std::vector<Step>& steps) {
  const memory& m = at(v).mem;
  return convert(m, retyped(m.get_desc(), type), steps);
}

memory Net::embed(const memory& small, const memory::desc& big, std::vector<Step>& steps, int64_t taps, int64_t pad) {
  memory whole(big, engine);
  std::memset(whole.get_data_handle(), 0, big.get_size());
  const memory::desc& from = small.get_desc();
  const Dims dims = from.dims();
  const int64_t width = dims.back(), out_width = big.dims().back();
  for (int64_t t = 0; t < taps; ++t) {
    // Positions p of big whose source p + t - pad lies inside small; the others stay zero.
    const int64_t first = std::max<int64_t>(0, pad - t), last = std::min(out_width, width + pad - t);
    if (last <= first) continue;
    Dims part_dims = dims, from_at(dims.size(), 0), to_at(dims.size(), 0);
    part_dims.back() = last - first;
    from_at.back() = first + t - pad, to_at.back() = first, to_at[1] = t * dims[1];
    const memory src(from.submemory_desc(part_dims, from_at), engine, small.get_data_handle());
    const memory dst(big.submemory_desc(part_dims, to_at), engine, whole.get_data_handle());
    steps.push_back(reorder(src, dst));
  }
  return whole;
}

void Net::ready_grad(int32_t v) {
  Value& value = at(v);
  if (value.grad_written) return;
  std::memset(value.grad.get_data_handle(), 0, value.grad.get_desc().get_size());
  value.grad_written = true;
}

GradSink::GradSink(Net& net, int32_t v, const memory::desc& writer, std::optional<memory> source,
                   std::optional<memory::desc> grad_view)
    : net_(&net), v_(v) {
  const Value& value = net.at(v);
  grad_ = grad_view ? net.view(value.grad, *grad_view) : value.grad;
  same_layout_ = !source && writer == grad_.get_desc();
  if (same_layout_ && net.contributors(v) == 1 && !value.is_param) return;  // always written in place
  source_ = source ? *source : memory(writer, net.engine);  // a given source is in `writer` already
  overwrite_ = net.reorder(source_, grad_);
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  dnnl::primitive_attr add = net.attr();
  add.set_post_ops(sum);
  accumulate_ = net.reorder(source_, grad_, add);
}

memory GradSink::target() {
  direct_ = same_layout_ && (!source_ || !net_->at(v_).grad_written);
  return direct_ ? grad_ : source_;
}

void GradSink::commit() {
  Value& value = net_->at(v_);
  if (!direct_) (value.grad_written ? *accumulate_ : *overwrite_)(net_->stream);
  value.grad_written = true;
}

}  // namespace mlph::onednn
