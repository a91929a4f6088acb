// The launchers of launch.hpp whose kernels are one body per element, row or channel, with no sums:
// each is a grid-stride loop (grid.cuh) over a body of the headers beside this file.
#include "grid.cuh"
#include "launch.hpp"

namespace mlph::cuda {
namespace {

// relu, add and accumulate over activations stored as T (float, or Bf16: issue 33 item 4): 16-byte
// vectors (kLanes<T> elements) where every buffer is aligned, the scalar body on the rest.
template <class T>
cudaError_t relu_fwd(cudaStream_t stream, int64_t n, const T* x, T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<relu_forward_vec_at<V, T>, relu_forward_at<T>, V>(stream, n, aligned_16(x, y), x, y);
}
template <class T>
cudaError_t relu_bwd(cudaStream_t stream, int64_t n, const T* x, const T* dy, T* dx, bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<relu_backward_vec_at<V, T>, relu_backward_at<T>, V>(stream, n,
                      aligned_16(x, dy, dx), x, dy, dx, accumulate);
}
template <class T>
cudaError_t add_fwd(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<add_forward_vec_at<V, T>, add_forward_at<T>, V>(stream, n, aligned_16(a, b, y), a, b, y);
}
template <class T>
cudaError_t accumulate_into(cudaStream_t stream, int64_t n, const T* dy, T* dx, bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<accumulate_vec_at<V, T>, accumulate_at<T>, V>(stream, n, aligned_16(dy, dx), dy, dx, accumulate);
}

// max pooling over T: the reference's rules (pool.hpp). Tiling windows (CosmoFlow's): a thread per
// window finds its winner once; else a thread per element of dx gathers from every window that holds
// it (each window's winner found once per tap: 8x at 2^3), adding into dx.
template <class T>
cudaError_t max_pool_fwd(cudaStream_t stream, const PoolShape& shape, const T* x, T* y) {
  return each_row_channel<max_pool_forward_at<T>>(stream, shape.out_positions(), shape.channels, shape, x, y);
}
template <class T>
cudaError_t max_pool_bwd(cudaStream_t stream, const PoolShape& shape, const T* x, const T* dy, T* dx, bool accumulate) {
  if (!accumulate && !pool_windows_cover(shape)) return cudaErrorInvalidValue;  // some dx would keep what it held
  if (pool_windows_tile(shape))
    return each_row_channel<max_pool_backward_tiled_at<T>>(stream, shape.out_positions(), shape.channels, shape, x, dy,
                                                           dx, accumulate);
  return each_row_channel<max_pool_backward_at<T>>(stream, shape.in_positions(), shape.channels, shape, x, dy, dx);
}

// leaky ReLU, tanh, scale, dropout and copies over T, as relu above.
template <class T>
cudaError_t leaky_relu_fwd(cudaStream_t stream, int64_t n, float alpha, const T* x, T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<leaky_relu_forward_vec_at<V, T>, leaky_relu_forward_at<T>, V>(stream, n,
                      aligned_16(x, y), alpha, x, y);
}
template <class T>
cudaError_t leaky_relu_bwd(cudaStream_t stream, int64_t n, float alpha, const T* x, const T* dy, T* dx,
                           bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<leaky_relu_backward_vec_at<V, T>, leaky_relu_backward_at<T>, V>(stream, n,
                      aligned_16(x, dy, dx), alpha, x, dy, dx, accumulate);
}
template <class T>
cudaError_t tanh_fwd(cudaStream_t stream, int64_t n, const T* x, T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<tanh_forward_vec_at<V, T>, tanh_forward_at<T>, V>(stream, n, aligned_16(x, y), x, y);
}
template <class T>
cudaError_t tanh_bwd(cudaStream_t stream, int64_t n, const T* y, const T* dy, T* dx, bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<tanh_backward_vec_at<V, T>, tanh_backward_at<T>, V>(stream, n,
                      aligned_16(y, dy, dx), y, dy, dx, accumulate);
}
template <class T>
cudaError_t scale_fwd(cudaStream_t stream, int64_t n, float factor, const T* x, T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<scale_forward_vec_at<V, T>, scale_forward_at<T>, V>(stream, n, aligned_16(x, y), factor, x, y);
}
template <class T>
cudaError_t scale_bwd(cudaStream_t stream, int64_t n, float factor, const T* dy, T* dx, bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<scale_backward_vec_at<V, T>, scale_backward_at<T>, V>(stream, n,
                      aligned_16(dy, dx), factor, dy, dx, accumulate);
}
template <class T>
cudaError_t dropout_fwd(cudaStream_t stream, int64_t n, const DropoutStream& d, const uint64_t* micro_step, const T* x,
                        T* y) {
  constexpr int V = kLanes<T>;
  return each_aligned<dropout_forward_vec_at<V, T>, dropout_forward_at<T>, V>(stream, n,
                      aligned_16(x, y), d, micro_step, x, y);
}
template <class T>
cudaError_t dropout_bwd(cudaStream_t stream, int64_t n, const DropoutStream& d, const uint64_t* micro_step, const T* dy,
                        T* dx, bool accumulate) {
  constexpr int V = kLanes<T>;
  return each_aligned<dropout_backward_vec_at<V, T>, dropout_backward_at<T>, V>(stream, n,
                      aligned_16(dy, dx), d, micro_step, dy, dx, accumulate);
}
template <class T>
cudaError_t copy_values(cudaStream_t stream, int64_t n, const T* x, T* y) {
  if (n <= 0) return cudaSuccess;
  return cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream);
}

int64_t total_width(std::span<const int64_t> widths) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  return total;
}

