// The cuda backend's own kernels, launched on a stream: host functions compiled by nvcc
// (kernels.cu, reductions.cu), callable from g++-compiled code (only <cuda_runtime_api.h> comes
// along). Each enqueues its work on `stream` and returns the launch's error (cudaGetLastError), or
// cudaErrorInvalidValue for a workspace smaller than the call needs; nothing synchronizes, so they
// are captured into a CUDA graph as they are. The bodies and their exact arithmetic are in the
// headers beside this one (one per family); docs/ops.md is the specification.
//
// Conventions, for the model that calls these:
// - Every pointer is device memory (or managed), float32 unless typed otherwise; activations are
//   channels-last, seen as [rows, C] with rows = N x spatial positions. No alignment is assumed beyond
//   the element's own.
// - Backward launchers ACCUMULATE into their gradient outputs (+=), as the reference's: zero a
//   gradient before its first contribution. A null gradient pointer (where the signature says "may be
//   null") means not needed. Forward launchers overwrite their output.
// - Values that change every step are read from device memory, never passed by value, so that a
//   captured graph replays with each step's: dropout's micro_step, the loss's gradient `dloss` (1, or
//   the loss scale), the optimizers' scalars, the loss scale. Sizes and attributes are fixed at compile.
// - Sums (batch-norm statistics, losses, norms, iou counts) are deterministic: the same bits on every
//   run, whatever the device (reduce.hpp). `workspace`/`workspace_bytes`: device scratch, sized by
//   channel_sums_workspace_bytes / flat_sums_workspace_bytes / multi_tensor_workspace_bytes for the
//   call's sizes; only the call uses it (stream order).
// - Optimizer launchers take `nonfinite` (fp16 loss scaling: unscale_gradients' count; null for
//   none): a positive count skips the update on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "batch_norm.hpp"
#include "channel.hpp"
#include "depthwise.hpp"
#include "eltwise.hpp"
#include "fused.hpp"
#include "layout.hpp"
#include "loss.hpp"
#include "optimizer.hpp"
#include "pool.hpp"
#include "pool_chain.hpp"
#include "precision.hpp"
#include "reduce.hpp"

namespace mlph::cuda {

// ---- element-wise (n elements; eltwise.hpp) ----

[[nodiscard]] cudaError_t log1p_forward(cudaStream_t stream, int64_t n, const float* x, float* y);
[[nodiscard]] cudaError_t log1p_forward(cudaStream_t stream, int64_t n, const int16_t* x, float* y);
[[nodiscard]] cudaError_t int16_to_float(cudaStream_t stream, int64_t n, const int16_t* x, float* y);
[[nodiscard]] cudaError_t leaky_relu_forward(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y);
[[nodiscard]] cudaError_t leaky_relu_backward(cudaStream_t stream, int64_t n, float alpha, const float* x,
                                              const float* dy, float* dx, bool accumulate = true);
[[nodiscard]] cudaError_t relu_forward(cudaStream_t stream, int64_t n, const float* x, float* y);
[[nodiscard]] cudaError_t relu_backward(cudaStream_t stream, int64_t n, const float* x, const float* dy, float* dx,
                                        bool accumulate = true);
[[nodiscard]] cudaError_t tanh_forward(cudaStream_t stream, int64_t n, const float* x, float* y);
// From the forward's output y.
[[nodiscard]] cudaError_t tanh_backward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx,
                                        bool accumulate = true);
[[nodiscard]] cudaError_t scale_forward(cudaStream_t stream, int64_t n, float factor, const float* x, float* y);
[[nodiscard]] cudaError_t scale_backward(cudaStream_t stream, int64_t n, float factor, const float* dy, float* dx,
                                         bool accumulate = true);
