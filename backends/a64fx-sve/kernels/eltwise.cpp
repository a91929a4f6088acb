// Element-wise ops, one vector at a time. NaN propagates through every one of them (relu included),
// so a diverging run shows up in the loss. log1p (CosmoFlow's preprocessing, 8M elements a sample)
// is a short series on SVE; tanh (the 4-wide output layer) calls the C library per element.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels.hpp"
#include "mlph/common.h"
#include "sve.hpp"

namespace mlph::a64fx {

namespace {

// log1p on the lanes where 1 + x is a normal positive finite float: log(u) for u = 1 + x from its
// exponent and a series in s = (m - 1)/(m + 1), m in [sqrt(1/2), sqrt(2)) (|s| < 0.172, so five terms
// leave 2e-9), then Goldberg's correction x/(u - 1) for the rounding of 1 + x; log1p(x) = x where
// 1 + x rounds to 1. Other lanes (x <= -1, infinities, NaN) are left to the caller.
svfloat32_t log1p_normal(svbool_t pg, svfloat32_t x) {
  const svfloat32_t u = svadd_x(pg, x, 1.0f);
  svint32_t bits = svreinterpret_s32(u);
  svint32_t exponent = svsub_x(pg, svasr_x(pg, bits, 23), 127);
  svfloat32_t m = svreinterpret_f32(svorr_x(pg, svand_x(pg, bits, 0x007fffff), 0x3f800000));  // [1, 2)
  const svbool_t high = svcmpgt(pg, m, 1.41421356f);
  m = svmul_m(high, m, 0.5f);
  exponent = svadd_m(high, exponent, 1);
  const svfloat32_t f = svsub_x(pg, m, 1.0f);
  const svfloat32_t s = svdiv_x(pg, f, svadd_x(pg, f, 2.0f));
  const svfloat32_t z = svmul_x(pg, s, s);
  svfloat32_t series = svmla_x(pg, svdup_n_f32(1.0f / 7), z, 1.0f / 9);
  series = svmla_x(pg, svdup_n_f32(1.0f / 5), z, series);
  series = svmla_x(pg, svdup_n_f32(1.0f / 3), z, series);
  series = svmla_x(pg, svdup_n_f32(1.0f), z, series);
  const svfloat32_t log_m = svmul_x(pg, svmul_x(pg, s, 2.0f), series);
  // e * ln 2 in two parts (ln2_hi has 8 trailing zero bits, so e * ln2_hi is exact).
  const svfloat32_t e = svcvt_f32_x(pg, exponent);
  const svfloat32_t log_u = svmla_x(pg, svmla_x(pg, log_m, e, -2.12194440e-4f), e, 0.693359375f);
  const svbool_t rounds_to_one = svcmpeq(pg, u, 1.0f);
  const svfloat32_t correction = svdiv_x(pg, x, svsub_x(pg, u, 1.0f));
  return svsel(rounds_to_one, x, svmul_x(pg, log_u, correction));
}

}  // namespace

void log1p_forward(Threads t, int64_t n, const float* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t v = svld1(pg, x + i);
    svst1(pg, y + i, log1p_normal(pg, v));
    const svfloat32_t u = svadd_x(pg, v, 1.0f);
    // 1 + x below the smallest normal float (or NaN), or infinite: the C library's answer.
    const svbool_t other = svnot_z(pg, svand_z(pg, svcmpge(pg, u, 1.17549435e-38f), svcmplt(pg, u, INFINITY)));
    if (svptest_any(pg, other))
      for (int64_t k = i; k < std::min(n, i + static_cast<int64_t>(svcntw())); ++k)
        if (!(x[k] + 1.0f >= 1.17549435e-38f && x[k] + 1.0f < INFINITY)) y[k] = std::log1p(x[k]);
  });
}

void int16_to_float(Threads t, int64_t n, const int16_t* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) { svst1(pg, y + i, svcvt_f32_x(pg, svld1sh_s32(pg, x + i))); });
}

