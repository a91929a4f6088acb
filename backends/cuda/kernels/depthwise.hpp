// Depthwise convolution bodies (groups = in channels = out channels: DeepCAM's separable convs),
// channels-last x [N, in..., C], weights [taps][C] as the graph keeps them (its [K..., 1, C]), y
// [N, out..., C], in the reference's arithmetic (backends/reference/conv.cpp, depthwise_conv):
//   forward         y  = bias (or 0), then + x * w for each tap in row-major order; a tap outside x
//                   adds 0 * w, as the reference's zero-padded source does (NaN weights propagate).
//   backward data   dx += for each tap of the flipped kernel in row-major order, dy[o] * w[k] where
//                   input position i is tap k of output o (o * s = i + p - k * d), else 0 * w[k]: a
//                   gather, one thread per dx element, no atomics; the reference's stride-1 conv over
//                   dy spread by the stride, term for term.
//   backward weights dw[tap][c] += sum over output positions of x(tap) * dy: a channel sum
//                   (reduce.hpp) in double, of the 9 taps at once per channel for a 2-D 3x3 kernel,
//                   else over "channels" taps x C; the bias's gradient the channel sum of dy.
// Each body computes V consecutive channels of one position (a channel vector): V = 4 reads 16 bytes
// at once on the device where C is a multiple of 4 and the buffers 16-byte aligned (the launcher
// checks), V = 1 otherwise; every channel's arithmetic is the same either way. Every pass also reads
// and writes activations stored as bf16 (T = Bf16, V = 8 for 16 bytes; issue 33 item 4): fp32
// arithmetic, fp32 weights and weight gradients, each stored result rounded once.
#pragma once

#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// Up to 3 spatial dims right-aligned as sdk::program::Window's (a 2-D conv has in[0] = out[0] = 1);
// padding before each dim (after needs none: positions past x read 0 and out[] bounds the windows).
struct DepthwiseShape {
  int64_t batch = 1, channels = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  bool bias = false;

  MLPH_KERNEL int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  MLPH_KERNEL int64_t out_positions() const { return batch * out[0] * out[1] * out[2]; }
  MLPH_KERNEL int64_t in_positions() const { return batch * in[0] * in[1] * in[2]; }
};

// From the lowering's window (sdk::program::Window), a template so that nvcc needs no SDK header.
template <class Window>
DepthwiseShape depthwise_shape(const Window& w, bool bias) {
  DepthwiseShape s;
  s.batch = w.batch, s.channels = w.in_channels, s.bias = bias;
  for (int d = 0; d < 3; ++d) {
    s.in[d] = w.in[d], s.out[d] = w.out[d], s.kernel[d] = w.kernel[d];
    s.stride[d] = w.stride[d], s.dilation[d] = w.dilation[d], s.pad[d] = w.pad_before[d];
  }
  return s;
}

// Position `pos` (counting [N, dims...]) as its sample and coordinates: in 32-bit divisions where the
// position fits (a 64-bit division costs the GPU several times more; HOPPER.md).
template <class I>
MLPH_KERNEL void split_position(I pos, const int64_t (&dims)[3], int64_t& n, int64_t (&at)[3]) {
  const I d2 = static_cast<I>(dims[2]), d1 = static_cast<I>(dims[1]), d0 = static_cast<I>(dims[0]);
  I q = pos / d2;
  at[2] = static_cast<int64_t>(pos - q * d2);
  pos = q, q = pos / d1;
  at[1] = static_cast<int64_t>(pos - q * d1);
  pos = q, q = pos / d0;
  at[0] = static_cast<int64_t>(pos - q * d0);
  n = static_cast<int64_t>(q);
}
MLPH_KERNEL void depthwise_coordinates(int64_t pos, const int64_t (&dims)[3], int64_t& n, int64_t (&at)[3]) {
  if (pos <= INT32_MAX)
    split_position(static_cast<uint32_t>(pos), dims, n, at);
  else
    split_position(pos, dims, n, at);
}

