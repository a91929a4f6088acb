// Losses and the L2 penalty. Sums run in double: the loss the core logs and checks for divergence
// carries no avoidable rounding, and a NaN or Inf anywhere reaches it.
#include <cmath>

#include "ops.hpp"

namespace mlph::reference {

double mse_forward(int64_t n, const float* prediction, const float* target) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(prediction[i]) - target[i];
    sum += e * e;
  }
  return sum / static_cast<double>(n);
}

void mse_backward(int64_t n, const float* prediction, const float* target, float dloss, float* dprediction,
                  float* dtarget) {
  const float scale = 2.0f * dloss / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = scale * (prediction[i] - target[i]);
    if (dprediction) dprediction[i] += g;
    if (dtarget) dtarget[i] -= g;
  }
}

double abs_error_sum(int64_t n, const float* prediction, const float* target) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(prediction[i]) - target[i]);
  return sum;
}

double l2_penalty(int64_t n, double l2, const float* w) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * w[i];
  return l2 * sum;
}

void l2_backward(int64_t n, double l2, const float* w, float* dw) {
  const auto twice = static_cast<float>(2.0 * l2);
  for (int64_t i = 0; i < n; ++i) dw[i] += twice * w[i];
}

}  // namespace mlph::reference
