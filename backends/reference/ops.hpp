// The reference ops as free functions: plain loops over dense row-major float32 data, written to
// be obviously right (docs/ops.md is their specification) and fast enough to train the mini
// configs. Activations are channels-last, conv weights [K..., Ci/groups, Co], dense weights [in, out].
// Every backward function ACCUMULATES (+=) into its gradient outputs, so that a value used by
// several nodes sums their contributions; a null gradient pointer means "not needed".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mlph/sdk/host/batch_norm_groups.hpp"
#include "mlph/sdk/program/program.hpp"
#include "thread_pool.hpp"

namespace mlph::reference {

// The ops take the shapes and attributes of the SDK's lowered program (Window, RowsByChannels,
// DenseShape, BatchNormAttrs, AdamAttrs); the SDK's executor (sdk/host/executor.hpp) runs its Program,
// calling each op by name with Kernels::threads() first (the pool; the serial ones ignore it) and, for
// the conv passes and dense, Kernels::scratch second.
using namespace sdk::program;
using sdk::GroupSum;

// ---- conv.cpp, pool.cpp -----------------------------------------------------------------------

// Memory the conv passes reuse from call to call (padded copies, packed weights, per-thread sums).
// Allocated afresh, its tens of megabytes page-fault on every call, which measured slower than the
// arithmetic of a 128^3 CosmoFlow layer. One per model: not for concurrent calls.
struct Scratch {
  std::vector<float> source, weights, partial;
  std::vector<float> tap_weights, columns;  // conv_transpose: w as [Ci, taps x Co], and x times it
  int64_t max_columns = int64_t{16} << 20;  // floats; more taps than fit run in several passes (64 MiB)
};

// y = conv(x, w) + b: x [N, in..., Ci], w [kernel..., Ci/groups, Co], b [Co] or null, y [N, out..., Co]
// (overwritten). Cross-correlation with zero padding.
void conv_forward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                  const float* b, float* y);
// dx += dL/dx given dy = dL/dy.
void conv_backward_data(ThreadPool& pool, Scratch& scratch, const Window& g, const float* w, const float* dy,
                        float* dx);
// dw += dL/dw and db += dL/db (either may be null).
void conv_backward_weights(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* dy,
                           float* dw, float* db);

// Transposed convolution, the adjoint of conv: y[n,o,co] = b[co] + sum over i,k,ci with o = i*s - p_before + k*d of
// x[n,i,ci] * w[k,co,ci]. `g` describes the conv it is the adjoint of: g.in / g.in_channels are y's spatial dims
// and channels (Co), g.out / g.out_channels are x's (Ci); w [kernel..., Co, Ci] is that conv's weight layout;
// g.groups == 1. y is overwritten.
void conv_transpose_forward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                            const float* b, float* y);
// dx += dL/dx, dw += dL/dw, db += dL/db given dy (any of the three may be null).
void conv_transpose_backward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                             const float* dy, float* dx, float* dw, float* db);

// Max over each window (no padding; in_channels == out_channels). y is overwritten. The gradient
// goes to the first maximum of each window in row-major window order; a NaN counts as the maximum
// (so NaNs propagate, as in PyTorch, and are never hidden).
void max_pool_forward(ThreadPool& pool, const Window& g, const float* x, float* y);
void max_pool_backward(ThreadPool& pool, const Window& g, const float* x, const float* dy, float* dx);

// ---- dense.cpp ----------------------------------------------------------------------------------

// y = x·w + b: x [batch, in], w [in, out], b [out] or null, y [batch, out] (overwritten). Plain loops: no scratch.
void dense_forward(ThreadPool& pool, Scratch& scratch, const DenseShape& s, const float* x, const float* w,
                   const float* b, float* y);
void dense_backward(ThreadPool& pool, const DenseShape& s, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db);

// ---- eltwise.cpp: y and x have n elements; y is overwritten --------------------------------------

