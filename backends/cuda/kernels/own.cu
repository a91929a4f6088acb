// The launchers of issue 33's kernels (launch.hpp): depthwise convolution, fused batch-norm + ReLU,
// add + ReLU, and CosmoFlow's bias + leaky ReLU + max-pool (one thread per window and channel).
// Channels-last bodies over [positions, C] on the 2-D grid of grid.cuh, 4 channels (16 bytes; 8 for
// bf16 storage) per thread where C is a multiple of that and every buffer 16-byte aligned, else one.
#include "channel_sums.cuh"
#include "grid.cuh"
#include "launch.hpp"

namespace mlph::cuda {
namespace {

// 16-byte vectors of T: 4 floats or 8 bf16.
template <class T>
cudaError_t bn_relu_apply(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const float* scale_shift, T* y) {
  constexpr int V = kLanes<T>;
  if (aligned_16(channels, V, x, scale_shift, y))
    return each_row_vector<batch_norm_relu_apply_at<V, T>, V>(stream, rows, channels, channels, x, scale_shift, y);
  return each_row_vector<batch_norm_relu_apply_at<1, T>, 1>(stream, rows, channels, channels, x, scale_shift, y);
}

template <class T>
cudaError_t add_relu_fwd(cudaStream_t stream, int64_t rows, int64_t channels, const T* a, const T* b, T* y) {
  constexpr int V = kLanes<T>;
  if (aligned_16(channels, V, a, b, y))
    return each_row_vector<add_relu_forward_at<V, T>, V>(stream, rows, channels, channels, a, b, y);
  return each_row_vector<add_relu_forward_at<1, T>, 1>(stream, rows, channels, channels, a, b, y);
}

template <class T>
cudaError_t add_relu_bwd(cudaStream_t stream, int64_t rows, int64_t channels, const T* y, const T* dy, T* da, T* db,
                         unsigned first) {
  constexpr int V = kLanes<T>;
  if (aligned_16(channels, V, y, dy, da, db))  // a null pointer is aligned
    return each_row_vector<add_relu_backward_at<V, T>, V>(stream, rows, channels, channels, y, dy, da, db, first);
  return each_row_vector<add_relu_backward_at<1, T>, 1>(stream, rows, channels, channels, y, dy, da, db, first);
}

template <class T>
cudaError_t depthwise_fwd(cudaStream_t stream, const DepthwiseShape& s, const T* x, const float* w, const float* b, T* y) {
  constexpr int V = kLanes<T>;
  if (s.bias && !b) return cudaErrorInvalidValue;
  if (aligned_16(s.channels, V, x, w, b, y))
    return each_row_vector<depthwise_forward_at<V, T>, V>(stream, s.out_positions(), s.channels, s, x, w, b, y);
  return each_row_vector<depthwise_forward_at<1, T>, 1>(stream, s.out_positions(), s.channels, s, x, w, b, y);
}

template <class T>
cudaError_t depthwise_bwd_data(cudaStream_t stream, const DepthwiseShape& s, const float* w, const T* dy, T* dx,
                               bool accumulate) {
  constexpr int V = kLanes<T>;
  if (aligned_16(s.channels, V, w, dy, dx))
    return each_row_vector<depthwise_backward_data_at<V, T>, V>(stream, s.in_positions(), s.channels, s, w, dy, dx,
                                                                accumulate);
  return each_row_vector<depthwise_backward_data_at<1, T>, 1>(stream, s.in_positions(), s.channels, s, w, dy, dx,
                                                              accumulate);
}

template <class T>
cudaError_t chain_forward(cudaStream_t stream, const PoolChainShape& s, const T* z, const float* bias, T* y,
                          uint8_t* winner) {
  if (!sdk::kernels::pool_chain_supports(s) || s.channel_block != s.channels) return cudaErrorInvalidValue;
  return each_row_channel<chain_pool_forward_at<T, T>>(stream, s.out_positions(), s.channels, s, z, bias, y, winner);
}

template <class T>
cudaError_t chain_backward(cudaStream_t stream, const PoolChainShape& s, const T* z, const float* bias, const T* dy,
                           const uint8_t* winner, T* dz) {
  if (!sdk::kernels::pool_chain_supports(s) || s.channel_block != s.channels) return cudaErrorInvalidValue;
  if (!sdk::kernels::pool_chain_covers(s)) {  // the ragged edge lies in no window: its gradient is 0
    const int64_t count = s.batch * s.in[0] * s.in[1] * s.in[2] * s.channels;
    if (const cudaError_t e = cudaMemsetAsync(dz, 0, static_cast<size_t>(count) * sizeof(T), stream); e != cudaSuccess)
      return e;
  }
  return each_row_channel<chain_pool_backward_at<T, T>>(stream, s.out_positions(), s.channels, s, z, bias, dy, winner,
                                                        dz);
}

template <class T>
cudaError_t bn_relu_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const T* dy,
                                  const float* saved, const float* scale_shift, double* sums, void* workspace,
                                  size_t workspace_bytes) {
  return channel_sums(stream, BatchNormReluBackwardTerm<T>{x, dy, saved, scale_shift, channels}, 1, rows, channels, sums,
                      workspace, workspace_bytes, sums + 2 * channels, static_cast<double>(rows));
}

template <class T>
cudaError_t bn_relu_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const T* x, const T* dy,
                                  const float* gamma, const float* saved, const float* scale_shift, const double* sums,
                                  float* coefficients, T* dx, bool accumulate) {
  if (const cudaError_t e = each<batch_norm_backward_coefficients_at>(stream, channels, channels, sums, gamma, saved,
                                                                      coefficients);
      e != cudaSuccess)
    return e;
  return each_row_channel<batch_norm_relu_backward_data_at<T>>(stream, rows, channels, channels, x, dy, saved,
                                                               scale_shift, static_cast<const float*>(coefficients), dx,
                                                               accumulate);
}

