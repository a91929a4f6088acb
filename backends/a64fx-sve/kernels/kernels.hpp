// The a64fx-sve kernels: every op of docs/ops.md forward and backward on dense row-major float32,
// written with SVE ACLE intrinsics and vector-length agnostic (one binary for 128- to 2048-bit SVE),
// threaded with OpenMP. This header uses no SVE type, so the executor and the tests call them as
// plain C++. Activations are channels-last, conv weights [K..., Ci/groups, Co], dense weights [in, out].
// Backward kernels ACCUMULATE (+=) into gradients (a value read by several nodes sums their
// contributions); a null gradient pointer means "not needed". Results are bitwise repeatable for a
// fixed thread count: every parallel loop splits its work by the thread count alone.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mlph/sdk/host/batch_norm_groups.hpp"
#include "mlph/sdk/program/program.hpp"

namespace mlph::a64fx {

// The kernels take the shapes and attributes of the SDK's lowered program (Window, RowsByChannels,
// DenseShape, BatchNormAttrs, AdamAttrs); the SDK's executor (sdk/host/executor.hpp) runs its Program,
// calling each kernel by name with the Threads first and, for the conv passes and dense, the Scratch second.
using namespace sdk::program;
using sdk::GroupSum;

// OpenMP threads for one call; 0 means OpenMP's default.
struct Threads {
  int count = 0;
};

// The SVE vector length of the machine running this, in float lanes (4 at 128 bits, 16 on A64FX).
int64_t vector_lanes();

// ---- conv.cpp ---------------------------------------------------------------------------------

// Memory the conv and dense passes reuse from call to call (padded copies, packed weights, partial
// sums): allocated once per model, since page-faulting tens of megabytes every call costs as much as
// the arithmetic. One per model: not for concurrent calls.
struct Scratch {
  std::vector<float> padded, packed, partial;
};

// y = conv(x, w) + b: x [N, in..., Ci], w [kernel..., Ci/groups, Co], b [Co] or null,
// y [N, out..., Co] (overwritten). Cross-correlation with zero padding.
void conv_forward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w, const float* b,
                  float* y);
// dx += dL/dx given dy.
void conv_backward_data(Threads t, Scratch& scratch, const Window& g, const float* w, const float* dy, float* dx);
// dw += dL/dw and db += dL/db (either may be null).
void conv_backward_weights(Threads t, Scratch& scratch, const Window& g, const float* x, const float* dy,
                           float* dw, float* db);
// db[c] += sum over rows of dy [rows, channels].
void bias_backward(Threads t, int64_t rows, int64_t channels, const float* dy, float* db);

// Transposed convolution, the adjoint of conv: `g` describes the conv it is the adjoint of (g.in and
// g.in_channels are y's spatial dims and channels, g.out and g.out_channels are x's; w [kernel..., Co, Ci]
// is that conv's weight layout; groups 1). y is overwritten; the backward accumulates into dx, dw, db
// (any may be null). They run as that conv's backward-data, forward and backward-weights passes.
void conv_transpose_forward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w,
                            const float* b, float* y);
void conv_transpose_backward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w,
                             const float* dy, float* dx, float* dw, float* db);

// ---- pool.cpp: max pooling without padding (in_channels == out_channels) -------------------------

// The gradient goes to the first maximum of each window in row-major window order; a NaN counts as
// the maximum, so NaNs propagate.
void max_pool_forward(Threads t, const Window& g, const float* x, float* y);
void max_pool_backward(Threads t, const Window& g, const float* x, const float* dy, float* dx);

// ---- dense.cpp --------------------------------------------------------------------------------

// y = x·w + b: x [batch, in], w [in, out], b [out] or null, y [batch, out] (overwritten). The
// reduction's partial sums go to scratch.partial.
void dense_forward(Threads t, Scratch& scratch, const DenseShape& s, const float* x, const float* w, const float* b,
                   float* y);
// dx += dy·wᵀ, dw += xᵀ·dy, db += sum of dy over the batch (each may be null).
void dense_backward(Threads t, const DenseShape& s, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db);

