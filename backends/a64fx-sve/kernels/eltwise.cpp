// Element-wise ops, one vector at a time. NaN propagates through every one of them (relu included),
// so a diverging run shows up in the loss. log1p and tanh have no SVE instruction: they call the C
// library per element (preprocessing and the 4-wide output layer, off the hot path).
#include <cmath>
#include <cstring>

#include "kernels.hpp"
#include "mlph/common.h"
#include "sve.hpp"

namespace mlph::a64fx {

void log1p_forward(Threads t, int64_t n, const float* x, float* y) {
  parallel_chunks(t, n, kMinChunk, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; ++i) y[i] = std::log1p(x[i]);
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
