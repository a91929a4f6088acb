// Optimizers and the L2 penalty's gradient: memory-bound streams over the parameters, one vector at a
// time, in the order of docs/ops.md's formulas. Square roots and divisions are the IEEE instructions
// (FSQRT, FDIV), so each element rounds as the reference's float arithmetic does.
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "reduce.hpp"
#include "sve.hpp"

namespace mlph::a64fx {
namespace {

// 1 - beta^t in double, cast to float (docs/ops.md).
double bias_correction(double beta, uint64_t t) { return static_cast<float>(1.0 - std::pow(beta, static_cast<double>(t))); }

}  // namespace

double sum_of_squares(Threads t, int64_t n, const float* x) {
  return flat_sum(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t v = svld1(pg, x + i);
    return svmul_x(pg, v, v);
  });
}

void l2_backward(Threads t, int64_t n, double l2, const float* w, float* dw) {
  const auto twice = static_cast<float>(2.0 * l2);
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    svst1(pg, dw + i, svmla_x(pg, svld1(pg, dw + i), svld1(pg, w + i), twice));
  });
}

void sgd_keras_update(Threads t, int64_t n, double lr, double momentum, const float* g, float* velocity, float* w) {
  const auto rate = static_cast<float>(lr), m = static_cast<float>(momentum);
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    // v = m*v - rate*g, rounded as the reference: two products, then the difference.
    const svfloat32_t v = svsub_x(pg, svmul_x(pg, svld1(pg, velocity + i), m), svmul_x(pg, svld1(pg, g + i), rate));
    svst1(pg, velocity + i, v);
    svst1(pg, w + i, svadd_x(pg, svld1(pg, w + i), v));
  });
}

// PyTorch's Adam/AdamW: the step size lr/bc1 and sqrt(bc2) are formed in double and enter the float
// arithmetic once each.
void adam_update(Threads t, int64_t n, double lr, const AdamAttrs& a, uint64_t step, double decay, bool decoupled,
                 const float* g, float* m, float* v, float* w) {
  const auto b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2), eps = static_cast<float>(a.eps);
  const auto step_size = static_cast<float>(lr / bias_correction(a.beta1, step));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bias_correction(a.beta2, step)));
  const auto coupled = static_cast<float>(decoupled ? 0.0 : decay);
  const auto shrink = static_cast<float>(decoupled ? 1.0 - lr * decay : 1.0);
  const float keep1 = 1.0f - b1, keep2 = 1.0f - b2;
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t p = svmul_x(pg, svld1(pg, w + i), shrink);
    const svfloat32_t grad = svadd_x(pg, svld1(pg, g + i), svmul_x(pg, p, coupled));
    const svfloat32_t mi = svadd_x(pg, svmul_x(pg, svld1(pg, m + i), b1), svmul_x(pg, grad, keep1));
    const svfloat32_t vi = svadd_x(pg, svmul_x(pg, svld1(pg, v + i), b2), svmul_x(pg, svmul_x(pg, grad, keep2), grad));
    const svfloat32_t denominator = svadd_x(pg, svdiv_x(pg, svsqrt_x(pg, vi), bc2_sqrt), eps);
    svst1(pg, m + i, mi);
    svst1(pg, v + i, vi);
    svst1(pg, w + i, svsub_x(pg, p, svdiv_x(pg, svmul_x(pg, mi, step_size), denominator)));
  });
}

// One pass computes the moments, the update and both squared norms; a second applies it.
void lamb_update(Threads t, int64_t n, double lr, const AdamAttrs& a, uint64_t step, double decay, float clip,
                 const float* g, float* m, float* v, float* w, float* update) {
  const auto b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2), eps = static_cast<float>(a.eps);
  const auto bc1 = static_cast<float>(bias_correction(a.beta1, step)), bc2 = static_cast<float>(bias_correction(a.beta2, step));
  const auto wd = static_cast<float>(decay);
  const float keep1 = 1.0f - b1, keep2 = 1.0f - b2;
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t grad = svdiv_x(pg, svld1(pg, g + i), clip);
    const svfloat32_t mi = svadd_x(pg, svmul_x(pg, svld1(pg, m + i), b1), svmul_x(pg, grad, keep1));
    const svfloat32_t vi = svadd_x(pg, svmul_x(pg, svld1(pg, v + i), b2), svmul_x(pg, svmul_x(pg, grad, keep2), grad));
    const svfloat32_t u = svadd_x(pg, svdiv_x(pg, svdiv_x(pg, mi, bc1), svadd_x(pg, svsqrt_x(pg, svdiv_x(pg, vi, bc2)), eps)),
                                  svmul_x(pg, svld1(pg, w + i), wd));
    svst1(pg, m + i, mi);
    svst1(pg, v + i, vi);
    svst1(pg, update + i, u);
  });
  float ratio = 1.0f;
  if (decay != 0.0) {
    const auto p_norm = static_cast<float>(std::sqrt(sum_of_squares(t, n, w)));
    const auto u_norm = static_cast<float>(std::sqrt(sum_of_squares(t, n, update)));
    if (p_norm != 0.0f && u_norm != 0.0f) ratio = p_norm / u_norm;
  }
  const float scale = static_cast<float>(lr) * ratio;
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    svst1(pg, w + i, svmls_x(pg, svld1(pg, w + i), svld1(pg, update + i), scale));
  });
}

}  // namespace mlph::a64fx