[[nodiscard]] cudaError_t add_forward(cudaStream_t stream, int64_t n, const float* a, const float* b, float* y);
// dx += dy: the backward of reshape, of each input of add, of dropout in evaluation.
// `accumulate` false (here and in relu_backward, batch norm's and depthwise's data gradients,
// add_relu_backward's `first` bits): dx's first writer, dx = 0 + ... with no memset before
// (plan::NodeMemory::zeroed).
[[nodiscard]] cudaError_t accumulate(cudaStream_t stream, int64_t n, const float* dy, float* dx, bool accumulate = true);
// y = x (reshape's forward, where the memory plan does not alias them).
[[nodiscard]] cudaError_t copy(cudaStream_t stream, int64_t n, const float* x, float* y);
// Dropout in training (evaluation is a copy): `stream_of` = dropout_stream(rate, graph seed, node index);
// the mask is drawn again in the backward pass, never stored. dropout_mask writes it out (checks, tests).
[[nodiscard]] cudaError_t dropout_forward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,
                                          const uint64_t* micro_step, const float* x, float* y);
[[nodiscard]] cudaError_t dropout_backward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,
                                           const uint64_t* micro_step, const float* dy, float* dx,
                                           bool accumulate = true);
[[nodiscard]] cudaError_t dropout_mask(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,
                                       const uint64_t* micro_step, float* mask);

// ---- per channel and layout ([rows, C]; channel.hpp) ----

[[nodiscard]] cudaError_t channel_affine_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                                 const float* w, const float* b, float* y);
// dx, dw, db may be null; the workspace serves dw and db (channel_sums_workspace_bytes(1, rows, channels)).
// `accumulate` false: dx written first (0 + dy * w, no memset before).
[[nodiscard]] cudaError_t channel_affine_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                                  const float* w, const float* dy, float* dx, float* dw, float* db,
                                                  void* workspace, size_t workspace_bytes, bool accumulate = true);
[[nodiscard]] cudaError_t shift_scale_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                              const float* shift, const float* scale, float* y);
// Along channels: inputs[k] [rows, widths[k]] (host arrays of device pointers), y [rows, sum of widths].
[[nodiscard]] cudaError_t concat_forward(cudaStream_t stream, int64_t rows, std::span<const float* const> inputs,
                                         std::span<const int64_t> widths, float* y);
// grads[k] += its band of dy; null grads are skipped. `first` bit k (k < 64): grads[k] written, 0 + dy
// (its first writer, no memset before).
[[nodiscard]] cudaError_t concat_backward(cudaStream_t stream, int64_t rows, std::span<float* const> grads,
                                          std::span<const int64_t> widths, const float* dy, uint64_t first = 0);
// x [batch, positions, C] -> y [batch, C]; workspace: channel_sums_workspace_bytes(batch, positions, channels).
[[nodiscard]] cudaError_t global_avg_pool_forward(cudaStream_t stream, int64_t batch, int64_t positions,
                                                  int64_t channels, const float* x, float* y, void* workspace,
                                                  size_t workspace_bytes);
// `accumulate` false (here and in broadcast_backward): dx's first writer, 0 + ... with no memset before.
[[nodiscard]] cudaError_t global_avg_pool_backward(cudaStream_t stream, int64_t batch, int64_t positions,
                                                   int64_t channels, const float* dy, float* dx, bool accumulate = true);
// broadcast_shape(node.in_shape, node.out_shape).
[[nodiscard]] cudaError_t broadcast_forward(cudaStream_t stream, const BroadcastShape& shape, const float* x,
                                            float* y);
[[nodiscard]] cudaError_t broadcast_backward(cudaStream_t stream, const BroadcastShape& shape, const float* dy,
                                             float* dx, bool accumulate = true);

// ---- batch normalization (batch_norm.hpp: the passes, the stats layout, where a group's allreduce goes) ----
// workspace: channel_sums_workspace_bytes(1, rows, channels).