template <class T>
cudaError_t concat_fwd(cudaStream_t stream, int64_t rows, std::span<const T* const> inputs, std::span<const int64_t> widths,
                       T* y) {
  if (inputs.size() != widths.size()) return cudaErrorInvalidValue;
  const int64_t total = total_width(widths);
  int64_t offset = 0;
  for (size_t k = 0; k < inputs.size(); offset += widths[k], ++k)
    if (const cudaError_t e = each_row_channel<copy_columns_at<T>>(stream, rows, widths[k], widths[k], inputs[k], total,
                                                                   offset, y);
        e != cudaSuccess)
      return e;
  return cudaSuccess;
}
template <class T>
cudaError_t concat_bwd(cudaStream_t stream, int64_t rows, std::span<T* const> grads, std::span<const int64_t> widths,
                       const T* dy, uint64_t first) {
  if (grads.size() != widths.size()) return cudaErrorInvalidValue;
  const int64_t total = total_width(widths);
  int64_t offset = 0;
  for (size_t k = 0; k < grads.size(); offset += widths[k], ++k) {
    if (!grads[k]) continue;
    if (const cudaError_t e =
            each_row_channel<add_columns_at<T>>(stream, rows, widths[k], widths[k], dy, total, offset, grads[k],
                                                !(k < 64 && (first >> k & 1u)));
        e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

// Global average pooling's backward and broadcast over x, y (and their gradients) stored as T.
template <class T>
cudaError_t global_avg_pool_bwd(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels, const T* dy,
                                T* dx, bool accumulate) {
  const float inverse = 1.0f / static_cast<float>(positions);
  return each_row_channel<global_avg_pool_backward_at<T>>(stream, batch * positions, channels, channels, positions,
                                                          inverse, dy, dx, accumulate);
}
template <class T>
cudaError_t broadcast_fwd(cudaStream_t stream, const BroadcastShape& shape, const T* x, T* y) {
  return each_row_channel<broadcast_forward_at<T>>(stream, shape.out_rows(), shape.channels(), shape, x, y);
}
template <class T>
cudaError_t broadcast_bwd(cudaStream_t stream, const BroadcastShape& shape, const T* dy, T* dx, bool accumulate) {
  return each_row_channel<broadcast_backward_at<T>>(stream, shape.in_rows(), shape.channels(), shape, dy, dx,
                                                    accumulate);
}

}  // namespace

// ---- element-wise ----

cudaError_t log1p_forward(cudaStream_t stream, int64_t n, const float* x, float* y) {
  return each<log1p_forward_at>(stream, n, x, y);
}
cudaError_t log1p_forward(cudaStream_t stream, int64_t n, const int16_t* x, float* y) {
  return each<log1p_int16_forward_at>(stream, n, x, y);
}
cudaError_t int16_to_float(cudaStream_t stream, int64_t n, const int16_t* x, float* y) {
  return each<int16_to_float_at>(stream, n, x, y);
}
cudaError_t leaky_relu_forward(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y) {
  return leaky_relu_fwd(stream, n, alpha, x, y);
}
cudaError_t leaky_relu_backward(cudaStream_t stream, int64_t n, float alpha, const float* x, const float* dy,
                                float* dx, bool accumulate) {
  return leaky_relu_bwd(stream, n, alpha, x, dy, dx, accumulate);
}
cudaError_t relu_forward(cudaStream_t stream, int64_t n, const float* x, float* y) { return relu_fwd(stream, n, x, y); }
cudaError_t relu_backward(cudaStream_t stream, int64_t n, const float* x, const float* dy, float* dx, bool accumulate) {
  return relu_bwd(stream, n, x, dy, dx, accumulate);
}
cudaError_t tanh_forward(cudaStream_t stream, int64_t n, const float* x, float* y) { return tanh_fwd(stream, n, x, y); }
cudaError_t tanh_backward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx, bool accumulate) {
  return tanh_bwd(stream, n, y, dy, dx, accumulate);
}
cudaError_t scale_forward(cudaStream_t stream, int64_t n, float factor, const float* x, float* y) {
  return scale_fwd(stream, n, factor, x, y);
}
cudaError_t scale_backward(cudaStream_t stream, int64_t n, float factor, const float* dy, float* dx, bool accumulate) {
  return scale_bwd(stream, n, factor, dy, dx, accumulate);
}
cudaError_t add_forward(cudaStream_t stream, int64_t n, const float* a, const float* b, float* y) {
  return add_fwd(stream, n, a, b, y);
}
cudaError_t accumulate(cudaStream_t stream, int64_t n, const float* dy, float* dx, bool accumulate) {
  return accumulate_into(stream, n, dy, dx, accumulate);
}
cudaError_t copy(cudaStream_t stream, int64_t n, const float* x, float* y) { return copy_values(stream, n, x, y); }
cudaError_t dropout_forward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of, const uint64_t* micro_step,
                            const float* x, float* y) {
  return dropout_fwd(stream, n, stream_of, micro_step, x, y);
}
cudaError_t dropout_backward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,
                             const uint64_t* micro_step, const float* dy, float* dx, bool accumulate) {
  return dropout_bwd(stream, n, stream_of, micro_step, dy, dx, accumulate);
}
cudaError_t dropout_mask(cudaStream_t stream, int64_t n, const DropoutStream& stream_of, const uint64_t* micro_step,
                         float* mask) {
  return each<dropout_mask_at>(stream, n, stream_of, micro_step, mask);
}