// dw, db from x and dy as stored: a deterministic channel sum of the widened products.
template <class T>
cudaError_t depthwise_bwd_weights(cudaStream_t stream, const DepthwiseShape& s, const T* x, const T* dy, float* dw,
                                  float* db, void* workspace, size_t workspace_bytes) {
  if (!workspace || workspace_bytes < depthwise_workspace_bytes(s)) return cudaErrorInvalidValue;
  const int64_t rows = s.out_positions(), weights = s.taps() * s.channels;
  if (dw) {
    const bool three = is_depthwise_3x3(s);
    const ChannelScratch scratch = three ? channel_scratch(workspace, workspace_bytes, 1, rows, s.channels, 9)
                                         : channel_scratch(workspace, workspace_bytes, 1, rows, weights);
    const cudaError_t e = three ? channel_sums(stream, Depthwise3x3WeightTerm<T>{s, x, dy}, 1, rows, s.channels,
                                               scratch.sums, workspace, workspace_bytes)
                                : channel_sums(stream, DepthwiseWeightTerm<T>{s, x, dy}, 1, rows, weights, scratch.sums,
                                               workspace, workspace_bytes);
    if (e != cudaSuccess) return e;
    if (const cudaError_t e2 = each<depthwise_weight_add_at>(stream, weights, static_cast<const double*>(scratch.sums), dw);
        e2 != cudaSuccess)
      return e2;
  }
  if (!db) return cudaSuccess;
  return bias_backward(stream, rows, s.channels, dy, db, workspace, workspace_bytes);
}

}  // namespace

// ---- fused ----

cudaError_t batch_norm_relu_apply(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                  const float* scale_shift, float* y) {
  return bn_relu_apply(stream, rows, channels, x, scale_shift, y);
}

cudaError_t batch_norm_relu_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                          const float* dy, const float* saved, const float* scale_shift, double* sums,
                                          void* workspace, size_t workspace_bytes) {
  return bn_relu_backward_sums(stream, rows, channels, x, dy, saved, scale_shift, sums, workspace, workspace_bytes);
}

cudaError_t batch_norm_relu_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                          const float* dy, const float* gamma, const float* saved,
                                          const float* scale_shift, const double* sums, float* coefficients,
                                          float* dx, bool accumulate) {
  return bn_relu_backward_data(stream, rows, channels, x, dy, gamma, saved, scale_shift, sums, coefficients, dx,
                               accumulate);
}

cudaError_t add_relu_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* a, const float* b,
                             float* y) {
  return add_relu_fwd(stream, rows, channels, a, b, y);
}

cudaError_t add_relu_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* y, const float* dy,
                              float* da, float* db, unsigned first) {
  return add_relu_bwd(stream, rows, channels, y, dy, da, db, first);
}

// ---- pool chain ----

cudaError_t pool_chain_forward(cudaStream_t stream, const PoolChainShape& s, const float* z, const float* bias, float* y,
                               uint8_t* winner) {
  return chain_forward(stream, s, z, bias, y, winner);
}
cudaError_t pool_chain_backward(cudaStream_t stream, const PoolChainShape& s, const float* z, const float* bias,
                                const float* dy, const uint8_t* winner, float* dz) {
  return chain_backward(stream, s, z, bias, dy, winner, dz);
}