void leaky_relu_forward(Threads t, int64_t n, float alpha, const float* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t v = svld1(pg, x + i);
    svst1(pg, y + i, svsel(svcmpgt(pg, v, 0.0f), v, svmul_x(pg, v, alpha)));
  });
}

void leaky_relu_backward(Threads t, int64_t n, float alpha, const float* x, const float* dy, float* dx) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t g = svld1(pg, dy + i);
    const svfloat32_t d = svsel(svcmpgt(pg, svld1(pg, x + i), 0.0f), g, svmul_x(pg, g, alpha));
    svst1(pg, dx + i, svadd_x(pg, svld1(pg, dx + i), d));
  });
}

void relu_forward(Threads t, int64_t n, const float* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t v = svld1(pg, x + i);
    svst1(pg, y + i, svsel(svcmplt(pg, v, 0.0f), svdup_n_f32(0.0f), v));  // NaN is not < 0: it stays
  });
}

void relu_backward(Threads t, int64_t n, const float* x, const float* dy, float* dx) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svbool_t on = svcmpgt(pg, svld1(pg, x + i), 0.0f);
    svst1(pg, dx + i, svadd_m(on, svld1(pg, dx + i), svld1(pg, dy + i)));
  });
}

void tanh_forward(Threads t, int64_t n, const float* x, float* y) {
  parallel_chunks(t, n, kMinChunk, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; ++i) y[i] = std::tanh(x[i]);
  });
}

void tanh_backward(Threads t, int64_t n, const float* y, const float* dy, float* dx) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t v = svld1(pg, y + i);
    const svfloat32_t slope = svmls_x(pg, svdup_n_f32(1.0f), v, v);  // 1 - y^2
    svst1(pg, dx + i, svmla_x(pg, svld1(pg, dx + i), svld1(pg, dy + i), slope));
  });
}

void scale_forward(Threads t, int64_t n, float factor, const float* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) { svst1(pg, y + i, svmul_x(pg, svld1(pg, x + i), factor)); });
}

void scale_backward(Threads t, int64_t n, float factor, const float* dy, float* dx) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    svst1(pg, dx + i, svmla_x(pg, svld1(pg, dx + i), svld1(pg, dy + i), factor));
  });
}

void copy(Threads t, int64_t n, const float* x, float* y) {
  parallel_chunks(t, n, kMinChunk, [&](int64_t begin, int64_t end, int64_t) {
    std::memcpy(y + begin, x + begin, static_cast<size_t>(end - begin) * sizeof(float));
  });
}

void add_forward(Threads t, int64_t n, const float* a, const float* b, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) { svst1(pg, y + i, svadd_x(pg, svld1(pg, a + i), svld1(pg, b + i))); });
}

void fill_zero(Threads t, int64_t n, float* x) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) { svst1(pg, x + i, svdup_n_f32(0.0f)); });
}

void dropout_mask(Threads t, int64_t n, double rate, uint64_t seed, uint64_t node_index, uint64_t step, float* mask) {
  const float kept = static_cast<float>(1.0 / (1.0 - rate));
  parallel_chunks(t, n, kMinChunk, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; ++i)  // compared in double, as docs/ops.md's `u >= rate`
      mask[i] = static_cast<double>(mlph_uniform(seed, node_index, step, static_cast<uint64_t>(i))) >= rate ? kept : 0.0f;
  });
}

void mask_forward(Threads t, int64_t n, const float* mask, const float* x, float* y) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) { svst1(pg, y + i, svmul_x(pg, svld1(pg, x + i), svld1(pg, mask + i))); });
}

void mask_backward(Threads t, int64_t n, const float* mask, const float* dy, float* dx) {
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    svst1(pg, dx + i, svmla_x(pg, svld1(pg, dx + i), svld1(pg, dy + i), svld1(pg, mask + i)));
  });
}

}  // namespace mlph::a64fx
