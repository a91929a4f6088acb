// Losses and metrics. mse and the absolute error are vector reductions (flat_sum); the segmentation
// loss and IoU work per pixel over a handful of classes (DeepCAM: 3), in scalar code with exp and
// log from the C library, in double as the reference.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "reduce.hpp"
#include "sve.hpp"

namespace mlph::a64fx {

double mse_forward(Threads t, int64_t n, const float* prediction, const float* target) {
  const double sum = flat_sum(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t e = svsub_x(pg, svld1(pg, prediction + i), svld1(pg, target + i));
    return svmul_x(pg, e, e);
  });
  return sum / static_cast<double>(n);
}

void mse_backward(Threads t, int64_t n, const float* prediction, const float* target, float dloss, float* dprediction,
                  float* dtarget) {
  const float scale = 2.0f * dloss / static_cast<float>(n);
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    const svfloat32_t g = svmul_x(pg, svsub_x(pg, svld1(pg, prediction + i), svld1(pg, target + i)), scale);
    if (dprediction) svst1(pg, dprediction + i, svadd_x(pg, svld1(pg, dprediction + i), g));
    if (dtarget) svst1(pg, dtarget + i, svsub_x(pg, svld1(pg, dtarget + i), g));
  });
}

double abs_error_sum(Threads t, int64_t n, const float* prediction, const float* target) {
  return flat_sum(t, n, [&](svbool_t pg, int64_t i) {
    return svabd_x(pg, svld1(pg, prediction + i), svld1(pg, target + i));
  });
}

namespace {
// logsumexp of one row, shifted by its maximum (a NaN or Inf logit reaches the loss).
double log_sum_exp(const float* z, int64_t classes) {
  const float top = *std::max_element(z, z + classes);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - top);
  return top + std::log(sum);
}
}  // namespace

double softmax_cross_entropy_forward(Threads t, RowsByChannels s, const float* logits, const int32_t* labels,
                                     const float* class_weights) {
  const int64_t parts = part_count(t, s.rows, 4096);
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  parallel_items(t, parts, [&](int64_t part) {
    double sum = 0;
    for (int64_t r = s.rows * part / parts; r < s.rows * (part + 1) / parts; ++r) {
      const float* z = logits + r * s.channels;
      sum += static_cast<double>(class_weights[labels[r]]) * (log_sum_exp(z, s.channels) - z[labels[r]]);
    }
    partial[static_cast<size_t>(part)] = sum;
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return sum / static_cast<double>(s.rows);
}

void softmax_cross_entropy_backward(Threads t, RowsByChannels s, const float* logits, const int32_t* labels,
                                    const float* class_weights, float dloss, float* dlogits) {
  const double scale = static_cast<double>(dloss) / static_cast<double>(s.rows);
  parallel_chunks(t, s.rows, 1024, [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t r = begin; r < end; ++r) {
      const float* z = logits + r * s.channels;
      const double lse = log_sum_exp(z, s.channels), weight = scale * class_weights[labels[r]];
      for (int64_t c = 0; c < s.channels; ++c) {
        const double p = std::exp(static_cast<double>(z[c]) - lse) - (c == labels[r] ? 1.0 : 0.0);
        dlogits[r * s.channels + c] += static_cast<float>(weight * p);
      }
    }
  });
}

void iou_forward(Threads t, RowsByChannels s, int64_t batch, const float* logits, const int32_t* labels, float* iou) {
  const int64_t pixels = s.rows / batch, classes = s.channels;
  parallel_items(t, batch, [&](int64_t n) {
    std::vector<int64_t> tp(static_cast<size_t>(classes)), predicted(tp.size()), actual(tp.size());
    for (int64_t r = n * pixels; r < (n + 1) * pixels; ++r) {
      const float* z = logits + r * classes;
      const auto pred = static_cast<size_t>(std::max_element(z, z + classes) - z);  // the first maximum
      const auto label = static_cast<size_t>(labels[r]);
      ++predicted[pred], ++actual[label];
      if (pred == label) ++tp[pred];
    }
    float sum = 0.0f;
    for (size_t c = 0; c < tp.size(); ++c) {
      const int64_t joined = predicted[c] + actual[c] - tp[c];  // tp + fp + fn
      sum += joined == 0 ? 1.0f / static_cast<float>(classes)
                         : static_cast<float>(tp[c]) / (static_cast<float>(joined) * static_cast<float>(classes));
    }
    iou[n] = sum;
  });
}

}  // namespace mlph::a64fx