// stats[0, C) = sum x, stats[C] = rows.
[[nodiscard]] cudaError_t batch_norm_sum(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                         double* stats, void* workspace, size_t workspace_bytes);
// stats[0, C) becomes the mean (over stats[C] rows); stats[C + 1, 2C + 1) = sum (x - mean)^2.
[[nodiscard]] cudaError_t batch_norm_variance(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                              double* stats, void* workspace, size_t workspace_bytes);
// saved [2C] for the backward pass, scale_shift [2C] for batch_norm_apply, running statistics updated.
[[nodiscard]] cudaError_t batch_norm_finalize(cudaStream_t stream, int64_t channels, double eps, double momentum,
                                              const double* stats, const float* gamma, const float* beta,
                                              float* running_mean, float* running_var, float* saved,
                                              float* scale_shift);
// One pass instead of batch_norm_sum and batch_norm_variance (backend.batch_norm=one_pass): moments
// [0, C) = sum x, [C, 2C) = sum x^2, [2C] = rows; then the same outputs as batch_norm_finalize.
[[nodiscard]] cudaError_t batch_norm_moments(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                             double* moments, void* workspace, size_t workspace_bytes);
[[nodiscard]] cudaError_t batch_norm_finalize_moments(cudaStream_t stream, int64_t channels, double eps,
                                                      double momentum, const double* moments, const float* gamma,
                                                      const float* beta, float* running_mean, float* running_var,
                                                      float* saved, float* scale_shift);
[[nodiscard]] cudaError_t batch_norm_eval_coefficients(cudaStream_t stream, int64_t channels, double eps,
                                                       const float* gamma, const float* beta,
                                                       const float* running_mean, const float* running_var,
                                                       float* scale_shift);
[[nodiscard]] cudaError_t batch_norm_apply(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                           const float* scale_shift, float* y);
// sums [2C + 1] = sum dy, sum dy * xhat, rows.
[[nodiscard]] cudaError_t batch_norm_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels,
                                                   const float* x, const float* dy, const float* saved, double* sums,
                                                   void* workspace, size_t workspace_bytes);
// dgamma, dbeta (either may be null) += this rank's sums: call before a group's allreduce of `sums`.
[[nodiscard]] cudaError_t batch_norm_backward_params(cudaStream_t stream, int64_t channels, const double* sums,
                                                     float* dgamma, float* dbeta);
// dx += ..., from the (group's) sums; `coefficients` is scratch of 3C floats.
[[nodiscard]] cudaError_t batch_norm_backward_data(cudaStream_t stream, int64_t rows, int64_t channels,
                                                   const float* x, const float* dy, const float* gamma,
                                                   const float* saved, const double* sums, float* coefficients,
                                                   float* dx, bool accumulate = true);

// ---- fused (fused.hpp): batch-norm apply + ReLU, add + ReLU; bits of the two ops one after the other ----

// y = relu(x * scale + shift): batch_norm_apply's arguments.
[[nodiscard]] cudaError_t batch_norm_relu_apply(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,
                                                const float* scale_shift, float* y);
// The backward of batch norm (training) followed by ReLU, dy being the ReLU output's gradient; the
// mask is recomputed from x and the forward's scale_shift. As batch_norm_backward_sums / _data.
[[nodiscard]] cudaError_t batch_norm_relu_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels,
                                                        const float* x, const float* dy, const float* saved,
                                                        const float* scale_shift, double* sums, void* workspace,
                                                        size_t workspace_bytes);
[[nodiscard]] cudaError_t batch_norm_relu_backward_data(cudaStream_t stream, int64_t rows, int64_t channels,
                                                        const float* x, const float* dy, const float* gamma,
                                                        const float* saved, const float* scale_shift,
                                                        const double* sums, float* coefficients, float* dx,
                                                        bool accumulate = true);
[[nodiscard]] cudaError_t add_relu_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* a,
                                           const float* b, float* y);
// da, db (either may be null) += the ReLU's gradient, from y; `first` bit 0 (da), bit 1 (db): written.
[[nodiscard]] cudaError_t add_relu_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* y,
                                            const float* dy, float* da, float* db, unsigned first = 0);