// ---- eltwise.cpp: n elements; forward outputs are overwritten -----------------------------------

void log1p_forward(Threads t, int64_t n, const float* x, float* y);
void int16_to_float(Threads t, int64_t n, const int16_t* x, float* y);
void leaky_relu_forward(Threads t, int64_t n, float alpha, const float* x, float* y);
void leaky_relu_backward(Threads t, int64_t n, float alpha, const float* x, const float* dy, float* dx);
void relu_forward(Threads t, int64_t n, const float* x, float* y);
void relu_backward(Threads t, int64_t n, const float* x, const float* dy, float* dx);
void tanh_forward(Threads t, int64_t n, const float* x, float* y);
void tanh_backward(Threads t, int64_t n, const float* y, const float* dy, float* dx);  // uses the output y
void scale_forward(Threads t, int64_t n, float factor, const float* x, float* y);
void scale_backward(Threads t, int64_t n, float factor, const float* dy, float* dx);  // also reshape (factor 1)
void copy(Threads t, int64_t n, const float* x, float* y);
inline void copy_forward(Threads t, int64_t n, const float* x, float* y) { copy(t, n, x, y); }  // reshape, inputs
// dx += dy: reshape, add, dropout's identity.
inline void copy_backward(Threads t, int64_t n, const float* dy, float* dx) { scale_backward(t, n, 1.0f, dy, dx); }
void add_forward(Threads t, int64_t n, const float* a, const float* b, float* y);
void fill_zero(Threads t, int64_t n, float* x);
// Dropout's mask: 1/(1-rate) where mlph_uniform(seed, node_index, step, i) >= rate (compared in
// double), else 0. Forward y = x * mask; backward dx += dy * mask.
void dropout_mask(Threads t, int64_t n, double rate, uint64_t seed, uint64_t node_index, uint64_t step, float* mask);
void mask_forward(Threads t, int64_t n, const float* mask, const float* x, float* y);
void mask_backward(Threads t, int64_t n, const float* mask, const float* dy, float* dx);

// ---- channel.cpp: x viewed as [rows, channels] (rows = N x spatial positions) ------------------

// Concatenation along the last axis: inputs[k] is [rows, widths[k]], y [rows, sum of widths].
void concat_forward(Threads t, int64_t rows, const std::vector<const float*>& inputs,
                    const std::vector<int64_t>& widths, float* y);
void concat_backward(Threads t, int64_t rows, const std::vector<float*>& grads, const std::vector<int64_t>& widths,
                     const float* dy);
// x [batch, positions, C] -> y [batch, C], the mean over positions.
void global_avg_pool_forward(Threads t, int64_t batch, int64_t positions, int64_t channels, const float* x, float* y);
void global_avg_pool_backward(Threads t, int64_t batch, int64_t positions, int64_t channels, const float* dy,
                              float* dx);
// Repeats the size-1 dims of x: `in` and `out` are full shapes [N, spatial..., C] of equal rank, each
// in[d] either out[d] or 1 (batch and channels equal). Backward sums the repeats.
void broadcast_forward(Threads t, const std::vector<int64_t>& in, const std::vector<int64_t>& out, const float* x,
                       float* y);
void broadcast_backward(Threads t, const std::vector<int64_t>& in, const std::vector<int64_t>& out, const float* dy,
                        float* dx);
// y = x * w[c] + b[c]
void channel_affine_forward(Threads t, RowsByChannels s, const float* x, const float* w, const float* b, float* y);
void channel_affine_backward(Threads t, RowsByChannels s, const float* x, const float* w, const float* dy, float* dx,
                             float* dw, float* db);
// y = (x - shift[c]) * scale[c]
void shift_scale_forward(Threads t, RowsByChannels s, const float* x, const float* shift, const float* scale, float* y);

// ---- norm.cpp: batch normalization ---------------------------------------------------------------

