// The reference kernels: plain loops over channels-last float32 data, written to be obviously
// right (docs/ops.md is their specification) and fast enough to train the mini configs.
// Backward kernels accumulate (+=) into gradients, so a value used twice sums its gradients.
#pragma once

#include <cstdint>

#include "thread_pool.hpp"

namespace mlph::reference {

// A convolution or pooling window over up to 3 spatial dims; 2-D problems have d = 1.
struct Window {
  int64_t batch = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad_before[3] = {0, 0, 0};
  int64_t in_channels = 1, out_channels = 1, groups = 1;

  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t in_spatial() const { return in[0] * in[1] * in[2]; }
  int64_t out_spatial() const { return out[0] * out[1] * out[2]; }
};

// x [N, in..., Ci], w [kernel..., Ci/groups, Co], b [Co] or null, y [N, out..., Co].
void conv_forward(ThreadPool& pool, const Window& g, const float* x, const float* w, const float* b, float* y);
void conv_backward_data(ThreadPool& pool, const Window& g, const float* w, const float* dy, float* dx);
void conv_backward_weights(ThreadPool& pool, const Window& g, const float* x, const float* dy, float* dw, float* db);

// Channels pass through (in_channels == out_channels); argmax[i] is the input index of output i's
// first maximum, kept for the backward pass.
void max_pool_forward(ThreadPool& pool, const Window& g, const float* x, float* y, int64_t* argmax);
void max_pool_backward(const Window& g, const int64_t* argmax, const float* dy, float* dx);

// x [N, in], w [in, out], b [out] or null, y [N, out].
void dense_forward(ThreadPool& pool, int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                   const float* b, float* y);
void dense_backward(ThreadPool& pool, int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db);

}  // namespace mlph::reference