// ---- depthwise convolution (depthwise.hpp), weights [taps][C] as the graph keeps them ----

// y = conv (+ bias when shape.bias; b may be null otherwise).
[[nodiscard]] cudaError_t depthwise_forward(cudaStream_t stream, const DepthwiseShape& shape, const float* x,
                                            const float* w, const float* b, float* y);
// dx += the gather of dy through the flipped kernel.
[[nodiscard]] cudaError_t depthwise_backward_data(cudaStream_t stream, const DepthwiseShape& shape, const float* w,
                                                  const float* dy, float* dx, bool accumulate = true);
// dw, db (either may be null) += their deterministic channel sums; workspace: depthwise_workspace_bytes.
[[nodiscard]] cudaError_t depthwise_backward_weights(cudaStream_t stream, const DepthwiseShape& shape, const float* x,
                                                     const float* dy, float* dw, float* db, void* workspace,
                                                     size_t workspace_bytes);
inline size_t depthwise_workspace_bytes(const DepthwiseShape& s) {
  const size_t weights = is_depthwise_3x3(s) ? channel_sums_workspace_bytes(1, s.out_positions(), s.channels, 9)
                                             : channel_sums_workspace_bytes(1, s.out_positions(), s.taps() * s.channels);
  const size_t bias = channel_sums_workspace_bytes(1, s.out_positions(), s.channels);
  return weights > bias ? weights : bias;
}

// ---- max pooling, the reference's tie and NaN rules (pool.hpp) ----

// Also over x, y, dy, dx stored in a half type (MLPH_HALF_LAUNCHERS). `accumulate` false (dx's first
// writer, no memset before) only where the windows tile and cover x (pool_windows_cover): else
// cudaErrorInvalidValue.
[[nodiscard]] cudaError_t max_pool_forward(cudaStream_t stream, const PoolShape& shape, const float* x, float* y);
[[nodiscard]] cudaError_t max_pool_backward(cudaStream_t stream, const PoolShape& shape, const float* x,
                                            const float* dy, float* dx, bool accumulate = true);

// ---- CosmoFlow's bias + leaky ReLU + max-pool in one pass (pool_chain.hpp; own.cu) ----
// shape: pool_chain_shape(the max-pool's window, the leaky ReLU's slope), channels-last. bias [C] may
// be null (no bias). y, winner [out positions, C]; the winner is kept for backward.
[[nodiscard]] cudaError_t pool_chain_forward(cudaStream_t stream, const PoolChainShape& shape, const float* z,
                                             const float* bias, float* y, uint8_t* winner);
// dz WRITTEN (not added): every element of z's windows, and zeros past the last window where the
// windows do not cover z (pool_chain_covers). The conv's bias gradient is the channel sum of dz.
[[nodiscard]] cudaError_t pool_chain_backward(cudaStream_t stream, const PoolChainShape& shape, const float* z,
                                              const float* bias, const float* dy, const uint8_t* winner, float* dz);
// ---- half storage: the same launchers over activations stored in bf16 or fp16 (issue 33 item 4) ----
// H = Bf16 or F16 for x, y, dy, dx: each element widened to float as it is read, fp32 arithmetic, each
// stored result rounded once (a gradient accumulates: read, add in fp32, round once); statistics, scale
// and shift, sums, weights, biases and their gradients stay fp32. The model calls the overload of each
// value's stored type (plan::PrecisionPlan::values). One list for both types (the .cu files define them
// from one template each the same way). bias_backward: db += the channel sums of a dy stored in half (a
// pool chain's dz, a conv's dy).
#define MLPH_HALF_LAUNCHERS(H) \
[[nodiscard]] cudaError_t leaky_relu_forward(cudaStream_t stream, int64_t n, float alpha, const H* x, H* y);         \
[[nodiscard]] cudaError_t leaky_relu_backward(cudaStream_t stream, int64_t n, float alpha, const H* x, const H* dy,  \
                                              H* dx, bool accumulate = true);                                        \