// ---- per channel and layout ----

cudaError_t channel_affine_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                   const float* w, const float* b, float* y) {
  return each_row_channel<channel_affine_forward_at<float>>(stream, rows, channels, channels, x, w, b, y);
}
cudaError_t shift_scale_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                const float* shift, const float* scale, float* y) {
  return each_row_channel<shift_scale_forward_at<float>>(stream, rows, channels, channels, x, shift, scale, y);
}

cudaError_t concat_forward(cudaStream_t stream, int64_t rows, std::span<const float* const> inputs,
                           std::span<const int64_t> widths, float* y) {
  return concat_fwd(stream, rows, inputs, widths, y);
}
cudaError_t concat_backward(cudaStream_t stream, int64_t rows, std::span<float* const> grads,
                            std::span<const int64_t> widths, const float* dy, uint64_t first) {
  return concat_bwd(stream, rows, grads, widths, dy, first);
}

cudaError_t global_avg_pool_backward(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels,
                                     const float* dy, float* dx, bool accumulate) {
  return global_avg_pool_bwd(stream, batch, positions, channels, dy, dx, accumulate);
}

cudaError_t broadcast_forward(cudaStream_t stream, const BroadcastShape& shape, const float* x, float* y) {
  return broadcast_fwd(stream, shape, x, y);
}
cudaError_t broadcast_backward(cudaStream_t stream, const BroadcastShape& shape, const float* dy, float* dx,
                               bool accumulate) {
  return broadcast_bwd(stream, shape, dy, dx, accumulate);
}