// Training: normalizes with the batch statistics (two passes: mean, then squared deviations),
// saves mean and 1/sqrt(var + eps) per channel into `saved` [2C] and updates the running statistics
// (the unbiased variance, as PyTorch). Per-channel sums are taken in float over blocks of rows and
// added in double, in an order fixed by the thread count. `group` sums the statistics over the ranks
// of this rank's batch-norm group in place (SyncBatchNorm); null: this rank's batch alone.
void batch_norm_train_forward(Threads t, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var, float* saved, float* y,
                              const GroupSum* group = nullptr);
void batch_norm_eval_forward(Threads t, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var, float* y);
// The backward pass of the training forward; dx, dgamma, dbeta may be null. With a group, dx uses
// the group's sums while dgamma and dbeta stay this rank's.
void batch_norm_backward(Threads t, RowsByChannels s, const float* x, const float* gamma, const float* saved,
                         const float* dy, float* dx, float* dgamma, float* dbeta, const GroupSum* group = nullptr);

// ---- loss.cpp: reductions end in double, so the reported loss carries no avoidable rounding -------

double mse_forward(Threads t, int64_t n, const float* prediction, const float* target);
// dprediction += 2 * dloss * (p - t) / n; dtarget -= the same (either may be null).
void mse_backward(Threads t, int64_t n, const float* prediction, const float* target, float dloss, float* dprediction,
                  float* dtarget);
double abs_error_sum(Threads t, int64_t n, const float* prediction, const float* target);
// Weighted softmax cross-entropy over logits [rows, C] and labels [rows] in [0, C) (checked by the
// caller): (1/rows) sum_r w[l_r] (logsumexp(z_r) - z_r[l_r]).
double softmax_cross_entropy_forward(Threads t, RowsByChannels s, const float* logits, const int32_t* labels,
                                     const float* class_weights);
// dlogits += dloss * w[l]/rows * (softmax(z) - onehot(l)).
void softmax_cross_entropy_backward(Threads t, RowsByChannels s, const float* logits, const int32_t* labels,
                                    const float* class_weights, float dloss, float* dlogits);
// Per sample: the mean over classes of tp/(tp+fp+fn) (argmax, lowest class on ties; a class absent from
// both prediction and label counts 1), float32 arithmetic as the DeepCAM reference.
void iou_forward(Threads t, RowsByChannels s, int64_t batch, const float* logits, const int32_t* labels, float* iou);

// ---- optimizer.cpp -----------------------------------------------------------------------------

// sum of x[i]^2, blocks in float added in double, order fixed by the thread count.
double sum_of_squares(Threads t, int64_t n, const float* x);
// Keras kernel_regularizer: the penalty l2 * sum(w^2), and dw += 2 * l2 * w.
inline double l2_penalty(Threads t, int64_t n, double l2, const float* w) { return l2 * sum_of_squares(t, n, w); }
void l2_backward(Threads t, int64_t n, double l2, const float* w, float* dw);
// The L2 norm of n floats (LAMB's clipping).
inline double l2_norm(Threads t, int64_t n, const float* x) { return std::sqrt(sum_of_squares(t, n, x)); }
// Keras SGD with momentum: v = momentum * v - lr * g; w = w + v.
void sgd_keras_update(Threads t, int64_t n, double lr, double momentum, const float* g, float* velocity, float* w);

// adam (L2 coupled into the gradient) or adamw (decoupled: p *= 1 - lr*decay first); `t` is the
// 1-based step, `decay` = weight_decay * the parameter's multiplier (docs/ops.md).
void adam_update(Threads t, int64_t n, double lr, const AdamAttrs& a, uint64_t step, double decay, bool decoupled,
                 const float* g, float* m, float* v, float* w);
// LAMB (apex FusedLAMB, adam_w_mode): `clip` = max(1, global gradient norm / max_grad_norm); the trust
// ratio is per tensor. `update` is scratch of n floats.
void lamb_update(Threads t, int64_t n, double lr, const AdamAttrs& a, uint64_t step, double decay, float clip,
                 const float* g, float* m, float* v, float* w, float* update);

}  // namespace mlph::a64fx