// ---- depthwise ----

cudaError_t depthwise_forward(cudaStream_t stream, const DepthwiseShape& s, const float* x, const float* w,
                              const float* b, float* y) {
  return depthwise_fwd(stream, s, x, w, b, y);
}

cudaError_t depthwise_backward_data(cudaStream_t stream, const DepthwiseShape& s, const float* w, const float* dy,
                                    float* dx, bool accumulate) {
  return depthwise_bwd_data(stream, s, w, dy, dx, accumulate);
}

cudaError_t depthwise_backward_weights(cudaStream_t stream, const DepthwiseShape& s, const float* x, const float* dy,
                                       float* dw, float* db, void* workspace, size_t workspace_bytes) {
  return depthwise_bwd_weights(stream, s, x, dy, dw, db, workspace, workspace_bytes);
}

// The half-storage overloads of launch.hpp (bf16 and fp16: one template each above, instantiated for
// both types by the one list below).
#define MLPH_HALF_DEFINITIONS(H) \
cudaError_t batch_norm_relu_apply(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,                   \
                                  const float* scale_shift, H* y) {                                                  \
  return bn_relu_apply(stream, rows, channels, x, scale_shift, y);                                                   \
}                                                                                                                    \
cudaError_t batch_norm_relu_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,           \
                                          const H* dy, const float* saved, const float* scale_shift, double* sums,   \
                                          void* workspace, size_t workspace_bytes) {                                 \
  return bn_relu_backward_sums(stream, rows, channels, x, dy, saved, scale_shift, sums, workspace, workspace_bytes); \
}                                                                                                                    \
cudaError_t batch_norm_relu_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,           \
                                          const H* dy, const float* gamma, const float* saved,                       \
                                          const float* scale_shift, const double* sums, float* coefficients,         \
                                          H* dx, bool accumulate) {                                                  \
  return bn_relu_backward_data(stream, rows, channels, x, dy, gamma, saved, scale_shift, sums, coefficients, dx,     \
                               accumulate);                                                                          \
}                                                                                                                    \
cudaError_t add_relu_forward(cudaStream_t stream, int64_t rows, int64_t channels, const H* a, const H* b, H* y) {    \
  return add_relu_fwd(stream, rows, channels, a, b, y);                                                              \
}                                                                                                                    \
cudaError_t add_relu_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* y, const H* dy,          \
                              H* da, H* db, unsigned first) {                                                        \
  return add_relu_bwd(stream, rows, channels, y, dy, da, db, first);                                                 \
}                                                                                                                    \
cudaError_t pool_chain_forward(cudaStream_t stream, const PoolChainShape& s, const H* z, const float* bias, H* y,    \
                               uint8_t* winner) {                                                                    \
  return chain_forward(stream, s, z, bias, y, winner);                                                               \
}                                                                                                                    \
cudaError_t pool_chain_backward(cudaStream_t stream, const PoolChainShape& s, const H* z, const float* bias,         \
                                const H* dy, const uint8_t* winner, H* dz) {                                         \
  return chain_backward(stream, s, z, bias, dy, winner, dz);                                                         \
}                                                                                                                    \
cudaError_t depthwise_forward(cudaStream_t stream, const DepthwiseShape& s, const H* x, const float* w,              \
                              const float* b, H* y) {                                                                \
  return depthwise_fwd(stream, s, x, w, b, y);                                                                       \
}                                                                                                                    \
cudaError_t depthwise_backward_data(cudaStream_t stream, const DepthwiseShape& s, const float* w, const H* dy,       \
                                    H* dx, bool accumulate) {                                                        \
  return depthwise_bwd_data(stream, s, w, dy, dx, accumulate);                                                       \
}                                                                                                                    \
cudaError_t depthwise_backward_weights(cudaStream_t stream, const DepthwiseShape& s, const H* x, const H* dy,        \
                                       float* dw, float* db, void* workspace, size_t workspace_bytes) {              \
  return depthwise_bwd_weights(stream, s, x, dy, dw, db, workspace, workspace_bytes);                                \
}

MLPH_HALF_DEFINITIONS(Bf16)
MLPH_HALF_DEFINITIONS(F16)
#undef MLPH_HALF_DEFINITIONS

}  // namespace mlph::cuda
