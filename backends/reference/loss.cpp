// Losses and the L2 penalty. Sums run in double: the loss the core logs and checks for divergence
// carries no avoidable rounding, and a NaN or Inf anywhere reaches it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "mlph/sdk/host/kernel_math.hpp"
#include "ops.hpp"

namespace mlph::reference {

double mse_forward(ThreadPool&, int64_t n, const float* prediction, const float* target) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(prediction[i]) - target[i];
    sum += e * e;
  }
  return sum / static_cast<double>(n);
}

void mse_backward(ThreadPool&, int64_t n, const float* prediction, const float* target, float dloss,
                  float* dprediction, float* dtarget) {
  const float scale = 2.0f * dloss / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = scale * (prediction[i] - target[i]);
    if (dprediction) dprediction[i] += g;
    if (dtarget) dtarget[i] -= g;
  }
}

double abs_error_sum(ThreadPool&, int64_t n, const float* prediction, const float* target) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(prediction[i]) - target[i]);
  return sum;
}

using sdk::host::log_sum_exp;

// Per-thread partial sums in double, added in thread order.
double softmax_cross_entropy_forward(ThreadPool& pool, RowsByChannels s, const float* logits, const int32_t* labels,
                                     const float* class_weights) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.size(), s.rows / 4096));
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part)
      for (int64_t r = s.rows * part / parts; r < s.rows * (part + 1) / parts; ++r) {
        const float* z = logits + r * s.channels;
        partial[static_cast<size_t>(part)] +=
            static_cast<double>(class_weights[labels[r]]) * (log_sum_exp(z, s.channels) - z[labels[r]]);
      }
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum / static_cast<double>(s.rows);
}

void softmax_cross_entropy_backward(ThreadPool& pool, RowsByChannels s, const float* logits, const int32_t* labels,
                                    const float* class_weights, float dloss, float* dlogits) {
  const double scale = static_cast<double>(dloss) / static_cast<double>(s.rows);
  pool.parallel_for(s.rows, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      sdk::host::add_softmax_cross_entropy_gradient(logits + r * s.channels, labels[r], s.channels,
                                                    scale * class_weights[labels[r]], dlogits + r * s.channels);
    }
  });
}

// Parallel over samples; the counts are exact integers, the IoU arithmetic float32 as the reference's.
void iou_forward(ThreadPool& pool, RowsByChannels s, int64_t batch, const float* logits, const int32_t* labels,
                 float* iou) {
  const int64_t pixels = s.rows / batch, classes = s.channels;
  pool.parallel_for(batch, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      iou[n] = sdk::host::sample_iou(logits + n * pixels * classes, labels + n * pixels, pixels, classes);
  });
}

double l2_penalty(ThreadPool&, int64_t n, double l2, const float* w) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * w[i];
  return l2 * sum;
}

void l2_backward(ThreadPool&, int64_t n, double l2, const float* w, float* dw) {
  const auto twice = static_cast<float>(2.0 * l2);
  for (int64_t i = 0; i < n; ++i) dw[i] += twice * w[i];
}

}  // namespace mlph::reference