[[nodiscard]] cudaError_t tanh_forward(cudaStream_t stream, int64_t n, const H* x, H* y);                            \
[[nodiscard]] cudaError_t tanh_backward(cudaStream_t stream, int64_t n, const H* y, const H* dy, H* dx,              \
                                        bool accumulate = true);                                                     \
[[nodiscard]] cudaError_t scale_forward(cudaStream_t stream, int64_t n, float factor, const H* x, H* y);             \
[[nodiscard]] cudaError_t scale_backward(cudaStream_t stream, int64_t n, float factor, const H* dy, H* dx,           \
                                         bool accumulate = true);                                                    \
[[nodiscard]] cudaError_t copy(cudaStream_t stream, int64_t n, const H* x, H* y);                                    \
[[nodiscard]] cudaError_t dropout_forward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,             \
                                          const uint64_t* micro_step, const H* x, H* y);                             \
[[nodiscard]] cudaError_t dropout_backward(cudaStream_t stream, int64_t n, const DropoutStream& stream_of,            \
                                           const uint64_t* micro_step, const H* dy, H* dx, bool accumulate = true);  \
[[nodiscard]] cudaError_t relu_forward(cudaStream_t stream, int64_t n, const H* x, H* y);                            \
[[nodiscard]] cudaError_t relu_backward(cudaStream_t stream, int64_t n, const H* x, const H* dy, H* dx,              \
                                        bool accumulate = true);                                                     \
[[nodiscard]] cudaError_t add_forward(cudaStream_t stream, int64_t n, const H* a, const H* b, H* y);                 \
[[nodiscard]] cudaError_t accumulate(cudaStream_t stream, int64_t n, const H* dy, H* dx, bool accumulate = true);    \
[[nodiscard]] cudaError_t concat_forward(cudaStream_t stream, int64_t rows, std::span<const H* const> inputs,        \
                                         std::span<const int64_t> widths, H* y);                                     \
[[nodiscard]] cudaError_t concat_backward(cudaStream_t stream, int64_t rows, std::span<H* const> grads,              \
                                          std::span<const int64_t> widths, const H* dy, uint64_t first = 0);         \
[[nodiscard]] cudaError_t global_avg_pool_forward(cudaStream_t stream, int64_t batch, int64_t positions,             \
                                                  int64_t channels, const H* x, H* y, void* workspace,               \
                                                  size_t workspace_bytes);                                           \
[[nodiscard]] cudaError_t global_avg_pool_backward(cudaStream_t stream, int64_t batch, int64_t positions,            \
                                                   int64_t channels, const H* dy, H* dx, bool accumulate = true);    \
[[nodiscard]] cudaError_t channel_affine_forward(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,     \
                                                 const float* w, const float* b, H* y);                              \
[[nodiscard]] cudaError_t channel_affine_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,    \
                                                  const float* w, const H* dy, H* dx, float* dw, float* db,          \
                                                  void* workspace, size_t workspace_bytes, bool accumulate = true);  \
[[nodiscard]] cudaError_t shift_scale_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* x,   \
                                              const float* shift, const float* scale, H* y);                         \
[[nodiscard]] cudaError_t broadcast_forward(cudaStream_t stream, const BroadcastShape& shape, const H* x, H* y);     \
[[nodiscard]] cudaError_t broadcast_backward(cudaStream_t stream, const BroadcastShape& shape, const H* dy, H* dx,   \
                                             bool accumulate = true);                                                \
[[nodiscard]] cudaError_t bias_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* b, H* y);   \
[[nodiscard]] cudaError_t max_pool_forward(cudaStream_t stream, const PoolShape& shape, const H* x, H* y);           \
[[nodiscard]] cudaError_t max_pool_backward(cudaStream_t stream, const PoolShape& shape, const H* x, const H* dy,     \
                                            H* dx, bool accumulate = true);                                          \
