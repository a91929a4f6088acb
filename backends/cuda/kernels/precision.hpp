// Mixed precision bodies: float32 to bfloat16 / float16 and back (round to nearest even, as cuDNN
// and PyTorch convert), for feeding cuDNN and cuBLASLt in bf16 / fp16 mode while the master weights
// stay float32; and fp16's dynamic loss scaling (PyTorch's GradScaler): unscale the gradients while
// counting non-finite ones, then grow or back off the scale. Half types travel as their bits
// (uint16_t), so g++ compiles these without CUDA's headers.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernel.hpp"

namespace mlph::cuda {

MLPH_KERNEL uint32_t float_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}
MLPH_KERNEL float bits_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// ---- bfloat16: float32's top half, rounded to nearest even (a NaN stays a quiet NaN) ----

MLPH_KERNEL uint16_t float_to_bfloat16(float f) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // a carry may reach Inf: correct
}
MLPH_KERNEL float bfloat16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// ---- float16 (IEEE binary16), rounded to nearest even, subnormals and overflow to Inf included ----

// Rounds `value` >> shift to nearest even (1 <= shift < 32).
MLPH_KERNEL uint32_t shift_round_even(uint32_t value, int shift) {
  const uint32_t kept = value >> shift, rest = value & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
}

MLPH_KERNEL uint16_t float_to_half(float f) {
  const uint32_t bits = float_bits(f), sign = (bits >> 16) & 0x8000u, x = bits & 0x7fffffffu;
  uint32_t h;
  if (x > 0x7f800000u)
    h = 0x7e00u | ((x >> 13) & 0x3ffu);  // NaN, quiet
  else if (x >= 0x477ff000u)
    h = 0x7c00u;  // Inf, or at least 65520: rounds past 65504, the largest half
  else if (x >= 0x38800000u)
    h = shift_round_even(x - (112u << 23), 13);  // normal: rebias the exponent (127 -> 15); a carry is right
  else if (x > 0x33000000u)  // subnormal: units of 2^-24; 2^-25 and below round to 0
    h = shift_round_even((x & 0x7fffffu) | 0x800000u, 126 - static_cast<int>(x >> 23));
  else
    h = 0;
  return static_cast<uint16_t>(sign | h);
}

MLPH_KERNEL float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    exponent = 1;  // subnormal: normalize
    while (!(mantissa & 0x400u)) mantissa <<= 1, --exponent;
    mantissa &= 0x3ffu;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

MLPH_KERNEL void float_to_bfloat16_at(int64_t i, const float* x, uint16_t* y) { y[i] = float_to_bfloat16(x[i]); }
MLPH_KERNEL void bfloat16_to_float_at(int64_t i, const uint16_t* x, float* y) { y[i] = bfloat16_to_float(x[i]); }
MLPH_KERNEL void float_to_half_at(int64_t i, const float* x, uint16_t* y) { y[i] = float_to_half(x[i]); }
MLPH_KERNEL void half_to_float_at(int64_t i, const uint16_t* x, float* y) { y[i] = half_to_float(x[i]); }

// ---- storage: activations in float, bf16 or fp16 (issue 33 item 4), arithmetic in fp32 ----

// V elements from p as floats, and back: float, bf16 (Bf16) or fp16 (F16) storage, each with the
// rounding above (nearest even), fp32 arithmetic. On the device whole 16-byte vectors where V allows
// (4 floats, 8 halves; the caller guarantees the alignment). The half types are distinct structs of
// their bits, so that one body templated on T serves both and no overload mixes them up.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
MLPH_KERNEL float to_float(float v) { return v; }
MLPH_KERNEL float to_float(Bf16 v) { return bfloat16_to_float(v.bits); }
MLPH_KERNEL float to_float(F16 v) { return half_to_float(v.bits); }
template <class T>
MLPH_KERNEL T from_float(float v) {
  if constexpr (sizeof(T) == sizeof(float))
    return v;
  else if constexpr (std::is_same_v<T, Bf16>)
    return Bf16{float_to_bfloat16(v)};
  else
    return F16{float_to_half(v)};
}

// d += v in fp32, rounded once into d's type: a gradient stored in bf16 accumulating a term.
template <class T>
MLPH_KERNEL void add_into(T& d, float v) {
  d = from_float<T>(to_float(d) + v);
}

