// Layout and type bodies around cuDNN and cuBLASLt: biases added after a convolution, the device's
// copy of conv weights (cuDNN's filter layout, the compute type) made from the fp32 masters and its
// gradient added back, casts between fp32 and the half types (and cast-and-add for gradients), the
// copies in and out of an explicitly padded buffer, and the latch that keeps the first bad label a
// step found until the host reads it. Backward bodies accumulate (+=) into fp32, as every backward.
#pragma once

#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// ---- a float buffer of any of the three types ----

enum class FloatType : int32_t { f32, bf16, f16 };

MLPH_KERNEL float load_float(FloatType type, const void* data, int64_t i) {
  switch (type) {
    case FloatType::bf16:
      return bfloat16_to_float(static_cast<const uint16_t*>(data)[i]);
    case FloatType::f16:
      return half_to_float(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}
MLPH_KERNEL void store_float(FloatType type, void* data, int64_t i, float v) {
  switch (type) {
    case FloatType::bf16:
      static_cast<uint16_t*>(data)[i] = float_to_bfloat16(v);
      break;
    case FloatType::f16:
      static_cast<uint16_t*>(data)[i] = float_to_half(v);
      break;
    default:
      static_cast<float*>(data)[i] = v;
  }
}

// V values from element i (a multiple of V; the buffer 16-byte aligned): on the device one 16-byte
// access per 4 floats or 8 halves (8 bytes for 4 halves), on the host element by element.
template <int V>
MLPH_KERNEL void load_bits16(const uint16_t* p, uint16_t (&h)[V]) {
#ifdef __CUDA_ARCH__
  if constexpr (V % 8 == 0) {
    for (int q = 0; q < V / 8; ++q) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[q];
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
      for (int w = 0; w < 4; ++w)
        h[8 * q + 2 * w] = static_cast<uint16_t>(words[w]), h[8 * q + 2 * w + 1] = static_cast<uint16_t>(words[w] >> 16);
    }
  } else if constexpr (V % 4 == 0) {
    for (int q = 0; q < V / 4; ++q) {
      const uint2 u = reinterpret_cast<const uint2*>(p)[q];
      h[4 * q] = static_cast<uint16_t>(u.x), h[4 * q + 1] = static_cast<uint16_t>(u.x >> 16);
      h[4 * q + 2] = static_cast<uint16_t>(u.y), h[4 * q + 3] = static_cast<uint16_t>(u.y >> 16);
    }
  } else
#endif
  {
    for (int j = 0; j < V; ++j) h[j] = p[j];
  }
}
template <int V>
MLPH_KERNEL void store_bits16(uint16_t* p, const uint16_t (&h)[V]) {
#ifdef __CUDA_ARCH__
  auto word = [&](int j) { return static_cast<uint32_t>(h[j]) | static_cast<uint32_t>(h[j + 1]) << 16; };
  if constexpr (V % 8 == 0) {
    for (int q = 0; q < V / 8; ++q)
      reinterpret_cast<uint4*>(p)[q] = make_uint4(word(8 * q), word(8 * q + 2), word(8 * q + 4), word(8 * q + 6));
  } else if constexpr (V % 4 == 0) {
    for (int q = 0; q < V / 4; ++q) reinterpret_cast<uint2*>(p)[q] = make_uint2(word(4 * q), word(4 * q + 2));
  } else
#endif
  {
    for (int j = 0; j < V; ++j) p[j] = h[j];
  }
}
template <int V>
MLPH_KERNEL void load_floats(FloatType type, const void* data, int64_t i, float (&v)[V]) {
  if (type == FloatType::f32) return load_channels<V>(static_cast<const float*>(data) + i, v);
  uint16_t h[V];
  load_bits16<V>(static_cast<const uint16_t*>(data) + i, h);
  for (int j = 0; j < V; ++j) v[j] = type == FloatType::bf16 ? bfloat16_to_float(h[j]) : half_to_float(h[j]);
}
template <int V>
MLPH_KERNEL void store_floats(FloatType type, void* data, int64_t i, const float (&v)[V]) {
  if (type == FloatType::f32) return store_channels<V>(static_cast<float*>(data) + i, v);
  uint16_t h[V];
  for (int j = 0; j < V; ++j) h[j] = type == FloatType::bf16 ? float_to_bfloat16(v[j]) : float_to_half(v[j]);
  store_bits16<V>(static_cast<uint16_t*>(data) + i, h);
}

// ---- casts ----

MLPH_KERNEL void convert_at(int64_t i, FloatType from, const void* x, FloatType to, void* y) {
  store_float(to, y, i, load_float(from, x, i));
}
// A gradient written in a half type, added into its fp32 sum (`accumulate` false: its first writer, 0 + dx).
MLPH_KERNEL void convert_add_at(int64_t i, FloatType from, const void* dx, float* sum, bool accumulate = true) {
  put_into(sum[i], load_float(from, dx, i), accumulate);
}
// The same over V elements from i (a multiple of V), V = 8: 16-byte accesses on both sides.
template <int V>
MLPH_KERNEL void convert_vec_at(int64_t i, FloatType from, const void* x, FloatType to, void* y) {
  float v[V];
  load_floats<V>(from, x, i, v);
  store_floats<V>(to, y, i, v);
}
template <int V>
MLPH_KERNEL void convert_add_vec_at(int64_t i, FloatType from, const void* dx, float* sum, bool accumulate = true) {
  float v[V], s[V];
  load_floats<V>(from, dx, i, v);
  load_gradient<V>(sum + i, s, accumulate);
  for (int j = 0; j < V; ++j) s[j] += v[j];
  store_channels<V>(sum + i, s);
}

// ---- bias of a convolution: y[r, c] += b[c]; its gradient is the channel sum of dy (SumTerm) ----

// y as stored: in a half type, y + b in fp32 rounded once (what casting cuDNN's half y up, adding b in
// fp32 and casting down for the next conv gave), as PyTorch adds a conv's bias after cuDNN.
template <class T = float>
MLPH_KERNEL void bias_forward_at(int64_t r, int64_t c, int64_t channels, const float* b, T* y) {
  add_into(y[r * channels + c], b[c]);
}
// db[c] += the sum over rows of dy (sums [C] from the reduction, in double).
MLPH_KERNEL void bias_backward_at(int64_t c, const double* sums, float* db) { db[c] += static_cast<float>(sums[c]); }

// Element i of dw += the sum of `chunks` partial products `count` floats apart (a deterministic
// chunked weight gradient, plan::DensePlan), added in chunk order: the same bits on every run.
MLPH_KERNEL void chunk_sum_add_at(int64_t i, int64_t chunks, int64_t count, const float* partials, float* dw) {
  float sum = partials[i];
  for (int64_t c = 1; c < chunks; ++c) sum += partials[c * count + i];
  dw[i] += sum;
}

// ---- explicit padding: a box of positions copied between two channels-last tensors ----

// [batch, extent..., channels] positions (spatial dims right-aligned into 3, unused ones 1) read from
// `src` at src_offset + e and written to `dst` at dst_offset + e along each spatial dim: padding copies
// the input into the padded buffer (dst_offset = the padding before), cropping reads it back out.
struct Box {
  int64_t batch = 1, channels = 1;
  int64_t src[3] = {1, 1, 1}, dst[3] = {1, 1, 1};  // the tensors' spatial sizes
  int64_t extent[3] = {1, 1, 1}, src_offset[3] = {0, 0, 0}, dst_offset[3] = {0, 0, 0};

  MLPH_KERNEL int64_t size() const { return batch * extent[0] * extent[1] * extent[2] * channels; }
};

// Element i of the box: y (=, or += in fp32 when `accumulate`) x, converted.
MLPH_KERNEL void box_copy_at(int64_t i, const Box& b, FloatType from, const void* x, FloatType to, void* y,
                             bool accumulate) {
  const int64_t c = i % b.channels;
  int64_t rest = i / b.channels, e[3];
  for (int d = 3; d-- > 0;) e[d] = rest % b.extent[d], rest /= b.extent[d];
  int64_t s = rest, t = rest;  // the sample
  for (int d = 0; d < 3; ++d) {
    s = s * b.src[d] + b.src_offset[d] + e[d];
    t = t * b.dst[d] + b.dst_offset[d] + e[d];
  }
  const float v = load_float(from, x, s * b.channels + c);
  if (accumulate)
    static_cast<float*>(y)[t * b.channels + c] += v;
  else
    store_float(to, y, t * b.channels + c, v);
}

// ---- padded channels: rows of `src_width` channels copied into rows of `dst_width` ----

// Element i of y [rows, dst_width] from x [rows, src_width], converted: padding (dst_width wider)
// writes zeros past x's channels, cropping (narrower) drops x's last ones; with `accumulate`, y (fp32)
// += instead. Tensor cores want channels in multiples of 8 (plan::ConvPlan::channels): CosmoFlow's
// 4 input channels and DeepCAM's 3 output classes are padded to 8 where they are cast anyway.
MLPH_KERNEL void channels_copy_at(int64_t i, int64_t src_width, int64_t dst_width, FloatType from, const void* x,
                                  FloatType to, void* y, bool accumulate) {
  const int64_t r = i / dst_width, c = i - r * dst_width;
  const float v = c < src_width ? load_float(from, x, r * src_width + c) : 0.0f;
  if (accumulate)
    static_cast<float*>(y)[i] += v;
  else
    store_float(to, y, i, v);
}

// ---- a conv's taps along its last spatial axis folded into its channels (plan::ConvPlan::taps) ----

// x [lines, in_width, channels] as y [lines, out_width, width]: row (l, p) of y holds x's positions
// p + t - shift of line l for t < taps side by side (channel t * channels + c), zeros where such a
// position lies outside x and past taps * channels. A conv with kernel 1 along that axis over y is the
// conv with kernel `taps` and stride 1 over x. taps 1, shift 0: x's channels padded with zeros.
struct TapsFold {
  int64_t lines = 1, in_width = 1, out_width = 1, channels = 1, taps = 1, shift = 0, width = 1;

  MLPH_KERNEL int64_t size() const { return lines * out_width * width; }
};

// Element i of y, converted.
MLPH_KERNEL void taps_fold_at(int64_t i, const TapsFold& f, FloatType from, const void* x, FloatType to, void* y) {
  const int64_t row = i / f.width, j = i - row * f.width, t = j / f.channels;
  const int64_t line = row / f.out_width, at = row - line * f.out_width + t - f.shift;  // the position in x's line
  const bool inside = t < f.taps && at >= 0 && at < f.in_width;
  store_float(to, y, i, inside ? load_float(from, x, (line * f.in_width + at) * f.channels + j - t * f.channels) : 0.0f);
}
// The same over V elements from i (a multiple of V; width a multiple of V, channels of 4): x read 4
// channels at a time, y written V at a time (16 bytes of a half y at V = 8), 4 divisions per V elements.
template <int V>
MLPH_KERNEL void taps_fold_vec_at(int64_t i, const TapsFold& f, FloatType from, const void* x, FloatType to, void* y) {
  const int64_t row = i / f.width, first = i - row * f.width, line = row / f.out_width, p = row - line * f.out_width;
  float v[V];
  for (int q = 0; q < V; q += 4) {
    const int64_t j = first + q, t = j / f.channels, at = p + t - f.shift;
    float four[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (t < f.taps && at >= 0 && at < f.in_width)
      load_floats<4>(from, x, (line * f.in_width + at) * f.channels + j - t * f.channels, four);
    for (int k = 0; k < 4; ++k) v[q + k] = four[k];
  }
  store_floats<V>(to, y, i, v);
}

// ---- labels: the first bad one of any step, kept until the host reads it ----

// latched [2] = {position, label} of the first label outside [0, classes) seen since it was cleared
// (position -1: none), from find_bad_label's `first` (-1: none this step).
MLPH_KERNEL void latch_bad_label(const int64_t* first, const int32_t* labels, int64_t* latched) {
  if (latched[0] < 0 && *first >= 0) {
    latched[0] = *first;
    latched[1] = labels[*first];
  }
}

}  // namespace mlph::cuda