[[nodiscard]] cudaError_t batch_norm_sum(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,            \
                                         double* stats, void* workspace, size_t workspace_bytes);                    \
[[nodiscard]] cudaError_t batch_norm_variance(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,       \
                                              double* stats, void* workspace, size_t workspace_bytes);               \
[[nodiscard]] cudaError_t batch_norm_moments(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,        \
                                             double* moments, void* workspace, size_t workspace_bytes);              \
[[nodiscard]] cudaError_t batch_norm_apply(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,          \
                                           const float* scale_shift, H* y);                                          \
[[nodiscard]] cudaError_t batch_norm_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,  \
                                                   const H* dy, const float* saved, double* sums, void* workspace,   \
                                                   size_t workspace_bytes);                                          \
[[nodiscard]] cudaError_t batch_norm_backward_data(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,  \
                                                   const H* dy, const float* gamma, const float* saved,              \
                                                   const double* sums, float* coefficients, H* dx,                   \
                                                   bool accumulate = true);                                          \
[[nodiscard]] cudaError_t batch_norm_relu_apply(cudaStream_t stream, int64_t rows, int64_t channels, const H* x,     \
                                                const float* scale_shift, H* y);                                     \
[[nodiscard]] cudaError_t batch_norm_relu_backward_sums(cudaStream_t stream, int64_t rows, int64_t channels,         \
                                                        const H* x, const H* dy, const float* saved,                 \
                                                        const float* scale_shift, double* sums, void* workspace,     \
                                                        size_t workspace_bytes);                                     \
[[nodiscard]] cudaError_t batch_norm_relu_backward_data(cudaStream_t stream, int64_t rows, int64_t channels,         \
                                                        const H* x, const H* dy, const float* gamma,                 \
                                                        const float* saved, const float* scale_shift,                \
                                                        const double* sums, float* coefficients, H* dx,              \
                                                        bool accumulate = true);                                     \
[[nodiscard]] cudaError_t add_relu_forward(cudaStream_t stream, int64_t rows, int64_t channels, const H* a,          \
                                           const H* b, H* y);                                                        \
[[nodiscard]] cudaError_t add_relu_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* y,         \
                                            const H* dy, H* da, H* db, unsigned first = 0);                          \
[[nodiscard]] cudaError_t depthwise_forward(cudaStream_t stream, const DepthwiseShape& shape, const H* x,            \
                                            const float* w, const float* b, H* y);                                   \
[[nodiscard]] cudaError_t depthwise_backward_data(cudaStream_t stream, const DepthwiseShape& shape, const float* w,  \
                                                  const H* dy, H* dx, bool accumulate = true);                       \
[[nodiscard]] cudaError_t depthwise_backward_weights(cudaStream_t stream, const DepthwiseShape& shape, const H* x,   \
                                                     const H* dy, float* dw, float* db, void* workspace,             \
                                                     size_t workspace_bytes);                                        \
[[nodiscard]] cudaError_t bias_backward(cudaStream_t stream, int64_t rows, int64_t channels, const H* dy, float* db, \
                                        void* workspace, size_t workspace_bytes);                                    \
[[nodiscard]] cudaError_t pool_chain_forward(cudaStream_t stream, const PoolChainShape& shape, const H* z,           \
                                             const float* bias, H* y, uint8_t* winner);                              \
[[nodiscard]] cudaError_t pool_chain_backward(cudaStream_t stream, const PoolChainShape& shape, const H* z,          \
                                              const float* bias, const H* dy, const uint8_t* winner, H* dz);

MLPH_HALF_LAUNCHERS(Bf16)
MLPH_HALF_LAUNCHERS(F16)
#undef MLPH_HALF_LAUNCHERS

// ---- losses and metrics (loss.hpp); the workspace: flat_sums_workspace_bytes(n or rows) ----

[[nodiscard]] cudaError_t mse_forward(cudaStream_t stream, int64_t n, const float* prediction, const float* target,
                                      float* loss, void* workspace, size_t workspace_bytes);