void log1p_forward(ThreadPool& pool, int64_t n, const float* x, float* y);
void leaky_relu_forward(ThreadPool& pool, int64_t n, float alpha, const float* x, float* y);
void leaky_relu_backward(ThreadPool& pool, int64_t n, float alpha, const float* x, const float* dy, float* dx);
void relu_forward(ThreadPool& pool, int64_t n, const float* x, float* y);
void relu_backward(ThreadPool& pool, int64_t n, const float* x, const float* dy, float* dx);
void tanh_forward(ThreadPool& pool, int64_t n, const float* x, float* y);
// Uses the forward output y: dtanh/dx = 1 - y^2.
void tanh_backward(ThreadPool& pool, int64_t n, const float* y, const float* dy, float* dx);
void scale_forward(ThreadPool& pool, int64_t n, float factor, const float* x, float* y);
void scale_backward(ThreadPool& pool, int64_t n, float factor, const float* dy, float* dx);
void copy_forward(ThreadPool& pool, int64_t n, const float* x, float* y);     // reshape, a float input
void copy_backward(ThreadPool& pool, int64_t n, const float* dy, float* dx);  // reshape, add: dx += dy
void fill_zero(ThreadPool& pool, int64_t n, float* x);
void int16_to_float(ThreadPool& pool, int64_t n, const int16_t* x, float* y);  // an int16 input

// Dropout as a multiplicative mask: mask[i] = 1/(1-rate) when mlph_uniform(seed, node_index, step, i)
// >= rate, else 0. Forward y = x * mask, backward dx += dy * mask.
void dropout_mask(ThreadPool& pool, int64_t n, double rate, uint64_t seed, uint64_t node_index, uint64_t step,
                  float* mask);
void mask_forward(ThreadPool& pool, int64_t n, const float* mask, const float* x, float* y);
void mask_backward(ThreadPool& pool, int64_t n, const float* mask, const float* dy, float* dx);

// ---- channel.cpp: per-channel ops over x viewed as [rows, channels] (rows = N x spatial positions) ----

void add_forward(ThreadPool& pool, int64_t n, const float* a, const float* b, float* y);
// Concatenation along the last axis: inputs[k] is [rows, widths[k]], y [rows, sum of widths].
void concat_forward(ThreadPool& pool, int64_t rows, const std::vector<const float*>& inputs,
                    const std::vector<int64_t>& widths, float* y);
// grads[k] += the slice of dy that came from inputs[k] (null grads are skipped).
void concat_backward(ThreadPool& pool, int64_t rows, const std::vector<float*>& grads,
                     const std::vector<int64_t>& widths, const float* dy);
// x [batch, positions, C] -> y [batch, C], the mean over positions.
void global_avg_pool_forward(ThreadPool& pool, int64_t batch, int64_t positions, int64_t channels, const float* x,
                             float* y);
void global_avg_pool_backward(ThreadPool& pool, int64_t batch, int64_t positions, int64_t channels, const float* dy,
                              float* dx);

// Repeats the size-1 dims of x: `in` and `out` are full shapes [N, spatial..., C] of equal rank, each in[d] either
// out[d] or 1 (the batch and channel dims equal). Backward sums the repeats.
void broadcast_forward(ThreadPool& pool, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                       const float* x, float* y);
void broadcast_backward(ThreadPool& pool, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                        const float* dy, float* dx);

// y = x * w[c] + b[c]
void channel_affine_forward(ThreadPool& pool, RowsByChannels s, const float* x, const float* w, const float* b,
                            float* y);
void channel_affine_backward(ThreadPool& pool, RowsByChannels s, const float* x, const float* w, const float* dy,
                             float* dx, float* dw, float* db);
// y = (x - shift[c]) * scale[c] (preprocessing: no gradient)
void shift_scale_forward(ThreadPool& pool, RowsByChannels s, const float* x, const float* shift, const float* scale,
                         float* y);

// Batch normalization. Training: normalizes with the batch statistics, saves mean and 1/sqrt(var + eps) per channel
// into `saved` [2C] for the backward pass and updates the running statistics (PyTorch: the unbiased variance goes
// into running_var). Evaluation: normalizes with the running statistics. `group` sums per-channel statistics over
// the ranks of this rank's batch-norm group, in place (SyncBatchNorm); null: this rank's batch alone.
void batch_norm_train_forward(ThreadPool& pool, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var, float* saved, float* y,
                              const GroupSum* group = nullptr);
