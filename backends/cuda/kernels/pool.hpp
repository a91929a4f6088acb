// Max pooling bodies with the reference's semantics (backends/reference/pool.cpp), which cuDNN's
// pooling need not share: no padding; each window's first maximum in row-major window order wins,
// and a NaN beats any number (it propagates, and takes the gradient).
#pragma once

#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// A pooling window over up to 3 spatial dims, right-aligned as sdk::program::Window's (a 2-D pool has
// in[0] = out[0] = kernel[0] = 1); channels-last x [batch, in..., C], y [batch, out..., C].
struct PoolShape {
  int64_t batch = 1, channels = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1};

  MLPH_KERNEL int64_t out_positions() const { return batch * out[0] * out[1] * out[2]; }
  MLPH_KERNEL int64_t in_positions() const { return batch * in[0] * in[1] * in[2]; }
};

// From the lowering's window (sdk::program::Window: batch, in, out, kernel, stride, in_channels), taken as
// a template so that this header needs no SDK header under nvcc.
template <class Window>
PoolShape pool_shape(const Window& w) {
  PoolShape s;
  s.batch = w.batch, s.channels = w.in_channels;
  for (int d = 0; d < 3; ++d) s.in[d] = w.in[d], s.out[d] = w.out[d], s.kernel[d] = w.kernel[d], s.stride[d] = w.stride[d];
  return s;
}

// The reference's rule: the first maximum wins (strict '>'), and a NaN beats any number.
MLPH_KERNEL bool pool_beats(float v, float best) { return v > best || (is_nan(v) && !is_nan(best)); }

// Offset in x of output position `pos`'s window (pos counts [batch, out...]) and of tap (kd, kh, kw) in it.
MLPH_KERNEL int64_t pool_window_offset(const PoolShape& s, int64_t pos) {
  const int64_t ow = pos % s.out[2], oh = pos / s.out[2] % s.out[1], od = pos / (s.out[2] * s.out[1]) % s.out[0];
  const int64_t n = pos / (s.out[2] * s.out[1] * s.out[0]);
  return (((n * s.in[0] + od * s.stride[0]) * s.in[1] + oh * s.stride[1]) * s.in[2] + ow * s.stride[2]) * s.channels;
}
MLPH_KERNEL int64_t pool_tap_offset(const PoolShape& s, int64_t kd, int64_t kh, int64_t kw) {
  return ((kd * s.in[1] + kh) * s.in[2] + kw) * s.channels;
}

// The winning tap's offset from the window's first element, for channel c. x as stored (float, Bf16,
// F16): compared in fp32, which orders half values exactly as they are.
template <class T>
MLPH_KERNEL int64_t pool_winner(const PoolShape& s, const T* window, int64_t c) {
  int64_t winner = 0;
  float best = to_float(window[c]);
  for (int64_t kd = 0; kd < s.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < s.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
        const int64_t tap = pool_tap_offset(s, kd, kh, kw);
        const float v = to_float(window[tap + c]);
        if (pool_beats(v, best)) best = v, winner = tap;
      }
  return winner;
}

// y[pos, c]: the maximum of its window, copied as stored.
template <class T = float>
MLPH_KERNEL void max_pool_forward_at(int64_t pos, int64_t c, const PoolShape& s, const T* x, T* y) {
  const T* window = x + pool_window_offset(s, pos);
  y[pos * s.channels + c] = window[pool_winner(s, window, c) + c];
}

// dx[p, c] += dy of every window that p is the winner of, over the windows containing p in
// increasing output position: the reference's additions in its order (it adds 0 for the losers too,
// which only turns a -0 into +0: done here as well), one thread per element of dx, so overlapping
// windows need no atomics. Elements in no window are left alone.
template <class T = float>
MLPH_KERNEL void max_pool_backward_at(int64_t p, int64_t c, const PoolShape& s, const T* x, const T* dy, T* dx) {
  const int64_t iw = p % s.in[2], ih = p / s.in[2] % s.in[1], id = p / (s.in[2] * s.in[1]) % s.in[0];
  const int64_t n = p / (s.in[2] * s.in[1] * s.in[0]);
  const int64_t coord[3] = {id, ih, iw};
  int64_t first[3], last[3];  // the output positions whose windows contain p, per dim
  for (int d = 0; d < 3; ++d) {
    const int64_t reach = coord[d] - (s.kernel[d] - 1);
    first[d] = reach <= 0 ? 0 : (reach + s.stride[d] - 1) / s.stride[d];
    last[d] = coord[d] / s.stride[d] < s.out[d] - 1 ? coord[d] / s.stride[d] : s.out[d] - 1;
  }
  const int64_t self = p * s.channels;
  T& d = dx[self + c];  // each addition rounded into the stored type, as the reference's into its dx
  for (int64_t od = first[0]; od <= last[0]; ++od)
    for (int64_t oh = first[1]; oh <= last[1]; ++oh)
      for (int64_t ow = first[2]; ow <= last[2]; ++ow) {
        const int64_t pos = ((n * s.out[0] + od) * s.out[1] + oh) * s.out[2] + ow;
        const int64_t base = pool_window_offset(s, pos);
        add_into(d, base + pool_winner(s, x + base, c) == self ? to_float(dy[pos * s.channels + c]) : 0.0f);
      }
}

// Whether no two windows share an element (kernel == stride in every dim: CosmoFlow's 2x2x2 / 2).
MLPH_KERNEL bool pool_windows_tile(const PoolShape& s) {
  return s.kernel[0] == s.stride[0] && s.kernel[1] == s.stride[1] && s.kernel[2] == s.stride[2];
}
// Whether they tile and leave no element out (out * kernel == in in every dim): every element of dx is
// then written by exactly one window, so the backward can be dx's first writer.
MLPH_KERNEL bool pool_windows_cover(const PoolShape& s) {
  return pool_windows_tile(s) && s.out[0] * s.kernel[0] == s.in[0] && s.out[1] * s.kernel[1] == s.in[1] &&
         s.out[2] * s.kernel[2] == s.in[2];
}

// max_pool_backward_at for windows that tile (pool_windows_tile), one thread per window and channel:
// the winner found once, not once per tap, and each tap settled as the reference does (dx + dy at
// the winner, dx + 0 elsewhere); every element lies in one window at most, so no two threads meet.
// Where they also cover x (pool_windows_cover), `accumulate` false makes it dx's first writer (0 + ...,
// no memset).
template <class T = float>
MLPH_KERNEL void max_pool_backward_tiled_at(int64_t pos, int64_t c, const PoolShape& s, const T* x, const T* dy,
                                            T* dx, bool accumulate = true) {
  const int64_t base = pool_window_offset(s, pos);
  const int64_t winner = pool_winner(s, x + base, c);
  const float g = to_float(dy[pos * s.channels + c]);
  for (int64_t kd = 0; kd < s.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < s.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < s.kernel[2]; ++kw) {
        const int64_t tap = pool_tap_offset(s, kd, kh, kw);
        put_into(dx[base + tap + c], tap == winner ? g : 0.0f, accumulate);
      }
}

}  // namespace mlph::cuda
