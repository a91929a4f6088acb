// CosmoFlow's bias + leaky ReLU + max-pool chain as one kernel body, written once for every backend
// that fuses it: onednn-cpu runs it in host loops, the cuda backend in its grid (nvcc compiles the
// same functions for the device). Forward reads the conv output once and writes the pooled
// activation and a 1-byte winner per window; backward reads the winner, the pooled gradient and the
// conv output at the winner only, and writes the conv output's gradient.
//
// Semantics are those of the unfused reference chain (backends/reference: bias add, leaky_relu,
// max_pool), bit for bit:
//   pre = z + bias[c]                    (rounded to the stored type T; no add without a bias)
//   act = pre > 0 ? pre : alpha * pre    (rounded to T: what an unfused chain would store)
//   y   = act of the window's winner: the first maximum in row-major window order (strict '>'),
//         a NaN beating any number (it propagates and takes the gradient, as in PyTorch)
//   dz  = at the winner 0 + (pre > 0 ? g : alpha * g) with g = 0 + dy (the reference's additions
//         into zeroed gradients, which turn -0 into +0), +0 at every other tap
// alpha = 1 is no activation: a plain max-pool. Arithmetic is fp32 whatever T stores; T is float or
// Bf16 here (the cuda backend may add load_float / store_as overloads for its own 16-bit types).
// T stores z, dz and the activations' rounding; Y (T by default) stores y and dy: a bf16 conv
// output may feed an fp32 pooled value (y rounded to T first, then widened: exact).
//
// Windows must tile the input (stride == kernel, CosmoFlow's 2x2x2 / 2) with at most 255 taps, so
// that each element of z lies in one window at most (one writer per element, no atomics) and a tap
// index fits a byte. Elements past the last full window (an odd size) lie in none: where
// pool_chain_covers() is false, the caller zeroes dz first.
//
// Layout: channels-last NDHWC (channel_block = channels), or oneDNN's channel-blocked nCdhw<B>c
// (channel_block = B, channels a multiple of B); rank-4 NHWC is the 3-D case with in[0] = out[0] =
// kernel[0] = 1. y, dy and winner share y's layout; z and dz share z's.
#pragma once

#include <cstdint>
#include <cstring>

#ifndef MLPH_KERNEL
#ifdef __CUDACC__
#define MLPH_KERNEL __host__ __device__ __forceinline__
#else
#define MLPH_KERNEL inline
#endif
#endif

// Before a loop over a window's lanes: g++ keeps it a loop, so that its vectorizer (which
// if-converts the selects) takes it rather than fully unrolling it into branchy scalar code.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define MLPH_LANES_LOOP _Pragma("GCC unroll 1") _Pragma("GCC ivdep")
#else
#define MLPH_LANES_LOOP
#endif