void batch_norm_eval_forward(ThreadPool& pool, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var, float* y);
// The backward pass of the training forward (the batch statistics depend on x): dx, dgamma, dbeta may be null.
// With a group, dx uses the group's sums; dgamma and dbeta stay this rank's (averaged later with the others).
void batch_norm_backward(ThreadPool& pool, RowsByChannels s, const float* x, const float* gamma, const float* saved,
                         const float* dy, float* dx, float* dgamma, float* dbeta, const GroupSum* group = nullptr);

// ---- loss.cpp: reductions in double, so the reported loss carries no avoidable rounding ------------

double mse_forward(ThreadPool& pool, int64_t n, const float* prediction, const float* target);
// dprediction += 2 * dloss * (p - t) / n; dtarget -= the same (either may be null).
void mse_backward(ThreadPool& pool, int64_t n, const float* prediction, const float* target, float dloss,
                  float* dprediction, float* dtarget);
double abs_error_sum(ThreadPool& pool, int64_t n, const float* prediction, const float* target);
// Softmax cross-entropy with class weights over logits [rows, C] and labels [rows], which must lie in [0, C) (the
// executor checks them): (1/rows) sum_r w[l_r] (logsumexp(z_r) - z_r[l_r]).
double softmax_cross_entropy_forward(ThreadPool& pool, RowsByChannels s, const float* logits, const int32_t* labels,
                                     const float* class_weights);
// dlogits += dloss * w[l]/rows * (softmax(z) - onehot(l)).
void softmax_cross_entropy_backward(ThreadPool& pool, RowsByChannels s, const float* logits, const int32_t* labels,
                                    const float* class_weights, float dloss, float* dlogits);
// Per sample of `batch` (rows / batch pixels each): the mean over classes of tp/(tp+fp+fn), a class absent from both
// prediction (argmax, lowest class on ties) and label counting 1; float32 arithmetic as the DeepCAM reference.
void iou_forward(ThreadPool& pool, RowsByChannels s, int64_t batch, const float* logits, const int32_t* labels,
                 float* iou);

// Keras kernel_regularizer: the penalty l2 * sum(w^2), and its gradient dw += 2 * l2 * w.
double l2_penalty(ThreadPool& pool, int64_t n, double l2, const float* w);
void l2_backward(ThreadPool& pool, int64_t n, double l2, const float* w, float* dw);

// ---- optimizer.cpp --------------------------------------------------------------------------------

// Keras SGD with momentum: v = momentum * v - lr * g; w = w + v (lr inside the velocity, so a
// changed lr affects only new steps; PyTorch's v = m*v + g; w -= lr*v differs when lr changes).
void sgd_keras_update(ThreadPool& pool, int64_t n, double lr, double momentum, const float* g, float* velocity,
                      float* w);

// Adam-family updates of one tensor (docs/ops.md gives the formulas and their order). `t` is the 1-based step,
// `decay` = weight_decay * the parameter's multiplier; m and v are the moments (zero before step 1).
// adam: L2 coupled into the gradient; adamw: decoupled decay p *= 1 - lr*decay first.
void adam_update(ThreadPool& pool, int64_t n, double lr, const AdamAttrs& a, uint64_t t, double decay, bool decoupled,
                 const float* g, float* m, float* v, float* w);
// LAMB (apex FusedLAMB, adam_w_mode): `clip` = max(1, global gradient norm / max_grad_norm); the trust ratio
// ||p||/||u|| is per tensor. `update` is scratch of n floats.
void lamb_update(ThreadPool& pool, int64_t n, double lr, const AdamAttrs& a, uint64_t t, double decay, float clip,
                 const float* g, float* m, float* v, float* w, float* update);
// The L2 norm of n floats, summed in double (repeatable for a fixed thread count).
double l2_norm(ThreadPool& pool, int64_t n, const float* x);

// What the SDK's host executor runs these ops with (sdk/host/executor.hpp): float32 buffers, the pool
// (shared with the backend, which the ABI destroys after its models) and one scratch per model.
struct Kernels {
  using Buffer = std::vector<float>;
  std::shared_ptr<ThreadPool> pool;
  Scratch scratch;
  ThreadPool& threads() { return *pool; }
};

}  // namespace mlph::reference