// dprediction, dtarget may be null; `first` bit 0 (dprediction), bit 1 (dtarget): written first.
[[nodiscard]] cudaError_t mse_backward(cudaStream_t stream, int64_t n, const float* prediction, const float* target,
                                       const float* dloss, float* dprediction, float* dtarget, unsigned first = 0);
[[nodiscard]] cudaError_t abs_error_sum(cudaStream_t stream, int64_t n, const float* prediction, const float* target,
                                        float* sum, void* workspace, size_t workspace_bytes);
// logits [rows, C], labels [rows], class_weights [C] (device).
[[nodiscard]] cudaError_t softmax_cross_entropy_forward(cudaStream_t stream, int64_t rows, int64_t classes,
                                                        const float* logits, const int32_t* labels,
                                                        const float* class_weights, float* loss, void* workspace,
                                                        size_t workspace_bytes);
[[nodiscard]] cudaError_t softmax_cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes,
                                                         const float* logits, const int32_t* labels,
                                                         const float* class_weights, const float* dloss,
                                                         float* dlogits, bool accumulate = true);
// iou [batch] of logits [rows, C] (rows / batch pixels a sample); workspace:
// channel_sums_workspace_bytes(batch, rows / batch, classes).
[[nodiscard]] cudaError_t iou_forward(cudaStream_t stream, int64_t batch, int64_t rows, int64_t classes,
                                      const float* logits, const int32_t* labels, float* iou, void* workspace,
                                      size_t workspace_bytes);
// *first = the lowest index of a label outside [0, classes), or -1: for the one-line error naming it.
[[nodiscard]] cudaError_t find_bad_label(cudaStream_t stream, int64_t n, const int32_t* labels, int64_t classes,
                                         int64_t* first);

// ---- optimizers and regularization over the flat trainable buffers (optimizer.hpp) ----

// A ChunkTable (make_chunks(slices, kOptimizerChunk)) copied to the device.
struct DeviceChunks {
  const Chunk* chunks = nullptr;
  int64_t count = 0;
  const int64_t* first_chunk = nullptr;  // [tensors + 1]
  int32_t tensors = 0;
};
// Scratch of lamb and l2_regularize: two sums per chunk, the gradients' square sum and clip, a step per tensor.
inline size_t multi_tensor_workspace_bytes(int64_t chunks, int32_t tensors) {
  return static_cast<size_t>(2 * chunks + 2) * sizeof(double) + static_cast<size_t>(tensors) * sizeof(float);
}

// `halves`: per tensor the half copy each new master is rounded into in the same pass (HalfCopy;
// its data null: none), on the device; null: no tensor has one (fp32).
// `scalars`: one SgdScalars on the device.
[[nodiscard]] cudaError_t sgd_keras(cudaStream_t stream, const DeviceChunks& chunks, const SgdScalars* scalars,
                                    const HalfCopy* halves, const float* g, float* velocity, float* w,
                                    const double* nonfinite);
// `scalars`: one AdamScalars per tensor (adam_scalars(...) of its decay), on the device.
[[nodiscard]] cudaError_t adam(cudaStream_t stream, const DeviceChunks& chunks, const AdamScalars* scalars,
                               const HalfCopy* halves, const float* g, float* m, float* v, float* w,
                               const double* nonfinite);
// `scalars`: one LambScalars per tensor; `update`: scratch as large as the parameters.
[[nodiscard]] cudaError_t lamb(cudaStream_t stream, const DeviceChunks& chunks, const LambScalars* scalars,
                               double max_grad_norm, const HalfCopy* halves, const float* g, float* m, float* v,
                               float* w, float* update, void* workspace, size_t workspace_bytes,
                               const double* nonfinite);
