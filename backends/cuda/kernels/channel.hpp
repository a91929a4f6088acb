// Per-channel and layout kernel bodies over channels-last activations viewed as [rows, channels]
// (rows = N x spatial positions): element (r, c) is x[r * channels + c]. The reference's expressions
// (backends/reference/channel.cpp); backward bodies accumulate (+=).
//
// Sums over rows (the parameters' gradients of channel_affine, global average pooling) are
// reductions: their per-element terms are the functors `...Term` below, summed in double by the
// deterministic two-stage reduction of reductions.cu (reduce.hpp describes its order).
#pragma once

#include <cstdint>
#include <span>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// ---- channel_affine: y = x * w[c] + b[c] (DeepCAM's TrainableAffine) ----

// T: the stored type of x and y (and of dy and dx: one type), w and b fp32; fp32 arithmetic, rounded once.
template <class T = float>
MLPH_KERNEL void channel_affine_forward_at(int64_t r, int64_t c, int64_t channels, const T* x, const float* w,
                                           const float* b, T* y) {
  y[r * channels + c] = from_float<T>(to_float(x[r * channels + c]) * w[c] + b[c]);
}
// `accumulate` false: dx's first writer (0 + v, no memset before: plan::first_writer_overwrites).
template <class T = float>
MLPH_KERNEL void channel_affine_backward_data_at(int64_t r, int64_t c, int64_t channels, const float* w, const T* dy,
                                                 T* dx, bool accumulate = true) {
  put_into(dx[r * channels + c], to_float(dy[r * channels + c]) * w[c], accumulate);
}
// Summed over rows: {dy * x, dy} per channel, the gradients of w and b (x and dy widened from T).
template <class T = float>
struct ChannelAffineParamTerm {
  static constexpr int K = 2;
  const T* x;
  const T* dy;
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const double g = to_float(dy[r * channels + c]);
    t[0] = g * to_float(x[r * channels + c]);
    t[1] = g;
  }
};
// dw += the sum of dy * x, db += the sum of dy (either may be null); `sums` [2C] from the reduction.
MLPH_KERNEL void channel_affine_params_at(int64_t c, int64_t channels, const double* sums, float* dw, float* db) {
  if (dw) dw[c] += static_cast<float>(sums[c]);
  if (db) db[c] += static_cast<float>(sums[channels + c]);
}

// ---- shift_scale: y = (x - shift[c]) * scale[c] (preprocessing: no gradient) ----

// x: the graph's input (fp32); y in T, the stored type of what reads it (a conv in bf16: no cast copy),
// computed in fp32 and rounded once.
template <class T = float>
MLPH_KERNEL void shift_scale_forward_at(int64_t r, int64_t c, int64_t channels, const float* x, const float* shift,
                                        const float* scale, T* y) {
  y[r * channels + c] = from_float<T>((x[r * channels + c] - shift[c]) * scale[c]);
}

// ---- concat along channels: one launch per input, each a band of columns of y ----

// y[r, offset + c] = x[r, c], x [rows, width], y [rows, total].
// T: float or Bf16 (activations in bf16: a copy, exact).
template <class T = float>
MLPH_KERNEL void copy_columns_at(int64_t r, int64_t c, int64_t width, const T* x, int64_t total, int64_t offset, T* y) {
  y[r * total + offset + c] = x[r * width + c];
}
// dx[r, c] += dy[r, offset + c]: the backward of copy_columns_at; `accumulate` false: dx's first writer
// (0 + dy, no memset before: plan::first_writer_overwrites).
template <class T = float>
MLPH_KERNEL void add_columns_at(int64_t r, int64_t c, int64_t width, const T* dy, int64_t total, int64_t offset, T* dx,
                                bool accumulate = true) {
  put_into(dx[r * width + c], to_float(dy[r * total + offset + c]), accumulate);
}

// ---- global average pooling: x [batch, positions, C] -> y [batch, C] ----

