// Losses and metrics. mse and the absolute error are vector reductions (flat_sum); the segmentation
// loss and IoU work per pixel over a handful of classes (DeepCAM: 3), in scalar code with exp and
// log from the C library, in double as the reference.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/host/kernel_math.hpp"
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

using sdk::host::log_sum_exp;

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
      sdk::host::add_softmax_cross_entropy_gradient(logits + r * s.channels, labels[r], s.channels,
                                                    scale * class_weights[labels[r]], dlogits + r * s.channels);
    }
  });
}

void iou_forward(Threads t, RowsByChannels s, int64_t batch, const float* logits, const int32_t* labels, float* iou) {
  const int64_t pixels = s.rows / batch, classes = s.channels;
  parallel_items(t, batch, [&](int64_t n) {
    iou[n] = sdk::host::sample_iou(logits + n * pixels * classes, labels + n * pixels, pixels, classes);
  });
}

}  // namespace mlph::a64fx