// `l2` per tensor (0: none): dw += 2 * l2 * w (dw may be null) and *penalty = sum over tensors of
// l2 * sum(w^2), the loss's share of the trainable parameters (a non-trainable one with l2 is the model's).
[[nodiscard]] cudaError_t l2_regularize(cudaStream_t stream, const DeviceChunks& chunks, const double* l2,
                                        const float* w, float* dw, double* penalty, void* workspace,
                                        size_t workspace_bytes);

// ---- mixed precision (precision.hpp) ----

[[nodiscard]] cudaError_t float_to_bfloat16(cudaStream_t stream, int64_t n, const float* x, uint16_t* y);
[[nodiscard]] cudaError_t bfloat16_to_float(cudaStream_t stream, int64_t n, const uint16_t* x, float* y);
[[nodiscard]] cudaError_t float_to_half(cudaStream_t stream, int64_t n, const float* x, uint16_t* y);
[[nodiscard]] cudaError_t half_to_float(cudaStream_t stream, int64_t n, const uint16_t* x, float* y);
// g /= *scale in place; *nonfinite = how many g were Inf or NaN (before). workspace: flat_sums_workspace_bytes(n).
[[nodiscard]] cudaError_t unscale_gradients(cudaStream_t stream, int64_t n, float* g, const float* scale,
                                            double* nonfinite, void* workspace, size_t workspace_bytes);
[[nodiscard]] cudaError_t update_loss_scale(cudaStream_t stream, const LossScaleRule& rule, const double* nonfinite,
                                            float* scale, int32_t* good_steps);

// ---- layout and types around cuDNN and cuBLASLt (layout.hpp) ----

// y = x converted (f32, bf16, f16 either way; the same type is a copy).
[[nodiscard]] cudaError_t convert(cudaStream_t stream, int64_t n, FloatType from, const void* x, FloatType to, void* y);
// sum += dx converted to fp32: a gradient written in a half type, added into its fp32 sum
// (`accumulate` false: sum's first writer, 0 + dx).
[[nodiscard]] cudaError_t convert_add(cudaStream_t stream, int64_t n, FloatType from, const void* dx, float* sum,
                                      bool accumulate = true);
// y [rows, C] += b[c] (a convolution's bias).
[[nodiscard]] cudaError_t bias_forward(cudaStream_t stream, int64_t rows, int64_t channels, const float* b, float* y);
// db += the sum of dy over rows; workspace: channel_sums_workspace_bytes(1, rows, channels).
[[nodiscard]] cudaError_t bias_backward(cudaStream_t stream, int64_t rows, int64_t channels, const float* dy, float* db,
                                        void* workspace, size_t workspace_bytes);
// dw[count] += partials[0] + partials[1] + ... (chunks of `count` floats), summed in chunk order.
[[nodiscard]] cudaError_t chunk_sum_add(cudaStream_t stream, int64_t chunks, int64_t count, const float* partials,
                                        float* dw);
// y [rows, dst_width] (=, or += in fp32 when `accumulate`) x [rows, src_width], converted, channels
// padded with zeros or cropped (channels_copy_at).
[[nodiscard]] cudaError_t channels_copy(cudaStream_t stream, int64_t rows, int64_t src_width, int64_t dst_width,
                                        FloatType from, const void* x, FloatType to, void* y, bool accumulate);
// y = x's taps folded into its channels (TapsFold: a padded conv's input), converted.
[[nodiscard]] cudaError_t taps_fold(cudaStream_t stream, const TapsFold& fold, FloatType from, const void* x, FloatType to,
                                    void* y);
// The box's positions of x copied into y (accumulate: added, y fp32), converted; see Box.
[[nodiscard]] cudaError_t box_copy(cudaStream_t stream, const Box& box, FloatType from, const void* x, FloatType to,
                                   void* y, bool accumulate);
// latched [2] keeps the first {position, label} find_bad_label reported into `first` since the host
// cleared it (position -1).
[[nodiscard]] cudaError_t latch_bad_label(cudaStream_t stream, const int64_t* first, const int32_t* labels,
                                          int64_t* latched);

}  // namespace mlph::cuda