// A gradient's first writer (the plan's accumulate flag false: nothing wrote it before) writes 0 + v,
// the bits adding into a zeroed buffer gives (-0 becomes +0), with no memset before and no read.
template <class T>
MLPH_KERNEL void put_into(T& d, float v, bool accumulate) {
  d = from_float<T>(accumulate ? to_float(d) + v : 0.0f + v);
}

template <int V, class T>
MLPH_KERNEL void load_channels(const T* p, float (&v)[V]) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4 && V % 4 == 0) {
    for (int q = 0; q < V / 4; ++q) {
      const float4 f = reinterpret_cast<const float4*>(p)[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  } else if constexpr (sizeof(T) == 2 && V % 8 == 0) {
    for (int q = 0; q < V / 8; ++q) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[q];
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
      for (int h = 0; h < 4; ++h) {
        v[8 * q + 2 * h] = to_float(T{static_cast<uint16_t>(words[h] & 0xffffu)});
        v[8 * q + 2 * h + 1] = to_float(T{static_cast<uint16_t>(words[h] >> 16)});
      }
    }
  } else
#endif
  {
    for (int j = 0; j < V; ++j) v[j] = to_float(p[j]);
  }
}
template <int V, class T>
MLPH_KERNEL void store_channels(T* p, const float (&v)[V]) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4 && V % 4 == 0) {
    for (int q = 0; q < V / 4; ++q)
      reinterpret_cast<float4*>(p)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  } else if constexpr (sizeof(T) == 2 && V % 8 == 0) {
    for (int q = 0; q < V / 8; ++q) {
      uint32_t words[4];
      for (int h = 0; h < 4; ++h)
        words[h] = static_cast<uint32_t>(from_float<T>(v[8 * q + 2 * h]).bits) |
                   static_cast<uint32_t>(from_float<T>(v[8 * q + 2 * h + 1]).bits) << 16;
      reinterpret_cast<uint4*>(p)[q] = make_uint4(words[0], words[1], words[2], words[3]);
    }
  } else
#endif
  {
    for (int j = 0; j < V; ++j) p[j] = from_float<T>(v[j]);
  }
}

// A gradient's V channels to add into: read (accumulate), or zeros (its first writer).
template <int V, class T>
MLPH_KERNEL void load_gradient(const T* p, float (&v)[V], bool accumulate) {
  if (accumulate)
    load_channels<V>(p, v);
  else
    for (int j = 0; j < V; ++j) v[j] = 0.0f;
}

// ---- fp16 dynamic loss scaling ----

MLPH_KERNEL bool is_finite(float v) { return v - v == 0.0f; }  // Inf - Inf and NaN - NaN are NaN

// g *= 1 / scale (exact for the powers of two the scale takes), summing how many g were not finite:
// the optimizer steps skip the update when that count is positive.
struct UnscaleTerm {
  static constexpr int K = 1;
  float* gradients;
  const float* scale;
  MLPH_KERNEL void operator()(int64_t i, double* t) const {
    const float g = gradients[i];
    t[0] = is_finite(g) ? 0.0 : 1.0;
    gradients[i] = g * (1.0f / *scale);
  }
};

// PyTorch's GradScaler update (_amp_update_scale_, its defaults): back off after a step with non-finite
// gradients, grow after `interval` good steps in a row unless that overflows; the factors in double, as
// PyTorch's. On the device, so that a captured CUDA graph needs no read-back per step; it is the rule
// of plan::LossScaler (backends/cuda/plan/precision.hpp), the host's copy of the state for checkpoints.
struct LossScaleRule {
  double growth = 2.0, backoff = 0.5;
  int32_t interval = 2000;
};
MLPH_KERNEL void loss_scale_step(const LossScaleRule& rule, double nonfinite, float* scale, int32_t* good_steps) {
  if (nonfinite > 0) {
    *scale = static_cast<float>(*scale * rule.backoff);
    *good_steps = 0;
    return;
  }
  const int32_t good = *good_steps + 1;
  if (good < rule.interval) {
    *good_steps = good;
    return;
  }
  const auto grown = static_cast<float>(*scale * rule.growth);
  if (is_finite(grown)) *scale = grown;
  *good_steps = 0;
}

}  // namespace mlph::cuda
