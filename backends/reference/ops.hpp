// The reference ops as free functions: plain loops over dense row-major float32 data, written to
// be obviously right (docs/ops.md is their specification) and fast enough to train the mini
// configs. Activations are channels-last, conv weights [K..., Ci/groups, Co], dense weights [in, out].
// Every backward function ACCUMULATES (+=) into its gradient outputs, so that a value used by
// several nodes sums their contributions; a null gradient pointer means "not needed".
#pragma once

#include <cstdint>
#include <vector>

#include "thread_pool.hpp"

namespace mlph::reference {

// ---- conv.cpp, pool.cpp -----------------------------------------------------------------------

// A convolution or pooling window over up to 3 spatial dims. A 2-D problem runs as 3-D with a
// leading spatial dim of 1, so one kernel serves both.
struct Window {
  int64_t batch = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_before[3] = {0, 0, 0}, pad_after[3] = {0, 0, 0};
  int64_t in_channels = 1, out_channels = 1, groups = 1;

  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t in_positions() const { return batch * in[0] * in[1] * in[2]; }
  int64_t out_positions() const { return batch * out[0] * out[1] * out[2]; }
  // O = floor((S + p_before + p_after - d(k-1) - 1) / s) + 1 along spatial dim `d` (docs/ops.md).
  int64_t expected_out(int d) const {
    return (in[d] + pad_before[d] + pad_after[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
  }
  // Multiply-adds of one forward pass: for throughput reports.
  double macs() const {
    return static_cast<double>(out_positions()) * static_cast<double>(taps()) *
           static_cast<double>(in_channels / groups) * static_cast<double>(out_channels);
  }
};

// Memory the conv passes reuse from call to call (padded copies, packed weights, per-thread sums).
// Allocated afresh, its tens of megabytes page-fault on every call, which measured slower than the
// arithmetic of a 128^3 CosmoFlow layer. One per model: not for concurrent calls.
struct ConvScratch {
  std::vector<float> source, weights, partial;
};

// y = conv(x, w) + b: x [N, in..., Ci], w [kernel..., Ci/groups, Co], b [Co] or null, y [N, out..., Co]
// (overwritten). Cross-correlation with zero padding.
void conv_forward(ThreadPool& pool, ConvScratch& scratch, const Window& g, const float* x, const float* w,
                  const float* b, float* y);
// dx += dL/dx given dy = dL/dy.
void conv_backward_data(ThreadPool& pool, ConvScratch& scratch, const Window& g, const float* w, const float* dy,
                        float* dx);
// dw += dL/dw and db += dL/db (either may be null).
void conv_backward_weights(ThreadPool& pool, ConvScratch& scratch, const Window& g, const float* x, const float* dy,
                           float* dw, float* db);

// Max over each window (no padding; in_channels == out_channels). y is overwritten. The gradient
// goes to the first maximum of each window in row-major window order; a NaN counts as the maximum
// (so NaNs propagate, as in PyTorch, and are never hidden).
void max_pool_forward(ThreadPool& pool, const Window& g, const float* x, float* y);
void max_pool_backward(ThreadPool& pool, const Window& g, const float* x, const float* dy, float* dx);

// ---- dense.cpp ----------------------------------------------------------------------------------

struct DenseShape {
  int64_t batch = 1, in = 1, out = 1;
};
// y = x·w + b: x [batch, in], w [in, out], b [out] or null, y [batch, out] (overwritten).
void dense_forward(ThreadPool& pool, const DenseShape& s, const float* x, const float* w, const float* b, float* y);
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
void copy_forward(ThreadPool& pool, int64_t n, const float* x, float* y);     // reshape
void copy_backward(ThreadPool& pool, int64_t n, const float* dy, float* dx);  // reshape

// Dropout as a multiplicative mask: mask[i] = 1/(1-rate) when mlph_uniform(seed, node_index, step, i)
// >= rate, else 0. Forward y = x * mask, backward dx += dy * mask.
void dropout_mask(int64_t n, double rate, uint64_t seed, uint64_t node_index, uint64_t step, float* mask);
void mask_forward(ThreadPool& pool, int64_t n, const float* mask, const float* x, float* y);
void mask_backward(ThreadPool& pool, int64_t n, const float* mask, const float* dy, float* dx);

// ---- loss.cpp: reductions in double, so the reported loss carries no avoidable rounding ------------

double mse_forward(int64_t n, const float* prediction, const float* target);
// dprediction += 2 * dloss * (p - t) / n; dtarget -= the same (either may be null).
void mse_backward(int64_t n, const float* prediction, const float* target, float dloss, float* dprediction,
                  float* dtarget);
double abs_error_sum(int64_t n, const float* prediction, const float* target);
// Keras kernel_regularizer: the penalty l2 * sum(w^2), and its gradient dw += 2 * l2 * w.
double l2_penalty(int64_t n, double l2, const float* w);
void l2_backward(int64_t n, double l2, const float* w, float* dw);

// ---- optimizer.cpp --------------------------------------------------------------------------------

// Keras SGD with momentum: v = momentum * v - lr * g; w = w + v (lr inside the velocity, so a
// changed lr affects only new steps; PyTorch's v = m*v + g; w -= lr*v differs when lr changes).
void sgd_keras_update(int64_t n, double lr, double momentum, const float* g, float* velocity, float* w);

}  // namespace mlph::reference
