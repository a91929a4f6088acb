// Fused element-wise bodies: batch-norm apply + ReLU, and add + ReLU, each one pass over memory
// instead of two, with bits equal to the two ops run one after the other (batch_norm.hpp's apply then
// eltwise.hpp's relu; add then relu). Row r, channels [c, c + V) of [rows, C] (V = 4: 16-byte
// accesses where the launcher finds C a multiple of 4 and the buffers aligned). Every body reads and
// writes float or bf16 (T = Bf16: fp32 arithmetic, each result rounded once; V = 8 is 16 bytes) for
// activations stored in half (issue 33 item 4).
//
// Backward recomputes the ReLU's mask instead of storing the normalized value: from x and the
// forward's own per-channel scale and shift (kept with the saved statistics: the same floats, so the
// same v = x * scale + shift and the same sign), or from y for add + ReLU (y > 0 exactly where the sum
// is). The ReLU's gradient is what relu_backward adds into a zeroed gradient, 0 + (mask ? dy : 0)
// (so -0 becomes +0 as it does there); batch norm's backward then reads it as its dy.
#pragma once

#include <cstdint>

#include "batch_norm.hpp"
#include "depthwise.hpp"
#include "kernel.hpp"

namespace mlph::cuda {

MLPH_KERNEL float relu_of(float v) { return v < 0.0f ? 0.0f : v; }
MLPH_KERNEL float relu_gradient(float before_relu, float dy) { return 0.0f + (before_relu > 0 ? dy : 0.0f); }

// ---- batch-norm apply + ReLU: y = relu(x * scale[c] + shift[c]) ----

template <int V, class T = float>
MLPH_KERNEL void batch_norm_relu_apply_at(int64_t r, int64_t c, int64_t channels, const T* x, const float* scale_shift,
                                          T* y) {
  float xv[V], scale[V], shift[V], out[V];
  load_channels<V>(x + r * channels + c, xv);
  load_channels<V>(scale_shift + c, scale);
  load_channels<V>(scale_shift + channels + c, shift);
  for (int j = 0; j < V; ++j) out[j] = relu_of(xv[j] * scale[j] + shift[j]);
  store_channels<V>(y + r * channels + c, out);
}

// The ReLU's gradient at (r, c): dy where the forward's normalized value was positive.
template <class T>
MLPH_KERNEL float batch_norm_relu_gradient(int64_t r, int64_t c, int64_t channels, const T* x, const float* scale_shift,
                                           const T* dy) {
  const int64_t i = r * channels + c;
  return relu_gradient(to_float(x[i]) * scale_shift[c] + scale_shift[channels + c], to_float(dy[i]));
}

// BatchNormBackwardTerm with the ReLU's gradient as dy: {g, g * xhat} in double.
template <class T = float>
struct BatchNormReluBackwardTerm {
  static constexpr int K = 2;
  const T* x;
  const T* dy;
  const float* saved;        // [2C] mean, inverse std
  const float* scale_shift;  // [2C] the forward's
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const double g = batch_norm_relu_gradient(r, c, channels, x, scale_shift, dy);
    t[0] = g;
    t[1] = g * (static_cast<double>(to_float(x[r * channels + c])) - saved[c]) * saved[channels + c];
  }
};

// batch_norm_backward_data_at with the ReLU's gradient as dy.
template <class T = float>
MLPH_KERNEL void batch_norm_relu_backward_data_at(int64_t r, int64_t c, int64_t channels, const T* x, const T* dy,
                                                  const float* saved, const float* scale_shift,
                                                  const float* coefficients, T* dx, bool accumulate = true) {
  const int64_t i = r * channels + c;
  const float g = batch_norm_relu_gradient(r, c, channels, x, scale_shift, dy);
  const float xhat = (to_float(x[i]) - saved[c]) * saved[channels + c];
  put_into(dx[i], coefficients[2 * channels + c] * (g - coefficients[c] - xhat * coefficients[channels + c]), accumulate);
}

// ---- add + ReLU: y = relu(a + b); da += g, db += g with g the ReLU's gradient (from y) ----

template <int V, class T = float>
MLPH_KERNEL void add_relu_forward_at(int64_t r, int64_t c, int64_t channels, const T* a, const T* b, T* y) {
  float av[V], bv[V], out[V];
  load_channels<V>(a + r * channels + c, av);
  load_channels<V>(b + r * channels + c, bv);
  for (int j = 0; j < V; ++j) out[j] = relu_of(av[j] + bv[j]);
  store_channels<V>(y + r * channels + c, out);
}

// da, db may be null (an input that needs no gradient); `first`: bit 0 da, bit 1 db is written, not
// added into (its first writer).
template <int V, class T = float>
MLPH_KERNEL void add_relu_backward_at(int64_t r, int64_t c, int64_t channels, const T* y, const T* dy, T* da, T* db,
                                      unsigned first = 0) {
  const int64_t i = r * channels + c;
  float yv[V], gv[V], g[V];
  load_channels<V>(y + i, yv);
  load_channels<V>(dy + i, gv);
  for (int j = 0; j < V; ++j) g[j] = relu_gradient(yv[j], gv[j]);
  T* const grads[2] = {da, db};
  for (int k = 0; k < 2; ++k) {
    T* const d = grads[k];
    if (!d) continue;
    float dv[V];
    load_gradient<V>(d + i, dv, !(first >> k & 1u));
    for (int j = 0; j < V; ++j) dv[j] += g[j];
    store_channels<V>(d + i, dv);
  }
}

}  // namespace mlph::cuda
