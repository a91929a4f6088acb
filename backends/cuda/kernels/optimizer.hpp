// Optimizer and regularization bodies over the trainable parameters kept as ONE flat float32 buffer
// (and their gradients, optimizer state and LAMB's update likewise, at the same offsets), tensor by
// tensor in graph order as sdk::program::gradient_layout lays them out. The reference's arithmetic
// (backends/reference/optimizer.cpp, loss.cpp's l2), docs/ops.md's formulas.
//
// Fused multi-tensor kernels: the buffer is cut into chunks that never straddle two tensors
// (make_chunks, once at compile); a block takes a chunk, so per-tensor values (a decay, LAMB's trust
// ratio) come from the chunk's tensor. Per-step values (learning rate, bias corrections) are computed
// on the host in double exactly as the reference computes them (the ...Scalars functions below) and
// read by the kernels from device memory, so a captured CUDA graph replays with each step's values:
// the model copies them in (from pinned memory) before each update.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kernel.hpp"
#include "layout.hpp"  // FloatType, store_float: the half copies

namespace mlph::cuda {

// ---- the multi-tensor layout ----

// A tensor's place in the flat buffers.
struct TensorSlice {
  int64_t offset = 0, count = 0;
};

// A contiguous range of one tensor, the unit of work of a block.
struct Chunk {
  int64_t begin = 0, end = 0;
  int32_t tensor = 0;
};

// Chunks of at most `chunk_size` elements, tensor after tensor; `first_chunk` [tensors + 1] is where
// each tensor's chunks start (for the per-tensor sums). An empty tensor has no chunk.
struct ChunkTable {
  std::vector<Chunk> chunks;
  std::vector<int64_t> first_chunk;
};
inline ChunkTable make_chunks(std::span<const TensorSlice> tensors, int64_t chunk_size) {
  ChunkTable table;
  for (size_t t = 0; t < tensors.size(); ++t) {
    table.first_chunk.push_back(static_cast<int64_t>(table.chunks.size()));
    const int64_t end = tensors[t].offset + tensors[t].count;
    for (int64_t begin = tensors[t].offset; begin < end; begin += chunk_size)
      table.chunks.push_back({begin, begin + chunk_size < end ? begin + chunk_size : end, static_cast<int32_t>(t)});
  }
  table.first_chunk.push_back(static_cast<int64_t>(table.chunks.size()));
  return table;
}

// ---- Keras SGD with momentum: v = momentum * v - lr * g; w = w + v ----

struct SgdScalars {
  float rate = 0, momentum = 0;
};
inline SgdScalars sgd_scalars(double lr, double momentum) {
  return {static_cast<float>(lr), static_cast<float>(momentum)};
}
MLPH_KERNEL void sgd_keras_at(int64_t i, const SgdScalars& k, const float* g, float* velocity, float* w) {
  velocity[i] = k.momentum * velocity[i] - k.rate * g[i];
  w[i] += velocity[i];
}

// ---- Adam (L2 coupled) and AdamW (decoupled decay), PyTorch's single-tensor arithmetic ----

// 1 - beta^t in double, rounded to float (docs/ops.md), as the reference's bias_correction.
inline double bias_correction(double beta, uint64_t t) {
  return static_cast<float>(1.0 - std::pow(beta, static_cast<double>(t)));
}

// One tensor's scalars for step t (1-based); `decay` = weight_decay * the parameter's multiplier.
struct AdamScalars {
  float b1 = 0, b2 = 0, eps = 0, step_size = 0, bc2_sqrt = 0, coupled = 0, shrink = 1;
};
inline AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, uint64_t t, double decay,
                                bool decoupled) {
  return {static_cast<float>(beta1),
          static_cast<float>(beta2),
          static_cast<float>(eps),
          static_cast<float>(lr / bias_correction(beta1, t)),
          static_cast<float>(std::sqrt(bias_correction(beta2, t))),
          static_cast<float>(decoupled ? 0.0 : decay),
          static_cast<float>(decoupled ? 1.0 - lr * decay : 1.0)};
}
MLPH_KERNEL void adam_at(int64_t i, const AdamScalars& k, const float* g, float* m, float* v, float* w) {
  w[i] *= k.shrink;
  const float grad = g[i] + k.coupled * w[i];
  m[i] = k.b1 * m[i] + (1.0f - k.b1) * grad;
  v[i] = k.b2 * v[i] + (1.0f - k.b2) * grad * grad;
  w[i] -= k.step_size * m[i] / (sqrtf(v[i]) / k.bc2_sqrt + k.eps);
}