// Summed over each sample's positions (the reduction's segments are the samples).
// T: float, or Bf16 (a bf16 activation or gradient widened to float: the same terms as its fp32 copy).
template <class T = float>
struct SumTerm {
  static constexpr int K = 1;
  const T* x;
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const { t[0] = to_float(x[r * channels + c]); }
};
// y[n, c] from the sum over n's positions, divided in double as the reference does. Index n * C + c.
// T: the stored type of x and y (one type: plan::tied_values): the fp32 mean, rounded once into T.
template <class T = float>
MLPH_KERNEL void global_avg_pool_finish_at(int64_t i, int64_t positions, const double* sums, T* y) {
  y[i] = from_float<T>(static_cast<float>(sums[i] / static_cast<double>(positions)));
}
// dx[n, p, c] += dy[n, c] / positions, as the float `inverse` = 1.0f / positions the reference multiplies by.
// `accumulate` false: dx's first writer (0 + v, no memset before: plan::first_writer_overwrites).
template <class T = float>
MLPH_KERNEL void global_avg_pool_backward_at(int64_t r, int64_t c, int64_t channels, int64_t positions, float inverse,
                                             const T* dy, T* dx, bool accumulate = true) {
  put_into(dx[r * channels + c], to_float(dy[r / positions * channels + c]) * inverse, accumulate);
}

// ---- broadcast: the size-1 dims of x repeated (DeepCAM's ASPP pooling branch) ----

// Full shapes [N, spatial..., C] of equal rank (at most 8), each in[d] either out[d] or 1, the
// batch and channel dims equal. Rows count every dim but the channels.
struct BroadcastShape {
  int32_t rank = 0;
  int64_t in[8] = {}, out[8] = {};

  MLPH_KERNEL int64_t channels() const { return out[rank - 1]; }
  MLPH_KERNEL int64_t in_rows() const {
    int64_t rows = 1;
    for (int32_t d = 0; d + 1 < rank; ++d) rows *= in[d];
    return rows;
  }
  MLPH_KERNEL int64_t out_rows() const {
    int64_t rows = 1;
    for (int32_t d = 0; d + 1 < rank; ++d) rows *= out[d];
    return rows;
  }
};

// From the lowering's full shapes (sdk::program::Node::in_shape, out_shape; the validator allows 8 dims).
inline BroadcastShape broadcast_shape(std::span<const int64_t> in, std::span<const int64_t> out) {
  BroadcastShape s;
  s.rank = static_cast<int32_t>(out.size());
  for (size_t d = 0; d < out.size() && d < 8; ++d) s.in[d] = in[d], s.out[d] = out[d];
  return s;
}

// The row of x that output row `r` repeats (the reference's source_row): size-1 dims of `in` index 0.
MLPH_KERNEL int64_t broadcast_source_row(const BroadcastShape& s, int64_t r) {
  int64_t index = 0, stride = 1;
  for (int32_t d = s.rank - 1; d-- > 0;) {  // from the last spatial dim to the batch dim
    const int64_t i = r % s.out[d];
    r /= s.out[d];
    if (s.in[d] != 1) index += i * stride;
    stride *= s.in[d];
  }
  return index;
}

// T: x and y in one stored type (a copy: exact in every type).
template <class T = float>
MLPH_KERNEL void broadcast_forward_at(int64_t r, int64_t c, const BroadcastShape& s, const T* x, T* y) {
  const int64_t channels = s.channels();
  y[r * channels + c] = x[broadcast_source_row(s, r) * channels + c];
}

// dx[q, c] += dy[r, c] for every output row r that repeats x's row q, in increasing r: the same
// additions, in the same order, as the reference's loop over r, with no two threads writing one
// element (no atomics: the same bits every run). Summed in fp32 and rounded once into T (a half
// gradient: one rounding, not one per repeat). `accumulate` false: dx's first writer, the sum starting
// from +0 instead of dx (the bits of the zeroed buffer's: -0 + +0 is +0), no memset before.
template <class T = float>
MLPH_KERNEL void broadcast_backward_at(int64_t q, int64_t c, const BroadcastShape& s, const T* dy, T* dx,
                                       bool accumulate = true) {
  const int64_t channels = s.channels();
  int64_t coord[8] = {}, repeats = 1, rest = q;  // q's coordinates in x; how many output rows repeat it
  for (int32_t d = s.rank - 1; d-- > 0;) {
    coord[d] = rest % s.in[d];
    rest /= s.in[d];
    if (s.in[d] == 1) repeats *= s.out[d];
  }
  float sum = accumulate ? to_float(dx[q * channels + c]) : 0.0f;
  for (int64_t j = 0; j < repeats; ++j) {
    // j's digits fill the repeated dims, the last one fastest: r (row-major over out) grows with j.
    int64_t digits = j, r = 0, stride = 1;
    for (int32_t d = s.rank - 1; d-- > 0;) {
      int64_t o = coord[d];
      if (s.in[d] == 1) o = digits % s.out[d], digits /= s.out[d];
      r += o * stride;
      stride *= s.out[d];
    }
    sum += to_float(dy[r * channels + c]);
  }
  dx[q * channels + c] = from_float<T>(sum);
}

}  // namespace mlph::cuda