// Output position `pos`, channels [c, c + V).
template <int V, class T = float>
MLPH_KERNEL void depthwise_forward_at(int64_t pos, int64_t c, const DepthwiseShape& s, const T* x, const float* w,
                                      const float* b, T* y) {
  int64_t n, o[3];
  depthwise_coordinates(pos, s.out, n, o);
  float acc[V];
  if (s.bias)
    load_channels<V>(b + c, acc);
  else
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  int64_t tap = 0;
  for (int64_t k0 = 0; k0 < s.kernel[0]; ++k0) {
    const int64_t i0 = o[0] * s.stride[0] - s.pad[0] + k0 * s.dilation[0];
    for (int64_t k1 = 0; k1 < s.kernel[1]; ++k1) {
      const int64_t i1 = o[1] * s.stride[1] - s.pad[1] + k1 * s.dilation[1];
      for (int64_t k2 = 0; k2 < s.kernel[2]; ++k2, ++tap) {
        const int64_t i2 = o[2] * s.stride[2] - s.pad[2] + k2 * s.dilation[2];
        const bool inside = i0 >= 0 && i0 < s.in[0] && i1 >= 0 && i1 < s.in[1] && i2 >= 0 && i2 < s.in[2];
        float wv[V], xv[V] = {};
        load_channels<V>(w + tap * s.channels + c, wv);
        if (inside) load_channels<V>(x + (((n * s.in[0] + i0) * s.in[1] + i1) * s.in[2] + i2) * s.channels + c, xv);
        for (int j = 0; j < V; ++j) acc[j] += xv[j] * wv[j];
      }
    }
  }
  store_channels<V>(y + pos * s.channels + c, acc);
}

// Along one dim: the output that input coordinate i reaches through tap k (-1: none). Coordinates and
// window sizes fit 32 bits (a dim past 2^31 positions would not fit memory): 32-bit divisions.
MLPH_KERNEL int64_t depthwise_source(int64_t i, int64_t k, int64_t stride, int64_t dilation, int64_t pad, int64_t out) {
  const auto o = static_cast<int32_t>(i + pad - k * dilation);
  if (o < 0) return -1;
  const auto q = static_cast<int32_t>(static_cast<uint32_t>(o) / static_cast<uint32_t>(stride));
  if (q * static_cast<int32_t>(stride) != o || q >= out) return -1;
  return q;
}

// Input position `pos`, channels [c, c + V): dx += the gather over the flipped kernel's taps.
template <int V, class T = float>
MLPH_KERNEL void depthwise_backward_data_at(int64_t pos, int64_t c, const DepthwiseShape& s, const float* w,
                                            const T* dy, T* dx, bool accumulate = true) {
  int64_t n, i[3];
  depthwise_coordinates(pos, s.in, n, i);
  float acc[V];
  load_gradient<V>(dx + pos * s.channels + c, acc, accumulate);
  const int64_t taps = s.taps();
  int64_t flipped = 0;
  for (int64_t f0 = 0; f0 < s.kernel[0]; ++f0) {
    const int64_t o0 = depthwise_source(i[0], s.kernel[0] - 1 - f0, s.stride[0], s.dilation[0], s.pad[0], s.out[0]);
    for (int64_t f1 = 0; f1 < s.kernel[1]; ++f1) {
      const int64_t o1 = depthwise_source(i[1], s.kernel[1] - 1 - f1, s.stride[1], s.dilation[1], s.pad[1], s.out[1]);
      for (int64_t f2 = 0; f2 < s.kernel[2]; ++f2, ++flipped) {
        const int64_t o2 = depthwise_source(i[2], s.kernel[2] - 1 - f2, s.stride[2], s.dilation[2], s.pad[2], s.out[2]);
        float wv[V], gv[V] = {};
        load_channels<V>(w + (taps - 1 - flipped) * s.channels + c, wv);
        if (o0 >= 0 && o1 >= 0 && o2 >= 0)
          load_channels<V>(dy + (((n * s.out[0] + o0) * s.out[1] + o1) * s.out[2] + o2) * s.channels + c, gv);
        for (int j = 0; j < V; ++j) acc[j] += gv[j] * wv[j];
      }
    }
  }
  store_channels<V>(dx + pos * s.channels + c, acc);
}