// ---- LAMB (apex FusedLAMB, adam_w_mode, grad averaging) ----
// 1. G^2 = the sum of all trainable gradients' squares (after the averaging over ranks);
// 2. per element: the moments and the update u (lamb_moments_at), with the clip c = max(1, G / max_grad_norm),
//    summing ||p||^2 and ||u||^2 per tensor;
// 3. per tensor: the step lr * trust ratio (lamb_step);  4. per element: p -= step * u.

// `decays`: decay != 0 in double (a decay below float's range still takes the trust ratio).
struct LambScalars {
  float b1 = 0, b2 = 0, eps = 0, bc1 = 0, bc2 = 0, wd = 0, lr = 0;
  bool decays = false;
};
inline LambScalars lamb_scalars(double lr, double beta1, double beta2, double eps, uint64_t t, double decay) {
  return {static_cast<float>(beta1),
          static_cast<float>(beta2),
          static_cast<float>(eps),
          static_cast<float>(bias_correction(beta1, t)),
          static_cast<float>(bias_correction(beta2, t)),
          static_cast<float>(decay),
          static_cast<float>(lr),
          decay != 0.0};
}

// The gradients' divisor from their global sum of squares: max(1, G / max_grad_norm).
MLPH_KERNEL float lamb_clip(double gradient_square_sum, double max_grad_norm) {
  const double norm = sqrt(gradient_square_sum);
  return norm > max_grad_norm ? static_cast<float>(norm / max_grad_norm) : 1.0f;
}

MLPH_KERNEL void lamb_moments_at(int64_t i, const LambScalars& k, float clip, const float* g, float* m, float* v,
                                 const float* w, float* update) {
  const float grad = g[i] / clip;
  m[i] = k.b1 * m[i] + (1.0f - k.b1) * grad;
  v[i] = k.b2 * v[i] + (1.0f - k.b2) * grad * grad;
  update[i] = (m[i] / k.bc1) / (sqrtf(v[i] / k.bc2) + k.eps) + k.wd * w[i];
}

// lr * ||p|| / ||u|| from the tensor's sums of squares (||p|| before the update); the ratio is 1
// without decay or with either norm 0.
MLPH_KERNEL float lamb_step(const LambScalars& k, double p_square, double u_square) {
  float ratio = 1.0f;
  if (k.decays) {
    const auto p_norm = static_cast<float>(sqrt(p_square)), u_norm = static_cast<float>(sqrt(u_square));
    if (p_norm != 0.0f && u_norm != 0.0f) ratio = p_norm / u_norm;
  }
  return k.lr * ratio;
}

MLPH_KERNEL void lamb_apply_at(int64_t i, float step, const float* update, float* w) { w[i] -= step * update[i]; }

// ---- the half copy written by the update's own pass (issue 33 item 8) ----
// Under bf16/fp16 a conv or dense weight read in a half type has a half copy next to its fp32 master
// (plan::MemoryPlan::weights). The update rounds each new master into it as it writes the master:
// one read and one write of the master, one write of the copy, no cast pass after the update. A
// padded copy (plan::pad_channels: rows of `width` master channels as rows of `padded_width`)
// takes the master's element at its row and channel; its zero channels are written once, by the
// cast of the host's writes (copy_in, restore), and no update touches them, so they stay zero.
struct HalfCopy {
  void* data = nullptr;  // null: the tensor has no half copy (fp32, or not a conv/dense weight)
  int64_t offset = 0;    // the tensor's first element in the flat buffers
  FloatType type = FloatType::bf16;
  int64_t width = 0, padded_width = 0;  // padded: 0 < width < padded_width; 0: the master's layout
};
MLPH_KERNEL int64_t half_index(const HalfCopy& h, int64_t i) {
  const int64_t j = i - h.offset;
  if (h.width == 0) return j;
  const int64_t r = j / h.width;  // only CosmoFlow's conv1 (1728 elements): no vector body needs it
  return r * h.padded_width + (j - r * h.width);
}
MLPH_KERNEL void store_half(const HalfCopy& h, int64_t i, float w) {
  if (h.data) store_float(h.type, h.data, half_index(h, i), w);
}
// V new masters from element i (a multiple of V past h.offset): one 8-byte store of 4 halves on the
// device where the copy is not padded.
template <int V>
MLPH_KERNEL void store_halves(const HalfCopy& h, int64_t i, const float (&w)[V]) {
  if (!h.data) return;
  if (h.width == 0)
    store_floats<V>(h.type, h.data, i - h.offset, w);
  else
    for (int j = 0; j < V; ++j) store_half(h, i + j, w[j]);
}

