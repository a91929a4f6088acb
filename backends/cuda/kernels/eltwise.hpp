// Element-wise kernel bodies: element `i` of n. Each is the reference backend's expression
// (backends/reference/eltwise.cpp, channel.cpp's add), so that the CPU test can ask for equal bits.
// Backward bodies ACCUMULATE into dx (+=), as every backward of the reference does. NaN propagates
// through every forward (relu included).
#pragma once

#include <cstdint>

#include "kernel.hpp"
#include "mlph/common.h"
#include "precision.hpp"  // load_channels, store_channels: 16-byte vectors on the device; Bf16

namespace mlph::cuda {

// ---- preprocessing: y = log(1 + x), x float32 or int16 (CosmoFlow's counts, converted on the device) ----

MLPH_KERNEL void log1p_forward_at(int64_t i, const float* x, float* y) { y[i] = log1pf(x[i]); }
MLPH_KERNEL void log1p_int16_forward_at(int64_t i, const int16_t* x, float* y) {
  y[i] = log1pf(static_cast<float>(x[i]));
}
// An int16 graph input read as float32 (what the host backends do while loading it).
MLPH_KERNEL void int16_to_float_at(int64_t i, const int16_t* x, float* y) { y[i] = static_cast<float>(x[i]); }

// ---- activations ----

// leaky ReLU, tanh, scale and dropout take T as relu does (below): x, y, dy and dx in one stored type,
// fp32 arithmetic, each stored result rounded once; `accumulate` false: dx's first writer (0 + v).
template <class T = float>
MLPH_KERNEL void leaky_relu_forward_at(int64_t i, float alpha, const T* x, T* y) {
  const float v = to_float(x[i]);
  y[i] = from_float<T>(v > 0 ? v : alpha * v);
}
template <class T = float>
MLPH_KERNEL void leaky_relu_backward_at(int64_t i, float alpha, const T* x, const T* dy, T* dx, bool accumulate = true) {
  const float g = to_float(dy[i]);
  put_into(dx[i], to_float(x[i]) > 0 ? g : alpha * g, accumulate);
}

// max(x, 0) with the NaN kept: NaN < 0 is false. -0 stays -0, as std::max(-0.0f, 0.0f) returns its first.
// T: float, or Bf16 (activations stored in bf16: widened, computed in fp32, rounded once; relu's
// result is exact in bf16, the gradient's sum is rounded).
template <class T = float>
MLPH_KERNEL void relu_forward_at(int64_t i, const T* x, T* y) {
  const float v = to_float(x[i]);
  y[i] = from_float<T>(v < 0.0f ? 0.0f : v);
}
template <class T = float>
MLPH_KERNEL void relu_backward_at(int64_t i, const T* x, const T* dy, T* dx, bool accumulate = true) {
  put_into(dx[i], to_float(x[i]) > 0 ? to_float(dy[i]) : 0.0f, accumulate);
}

template <class T = float>
MLPH_KERNEL void tanh_forward_at(int64_t i, const T* x, T* y) {
  y[i] = from_float<T>(tanhf(to_float(x[i])));
}
// From the forward's output (as stored): dtanh/dx = 1 - y^2.
template <class T = float>
MLPH_KERNEL void tanh_backward_at(int64_t i, const T* y, const T* dy, T* dx, bool accumulate = true) {
  const float v = to_float(y[i]);
  put_into(dx[i], to_float(dy[i]) * (1.0f - v * v), accumulate);
}

template <class T = float>
MLPH_KERNEL void scale_forward_at(int64_t i, float factor, const T* x, T* y) {
  y[i] = from_float<T>(factor * to_float(x[i]));
}
template <class T = float>
MLPH_KERNEL void scale_backward_at(int64_t i, float factor, const T* dy, T* dx, bool accumulate = true) {
  put_into(dx[i], factor * to_float(dy[i]), accumulate);
}

// ---- add, and the backward of copies (reshape, add, dropout in evaluation) ----

template <class T = float>
MLPH_KERNEL void add_forward_at(int64_t i, const T* a, const T* b, T* y) {
  y[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}
template <class T = float>
MLPH_KERNEL void accumulate_at(int64_t i, const T* dy, T* dx, bool accumulate = true) {
  put_into(dx[i], to_float(dy[i]), accumulate);
}

// ---- dropout ----

// Which stream of mlph_uniform a dropout node draws from, and its rate. `kept` is 1/(1-rate) rounded
// to float, computed once on the host (dropout_stream()); `micro_step` is read from device memory
// by the wrappers, so that a captured CUDA graph replays with each step's value.
struct DropoutStream {
  double rate = 0;
  float kept = 1;
  uint64_t seed = 0, node = 0;
};

inline DropoutStream dropout_stream(double rate, uint64_t seed, uint64_t node_index) {
  return {rate, static_cast<float>(1.0 / (1.0 - rate)), seed, node_index};
}

// The mask as the host backends draw it: element i is kept when mlph_uniform(...) >= rate, compared in
// double (docs/ops.md). Computed again in the backward pass rather than stored: it is a pure function.
MLPH_KERNEL float dropout_mask_value(const DropoutStream& d, uint64_t micro_step, int64_t i) {
  const float u = mlph_uniform(d.seed, d.node, micro_step, static_cast<uint64_t>(i));
  return static_cast<double>(u) >= d.rate ? d.kept : 0.0f;
}
MLPH_KERNEL void dropout_mask_at(int64_t i, DropoutStream d, const uint64_t* micro_step, float* mask) {
  mask[i] = dropout_mask_value(d, *micro_step, i);
}
template <class T = float>
MLPH_KERNEL void dropout_forward_at(int64_t i, DropoutStream d, const uint64_t* micro_step, const T* x, T* y) {
  y[i] = from_float<T>(to_float(x[i]) * dropout_mask_value(d, *micro_step, i));
}
template <class T = float>
MLPH_KERNEL void dropout_backward_at(int64_t i, DropoutStream d, const uint64_t* micro_step, const T* dy, T* dx,
                                     bool accumulate = true) {
  put_into(dx[i], to_float(dy[i]) * dropout_mask_value(d, *micro_step, i), accumulate);
}

// ---- the same bodies over V consecutive elements [i, i + V) (issue 33 item 7) ----
// What the launchers run where n allows and the buffers are 16-byte aligned: each array read and
// written as V = 4 floats at once (one 16-byte access: load_channels / store_channels), the scalar
// body applied to the registers element by element, so the bits are the scalar body's by construction.
// (The launchers run the scalar body on the last n % V elements.)

template <int V, class T = float>
MLPH_KERNEL void leaky_relu_forward_vec_at(int64_t i, float alpha, const T* x, T* y) {
  float xv[V], yv[V];
  load_channels<V>(x + i, xv);
  for (int j = 0; j < V; ++j) leaky_relu_forward_at(j, alpha, xv, yv);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void leaky_relu_backward_vec_at(int64_t i, float alpha, const T* x, const T* dy, T* dx,
                                            bool accumulate = true) {
  float xv[V], gv[V], dv[V];
  load_channels<V>(x + i, xv), load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  for (int j = 0; j < V; ++j) leaky_relu_backward_at(j, alpha, xv, gv, dv);
  store_channels<V>(dx + i, dv);
}
// Each takes T as its scalar body (V = 8 halves is 16 bytes): registers in fp32,
// each result rounded once as it is stored, so the bits are the scalar T body's.
template <int V, class T = float>
MLPH_KERNEL void relu_forward_vec_at(int64_t i, const T* x, T* y) {
  float xv[V], yv[V];
  load_channels<V>(x + i, xv);
  for (int j = 0; j < V; ++j) relu_forward_at(j, xv, yv);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void relu_backward_vec_at(int64_t i, const T* x, const T* dy, T* dx, bool accumulate = true) {
  float xv[V], gv[V], dv[V];
  load_channels<V>(x + i, xv), load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  for (int j = 0; j < V; ++j) relu_backward_at(j, xv, gv, dv);
  store_channels<V>(dx + i, dv);
}
template <int V, class T = float>
MLPH_KERNEL void tanh_forward_vec_at(int64_t i, const T* x, T* y) {
  float xv[V], yv[V];
  load_channels<V>(x + i, xv);
  for (int j = 0; j < V; ++j) tanh_forward_at(j, xv, yv);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void tanh_backward_vec_at(int64_t i, const T* y, const T* dy, T* dx, bool accumulate = true) {
  float yv[V], gv[V], dv[V];
  load_channels<V>(y + i, yv), load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  for (int j = 0; j < V; ++j) tanh_backward_at(j, yv, gv, dv);
  store_channels<V>(dx + i, dv);
}
template <int V, class T = float>
MLPH_KERNEL void scale_forward_vec_at(int64_t i, float factor, const T* x, T* y) {
  float xv[V], yv[V];
  load_channels<V>(x + i, xv);
  for (int j = 0; j < V; ++j) scale_forward_at(j, factor, xv, yv);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void scale_backward_vec_at(int64_t i, float factor, const T* dy, T* dx, bool accumulate = true) {
  float gv[V], dv[V];
  load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  for (int j = 0; j < V; ++j) scale_backward_at(j, factor, gv, dv);
  store_channels<V>(dx + i, dv);
}
template <int V, class T = float>
MLPH_KERNEL void add_forward_vec_at(int64_t i, const T* a, const T* b, T* y) {
  float av[V], bv[V], yv[V];
  load_channels<V>(a + i, av), load_channels<V>(b + i, bv);
  for (int j = 0; j < V; ++j) add_forward_at(j, av, bv, yv);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void accumulate_vec_at(int64_t i, const T* dy, T* dx, bool accumulate = true) {
  float gv[V], dv[V];
  load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  for (int j = 0; j < V; ++j) accumulate_at(j, gv, dv);
  store_channels<V>(dx + i, dv);
}
// Dropout's mask is drawn by the element's own index: the scalar expressions with i + j.
template <int V, class T = float>
MLPH_KERNEL void dropout_forward_vec_at(int64_t i, DropoutStream d, const uint64_t* micro_step, const T* x, T* y) {
  float xv[V], yv[V];
  load_channels<V>(x + i, xv);
  const uint64_t step = *micro_step;
  for (int j = 0; j < V; ++j) yv[j] = xv[j] * dropout_mask_value(d, step, i + j);
  store_channels<V>(y + i, yv);
}
template <int V, class T = float>
MLPH_KERNEL void dropout_backward_vec_at(int64_t i, DropoutStream d, const uint64_t* micro_step, const T* dy, T* dx,
                                         bool accumulate = true) {
  float gv[V], dv[V];
  load_channels<V>(dy + i, gv), load_gradient<V>(dx + i, dv, accumulate);
  const uint64_t step = *micro_step;
  for (int j = 0; j < V; ++j) dv[j] += gv[j] * dropout_mask_value(d, step, i + j);
  store_channels<V>(dx + i, dv);
}

}  // namespace mlph::cuda