// Summed over output positions r, per "channel" j = tap * C + c: x at the tap's input position times
// dy, in double (a float product is exact in double); 0 where the tap reads padding.
// T: x and dy stored as float or Bf16 (widened; the products and sums as in fp32).
template <class T = float>
struct DepthwiseWeightTerm {
  static constexpr int K = 1;
  DepthwiseShape s;
  const T* x;
  const T* dy;
  MLPH_KERNEL void operator()(int64_t r, int64_t j, double* t) const {
    const auto jj = static_cast<uint32_t>(j), channels = static_cast<uint32_t>(s.channels);  // taps x C: 32 bits
    const auto k2s = static_cast<uint32_t>(s.kernel[2]), k1s = static_cast<uint32_t>(s.kernel[1]);
    const uint32_t tap = jj / channels, rest = tap / k2s;
    const int64_t c = jj - tap * channels, k2 = tap - rest * k2s, k1 = rest % k1s, k0 = rest / k1s;
    int64_t n, o[3];
    depthwise_coordinates(r, s.out, n, o);
    const int64_t i0 = o[0] * s.stride[0] - s.pad[0] + k0 * s.dilation[0];
    const int64_t i1 = o[1] * s.stride[1] - s.pad[1] + k1 * s.dilation[1];
    const int64_t i2 = o[2] * s.stride[2] - s.pad[2] + k2 * s.dilation[2];
    const bool inside = i0 >= 0 && i0 < s.in[0] && i1 >= 0 && i1 < s.in[1] && i2 >= 0 && i2 < s.in[2];
    t[0] = inside ? static_cast<double>(to_float(x[(((n * s.in[0] + i0) * s.in[1] + i1) * s.in[2] + i2) * s.channels + c])) *
                        to_float(dy[r * s.channels + c])
                  : 0.0;
  }
};

// A 2-D 3x3 kernel (DeepCAM's): all 9 taps of channel c per output position r at once, so that dy is read
// once rather than once per tap; its sums come out as [tap][C], the weights' layout. Same products.
template <class T = float>
struct Depthwise3x3WeightTerm {
  static constexpr int K = 9;
  DepthwiseShape s;
  const T* x;
  const T* dy;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    int64_t n, o[3];
    depthwise_coordinates(r, s.out, n, o);
    const double g = to_float(dy[r * s.channels + c]);
    for (int k1 = 0; k1 < 3; ++k1) {
      const int64_t i1 = o[1] * s.stride[1] - s.pad[1] + k1 * s.dilation[1];
      for (int k2 = 0; k2 < 3; ++k2) {
        const int64_t i2 = o[2] * s.stride[2] - s.pad[2] + k2 * s.dilation[2];
        const bool inside = i1 >= 0 && i1 < s.in[1] && i2 >= 0 && i2 < s.in[2];
        t[k1 * 3 + k2] = inside ? static_cast<double>(to_float(x[((n * s.in[1] + i1) * s.in[2] + i2) * s.channels + c])) * g : 0.0;
      }
    }
  }
};
MLPH_KERNEL bool is_depthwise_3x3(const DepthwiseShape& s) {
  return s.kernel[0] == 1 && s.kernel[1] == 3 && s.kernel[2] == 3 && s.in[0] == 1 && s.out[0] == 1;
}

// dw[j] += the channel sum's sums[j] (j = tap * C + c: the graph's layout of the weights).
MLPH_KERNEL void depthwise_weight_add_at(int64_t j, const double* sums, float* dw) { dw[j] += static_cast<float>(sums[j]); }

}  // namespace mlph::cuda