// ---- a chunk's elements, V at a time (issue 33 item 7) ----
// [begin, head) and [tail, end) one by one, [head, tail) V at a time, head the first multiple of V
// at or after begin: 16-byte accesses wherever the flat buffers are (the arena aligns them; tensor
// offsets are multiples of 64 floats, so in practice head = begin and only a tensor's end is scalar).
struct VectorSplit {
  int64_t head = 0, tail = 0;
};
MLPH_KERNEL VectorSplit vector_split(int64_t begin, int64_t end, int64_t V) {
  int64_t head = (begin + V - 1) / V * V;
  if (head > end) head = end;
  return {head, head + (end - head) / V * V};
}

// The update bodies with the half copy: the unfused body, then the new master rounded into the copy.
MLPH_KERNEL void sgd_keras_half_at(int64_t i, const SgdScalars& k, const HalfCopy& h, const float* g, float* velocity,
                                   float* w) {
  sgd_keras_at(i, k, g, velocity, w);
  store_half(h, i, w[i]);
}
MLPH_KERNEL void adam_half_at(int64_t i, const AdamScalars& k, const HalfCopy& h, const float* g, float* m, float* v,
                              float* w) {
  adam_at(i, k, g, m, v, w);
  store_half(h, i, w[i]);
}
MLPH_KERNEL void lamb_apply_half_at(int64_t i, float step, const HalfCopy& h, const float* update, float* w) {
  lamb_apply_at(i, step, update, w);
  store_half(h, i, w[i]);
}

// The same over V consecutive elements from i (a multiple of V): each array read and written V at a
// time (16-byte accesses for V = 4), the scalar body on the registers, so the bits are its bits.
template <int V>
MLPH_KERNEL void sgd_keras_vec_at(int64_t i, const SgdScalars& k, const HalfCopy& h, const float* g, float* velocity,
                                  float* w) {
  float gv[V], vv[V], wv[V];
  load_channels<V>(g + i, gv), load_channels<V>(velocity + i, vv), load_channels<V>(w + i, wv);
  for (int j = 0; j < V; ++j) sgd_keras_at(j, k, gv, vv, wv);
  store_channels<V>(velocity + i, vv), store_channels<V>(w + i, wv);
  store_halves<V>(h, i, wv);
}
template <int V>
MLPH_KERNEL void adam_vec_at(int64_t i, const AdamScalars& k, const HalfCopy& h, const float* g, float* m, float* v,
                             float* w) {
  float gv[V], mv[V], vv[V], wv[V];
  load_channels<V>(g + i, gv), load_channels<V>(m + i, mv), load_channels<V>(v + i, vv), load_channels<V>(w + i, wv);
  for (int j = 0; j < V; ++j) adam_at(j, k, gv, mv, vv, wv);
  store_channels<V>(m + i, mv), store_channels<V>(v + i, vv), store_channels<V>(w + i, wv);
  store_halves<V>(h, i, wv);
}
template <int V>
MLPH_KERNEL void lamb_apply_vec_at(int64_t i, float step, const HalfCopy& h, const float* update, float* w) {
  float uv[V], wv[V];
  load_channels<V>(update + i, uv), load_channels<V>(w + i, wv);
  for (int j = 0; j < V; ++j) lamb_apply_at(j, step, uv, wv);
  store_channels<V>(w + i, wv);
  store_halves<V>(h, i, wv);
}

// ---- L2 regularization (Keras kernel_regularizer): loss += l2 * sum(w^2), dw += 2 * l2 * w ----

MLPH_KERNEL void l2_gradient_at(int64_t i, double l2, const float* w, float* dw) {
  dw[i] += static_cast<float>(2.0 * l2) * w[i];
}
// The penalty's sum of squares, double(w)^2.
MLPH_KERNEL double square(float w) { return static_cast<double>(w) * w; }

}  // namespace mlph::cuda