// ---- max pooling ----

cudaError_t max_pool_forward(cudaStream_t stream, const PoolShape& shape, const float* x, float* y) {
  return max_pool_fwd(stream, shape, x, y);
}
cudaError_t max_pool_backward(cudaStream_t stream, const PoolShape& shape, const float* x, const float* dy,
                              float* dx, bool accumulate) {
  return max_pool_bwd(stream, shape, x, dy, dx, accumulate);
}

// ---- losses' backward passes (their forward passes are sums: reductions.cu) ----

cudaError_t mse_backward(cudaStream_t stream, int64_t n, const float* prediction, const float* target,
                         const float* dloss, float* dprediction, float* dtarget, unsigned first) {
  return each<mse_backward_at>(stream, n, n, dloss, prediction, target, dprediction, dtarget, first);
}
cudaError_t softmax_cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes, const float* logits,
                                           const int32_t* labels, const float* class_weights, const float* dloss,
                                           float* dlogits, bool accumulate) {
  return each<softmax_cross_entropy_backward_at>(stream, rows, rows, classes, logits, labels, class_weights, dloss,
                                                 dlogits, accumulate);
}

namespace {
// The lowest bad index wins whatever the order threads run in: an integer minimum is exact.
__global__ void find_bad_label_kernel(int64_t n, const int32_t* labels, int64_t classes,
                                      unsigned long long* first) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    if (!label_ok(labels[i], classes)) atomicMin(first, static_cast<unsigned long long>(i));
}
}  // namespace

cudaError_t find_bad_label(cudaStream_t stream, int64_t n, const int32_t* labels, int64_t classes, int64_t* first) {
  // All ones: -1 as int64, the largest value to atomicMin.
  if (const cudaError_t e = cudaMemsetAsync(first, 0xff, sizeof(int64_t), stream); e != cudaSuccess) return e;
  if (n > 0)
    find_bad_label_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, labels, classes,
                                                                  reinterpret_cast<unsigned long long*>(first));
  return cudaGetLastError();
}

// ---- mixed precision ----

cudaError_t float_to_bfloat16(cudaStream_t stream, int64_t n, const float* x, uint16_t* y) {
  return convert(stream, n, FloatType::f32, x, FloatType::bf16, y);
}
cudaError_t bfloat16_to_float(cudaStream_t stream, int64_t n, const uint16_t* x, float* y) {
  return convert(stream, n, FloatType::bf16, x, FloatType::f32, y);
}
cudaError_t float_to_half(cudaStream_t stream, int64_t n, const float* x, uint16_t* y) {
  return convert(stream, n, FloatType::f32, x, FloatType::f16, y);
}
cudaError_t half_to_float(cudaStream_t stream, int64_t n, const uint16_t* x, float* y) {
  return convert(stream, n, FloatType::f16, x, FloatType::f32, y);
}

namespace {
__global__ void update_loss_scale_kernel(LossScaleRule rule, const double* nonfinite, float* scale,
                                         int32_t* good_steps) {
  loss_scale_step(rule, *nonfinite, scale, good_steps);
}
}  // namespace

cudaError_t update_loss_scale(cudaStream_t stream, const LossScaleRule& rule, const double* nonfinite, float* scale,
                              int32_t* good_steps) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(rule, nonfinite, scale, good_steps);
  return cudaGetLastError();
}

// ---- layout and types ----

