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

// ---- casts ----

MLPH_KERNEL void convert_at(int64_t i, FloatType from, const void* x, FloatType to, void* y) {
  store_float(to, y, i, load_float(from, x, i));
}
// A gradient written in a half type, added into its fp32 sum.
MLPH_KERNEL void convert_add_at(int64_t i, FloatType from, const void* dx, float* sum) { sum[i] += load_float(from, dx, i); }

// ---- bias of a convolution: y[r, c] += b[c]; its gradient is the channel sum of dy (SumTerm) ----

MLPH_KERNEL void bias_forward_at(int64_t r, int64_t c, int64_t channels, const float* b, float* y) {
  y[r * channels + c] += b[c];
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