namespace mlph::sdk::kernels {

// bfloat16 as its bits: float32's top half.
struct Bf16 {
  uint16_t bits;
};

MLPH_KERNEL float load_float(float v) { return v; }
MLPH_KERNEL float load_float(Bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

template <class T>
MLPH_KERNEL T store_as(float v);
template <>
MLPH_KERNEL float store_as<float>(float v) {
  return v;
}
// Round to nearest even, as oneDNN, cuDNN and PyTorch convert; a NaN stays a quiet NaN.
template <>
MLPH_KERNEL Bf16 store_as<Bf16>(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  return Bf16{static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}

// v rounded to what T holds.
template <class T>
MLPH_KERNEL float round_to(float v) {
  return load_float(store_as<T>(v));
}

// Geometry of a pool chain: z [batch, in..., channels], y [batch, out..., channels] in the layout
// `channel_block` names (see the top of this file); windows of `kernel` taps, stride = kernel.
struct PoolChainShape {
  int64_t batch = 1, channels = 1, channel_block = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  float alpha = 1.0f;  // the leaky ReLU's slope for pre <= 0; 1: no activation

  MLPH_KERNEL int64_t out_positions() const { return batch * out[0] * out[1] * out[2]; }
  MLPH_KERNEL int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
};

// Whether this body takes the shape: windows that fit the input, taps that fit a byte, channels
// whole blocks.
MLPH_KERNEL bool pool_chain_supports(const PoolChainShape& s) {
  bool fits = true;
  for (int d = 0; d < 3; ++d) fits = fits && s.kernel[d] >= 1 && s.out[d] * s.kernel[d] <= s.in[d];
  return fits && s.taps() <= 255 && s.channel_block >= 1 && s.channels % s.channel_block == 0;
}

// Whether the windows cover all of z (every in = out * kernel); if not, dz must be zeroed first.
MLPH_KERNEL bool pool_chain_covers(const PoolChainShape& s) {
  return s.out[0] * s.kernel[0] == s.in[0] && s.out[1] * s.kernel[1] == s.in[1] && s.out[2] * s.kernel[2] == s.in[2];
}

// Offset of element (n, d, h, w, c) in a tensor of spatial sizes `sp` in the shape's layout.
MLPH_KERNEL int64_t pool_chain_offset(const PoolChainShape& s, const int64_t* sp, int64_t n, int64_t d, int64_t h,
                                      int64_t w, int64_t c) {
  const int64_t block = s.channel_block, blocks = s.channels / block;
  return ((((n * blocks + c / block) * sp[0] + d) * sp[1] + h) * sp[2] + w) * block + c % block;
}

// Offsets in z of output position pos's window (pos counts [batch, out...] row-major) and in y of
// the position itself, for channel c.
struct PoolChainWindow {
  int64_t z, y;
};
MLPH_KERNEL PoolChainWindow pool_chain_window(const PoolChainShape& s, int64_t pos, int64_t c) {
  const int64_t ow = pos % s.out[2], oh = pos / s.out[2] % s.out[1], od = pos / (s.out[2] * s.out[1]) % s.out[0];
  const int64_t n = pos / (s.out[2] * s.out[1] * s.out[0]);
  return {pool_chain_offset(s, s.in, n, od * s.kernel[0], oh * s.kernel[1], ow * s.kernel[2], c),
          pool_chain_offset(s, s.out, n, od, oh, ow, c)};
}

// Distance in z between channel blocks (for host loops that walk a window's channels in blocks).
MLPH_KERNEL int64_t pool_chain_block_stride(const PoolChainShape& s, const int64_t* sp) {
  return sp[0] * sp[1] * sp[2] * s.channel_block;
}

// The reference's rule: the first maximum wins (strict '>'), and a NaN beats any number.
MLPH_KERNEL bool pool_chain_beats(float v, float best) { return v > best || (v != v && best == best); }

// ---- one window of `Lanes` consecutive channels of one block (1 on a GPU thread; a CPU's vector
// width on a host loop, which the compiler then vectorizes over the lanes): z points at the first
// lane's first element, y and winner at its output, bias at its bias (or null) ----

// Forward: y = the window's maximum activation, winner = its tap (row-major over the kernel).
template <int Lanes, class T, class Y = T>
MLPH_KERNEL void pool_chain_forward_window(const PoolChainShape& s, const T* z, const float* bias, Y* y,
                                           uint8_t* winner) {
  // Written for vectorizers: no early exits, the NaN rule with & and |, 32-bit lanes throughout.
  const bool add = bias != nullptr;
  const float alpha = s.alpha;
  float best[Lanes], b[Lanes];
  int32_t won[Lanes];
  for (int l = 0; l < Lanes; ++l) b[l] = add ? bias[l] : 0.0f, best[l] = 0.0f, won[l] = 0;
  int32_t t = 0;
  for (int64_t kd = 0; kd < s.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < s.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < s.kernel[2]; ++kw, ++t) {
        const T* zt = z + ((kd * s.in[1] + kh) * s.in[2] + kw) * s.channel_block;
        MLPH_LANES_LOOP
        for (int l = 0; l < Lanes; ++l) {
          const float v = load_float(zt[l]);
          const float pre = add ? round_to<T>(v + b[l]) : v;
          const float act = round_to<T>(pre > 0.0f ? pre : alpha * pre);
          // pool_chain_beats: greater, or a NaN over a number (never over a NaN)
          const bool wins = (t == 0) | (!(act <= best[l]) & (best[l] == best[l]));
          best[l] = wins ? act : best[l];
          won[l] = wins ? t : won[l];
        }
      }
  for (int l = 0; l < Lanes; ++l) y[l] = store_as<Y>(best[l]), winner[l] = static_cast<uint8_t>(won[l]);
}

// Backward: every tap of the window in dz (z's layout), the winner getting dy through the
// activation's slope, the others +0. The slope is taken at every tap and kept at the winner only:
// a vectorizable select rather than a gather (the same read of z as the forward's).
template <int Lanes, class T, class Y = T>
MLPH_KERNEL void pool_chain_backward_window(const PoolChainShape& s, const T* z, const float* bias, const Y* dy,
                                            const uint8_t* winner, T* dz) {
  const bool add = bias != nullptr;
  const float alpha = s.alpha;
  float g[Lanes], b[Lanes];
  int32_t won[Lanes];
  for (int l = 0; l < Lanes; ++l) g[l] = 0.0f + load_float(dy[l]), b[l] = add ? bias[l] : 0.0f, won[l] = winner[l];
  int32_t t = 0;
  for (int64_t kd = 0; kd < s.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < s.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < s.kernel[2]; ++kw, ++t) {
        const int64_t tap = ((kd * s.in[1] + kh) * s.in[2] + kw) * s.channel_block;
        MLPH_LANES_LOOP
        for (int l = 0; l < Lanes; ++l) {
          const float v = load_float(z[tap + l]);
          const float pre = add ? round_to<T>(v + b[l]) : v;
          const float d = 0.0f + (pre > 0.0f ? g[l] : alpha * g[l]);
          dz[tap + l] = store_as<T>(t == won[l] ? d : 0.0f);
        }
      }
}

// ---- by index: output position pos (in [0, out_positions()), [batch, out...] row-major) and channel c ----

template <class T, class Y = T>
MLPH_KERNEL void pool_chain_forward_at(int64_t pos, int64_t c, const PoolChainShape& s, const T* z,
                                       const float* bias, Y* y, uint8_t* winner) {
  const PoolChainWindow at = pool_chain_window(s, pos, c);
  pool_chain_forward_window<1, T, Y>(s, z + at.z, bias ? bias + c : nullptr, y + at.y, winner + at.y);
}

template <class T, class Y = T>
MLPH_KERNEL void pool_chain_backward_at(int64_t pos, int64_t c, const PoolChainShape& s, const T* z,
                                        const float* bias, const Y* dy, const uint8_t* winner, T* dz) {
  const PoolChainWindow at = pool_chain_window(s, pos, c);
  pool_chain_backward_window<1, T, Y>(s, z + at.z, bias ? bias + c : nullptr, dy + at.y, winner + at.y, dz + at.z);
}

}  // namespace mlph::sdk::kernels