cudaError_t convert(cudaStream_t stream, int64_t n, FloatType from, const void* x, FloatType to, void* y) {
  if (from == to && n > 0)
    return cudaMemcpyAsync(y, x, static_cast<size_t>(n) * (to == FloatType::f32 ? 4 : 2), cudaMemcpyDeviceToDevice,
                           stream);
  if (aligned_16(x, y)) return each_vectorized<convert_vec_at<8>, convert_at, 8>(stream, n, from, x, to, y);
  return each<convert_at>(stream, n, from, x, to, y);
}
cudaError_t convert_add(cudaStream_t stream, int64_t n, FloatType from, const void* dx, float* sum, bool accumulate) {
  if (aligned_16(dx, sum))
    return each_vectorized<convert_add_vec_at<8>, convert_add_at, 8>(stream, n, from, dx, sum, accumulate);
  return each<convert_add_at>(stream, n, from, dx, sum, accumulate);
}
cudaError_t bias_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* b, float* y) {
  return each_row_channel<bias_forward_at<float>>(stream, rows, channels, channels, b, y);
}
cudaError_t chunk_sum_add(cudaStream_t stream, int64_t chunks, int64_t count, const float* partials, float* dw) {
  return each<chunk_sum_add_at>(stream, count, chunks, count, partials, dw);
}
cudaError_t channels_copy(cudaStream_t stream, int64_t rows, int64_t src_width, int64_t dst_width, FloatType from,
                          const void* x, FloatType to, void* y, bool accumulate) {
  if (accumulate && to != FloatType::f32) return cudaErrorInvalidValue;
  return each<channels_copy_at>(stream, rows * dst_width, src_width, dst_width, from, x, to, y, accumulate);
}
cudaError_t taps_fold(cudaStream_t stream, const TapsFold& fold, FloatType from, const void* x, FloatType to, void* y) {
  constexpr int V = 8;  // 16 bytes of a half y
  const bool rows_of_vectors = fold.width % V == 0 && fold.channels % 4 == 0;
  return each_aligned<taps_fold_vec_at<V>, taps_fold_at, V>(stream, fold.size(), rows_of_vectors && aligned_16(x, y), fold,
                                                            from, x, to, y);
}
cudaError_t box_copy(cudaStream_t stream, const Box& box, FloatType from, const void* x, FloatType to, void* y,
                     bool accumulate) {
  if (accumulate && to != FloatType::f32) return cudaErrorInvalidValue;
  return each<box_copy_at>(stream, box.size(), box, from, x, to, y, accumulate);
}

namespace {
__global__ void latch_bad_label_kernel(const int64_t* first, const int32_t* labels, int64_t* latched) {
  latch_bad_label(first, labels, latched);
}
}  // namespace

cudaError_t latch_bad_label(cudaStream_t stream, const int64_t* first, const int32_t* labels, int64_t* latched) {
  latch_bad_label_kernel<<<1, 1, 0, stream>>>(first, labels, latched);
  return cudaGetLastError();
}

// The half-storage overloads of launch.hpp (bf16 and fp16: one template each above, instantiated for
// both types by the one list below).
#define MLPH_HALF_DEFINITIONS(H) \
cudaError_t relu_forward(cudaStream_t stream, int64_t n, const H* x, H* y) { return relu_fwd(stream, n, x, y); } \
cudaError_t relu_backward(cudaStream_t stream, int64_t n, const H* x, const H* dy, H* dx, bool accumulate) {     \
  return relu_bwd(stream, n, x, dy, dx, accumulate);                                                             \
}                                                                                                                \
cudaError_t add_forward(cudaStream_t stream, int64_t n, const H* a, const H* b, H* y) {                          \
  return add_fwd(stream, n, a, b, y);                                                                            \
}                                                                                                                \
cudaError_t accumulate(cudaStream_t stream, int64_t n, const H* dy, H* dx, bool accumulate) {                    \
  return accumulate_into(stream, n, dy, dx, accumulate);                                                         \
}                                                                                                                \
cudaError_t leaky_relu_forward(cudaStream_t stream, int64_t n, float alpha, const H* x, H* y) {                 \
  return leaky_relu_fwd(stream, n, alpha, x, y);                                                                 \
}                                                                                                                \
cudaError_t leaky_relu_backward(cudaStream_t stream, int64_t n, float alpha, const H* x, const H* dy, H* dx,     \
                                bool accumulate) {                                                               \
  return leaky_relu_bwd(stream, n, alpha, x, dy, dx, accumulate);                                                \
}                                                                                                                \
cudaError_t tanh_forward(cudaStream_t stream, int64_t n, const H* x, H* y) { return tanh_fwd(stream, n, x, y); } \
cudaError_t tanh_backward(cudaStream_t stream, int64_t n, const H* y, const H* dy, H* dx, bool accumulate) {     \
  return tanh_bwd(stream, n, y, dy, dx, accumulate);                                                             \
}                                                                                                                \
cudaError_t scale_forward(cudaStream_t stream, int64_t n, float factor, const H* x, H* y) {                      \
  return scale_fwd(stream, n, factor, x, y);                                                                     \
}                                                                                                                \
cudaError_t scale_backward(cudaStream_t stream, int64_t n, float factor, const H* dy, H* dx, bool accumulate) {  \
  return scale_bwd(stream, n, factor, dy, dx, accumulate);                                                       \
}                                                                                                                \
cudaError_t copy(cudaStream_t stream, int64_t n, const H* x, H* y) { return copy_values(stream, n, x, y); }      \
cudaError_t dropout_forward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,                      \
                            const uint64_t* micro_step, const H* x, H* y) {                                      \
  return dropout_fwd(stream, n, stream_of, micro_step, x, y);                                                    \
}                                                                                                                \
cudaError_t dropout_backward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,                     \
                             const uint64_t* micro_step, const H* dy, H* dx, bool accumulate) {                  \
  return dropout_bwd(stream, n, stream_of, micro_step, dy, dx, accumulate);                                      \
}                                                                                                                \
cudaError_t concat_forward(cudaStream_t stream, int64_t rows, std::span<const H* const> inputs,                  \
                           std::span<const int64_t> widths, H* y) {                                              \
  return concat_fwd(stream, rows, inputs, widths, y);                                                            \
}                                                                                                                \
cudaError_t concat_backward(cudaStream_t stream, int64_t rows, std::span<H* const> grads,                        \
                            std::span<const int64_t> widths, const H* dy, uint64_t first) {                                \
  return concat_bwd(stream, rows, grads, widths, dy, first);                                                     \
}                                                                                                                \
cudaError_t global_avg_pool_backward(cudaStream_t stream, int64_t batch, int64_t positions, int64_t channels,    \
                                     const H* dy, H* dx, bool accumulate) {                                      \
  return global_avg_pool_bwd(stream, batch, positions, channels, dy, dx, accumulate);                            \
}                                                                                                                \
cudaError_t channel_affine_forward(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,             \
                                   const float* w, const float* b, H* y) {                                       \
  return each_row_channel<channel_affine_forward_at<H>>(stream, rows, channels, channels, x, w, b, y);           \
}                                                                                                                \
cudaError_t shift_scale_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,            \
                                const float* shift, const float* scale, H* y) {                                  \
  return each_row_channel<shift_scale_forward_at<H>>(stream, rows, channels, channels, x, shift, scale, y);      \
}                                                                                                                \
cudaError_t broadcast_forward(cudaStream_t stream, const BroadcastShape& shape, const H* x, H* y) {              \
  return broadcast_fwd(stream, shape, x, y);                                                                     \
}                                                                                                                \
cudaError_t broadcast_backward(cudaStream_t stream, const BroadcastShape& shape, const H* dy, H* dx,            \
                               bool accumulate) {                                                                \
  return broadcast_bwd(stream, shape, dy, dx, accumulate);                                                       \
}                                                                                                                \
cudaError_t bias_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* b, H* y) {            \
  return each_row_channel<bias_forward_at<H>>(stream, rows, channels, channels, b, y);                           \
}                                                                                                                \
cudaError_t max_pool_forward(cudaStream_t stream, const PoolShape& shape, const H* x, H* y) {                    \
  return max_pool_fwd(stream, shape, x, y);                                                                      \
}                                                                                                                \
cudaError_t max_pool_backward(cudaStream_t stream, const PoolShape& shape, const H* x, const H* dy, H* dx,       \
                              bool accumulate) {                                                                 \
  return max_pool_bwd(stream, shape, x, dy, dx, accumulate);                                                     \
}

MLPH_HALF_DEFINITIONS(Bf16)
MLPH_HALF_DEFINITIONS(F16)
#undef MLPH_HALF_DEFINITIONS

}  // namespace mlph::cuda
