// Loss and metric bodies with the reference's arithmetic (backends/reference/loss.cpp): per-element
// or per-row terms in double, summed by the deterministic reductions of reductions.cu, then one
// finishing step. Labels outside [0, C) make the loss NaN (and get no gradient) instead of reading
// out of bounds: the workloads validate labels on read, and find_bad_label names the first one.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// ---- mse: mean((p - t)^2); abs_error_sum: sum |p - t| ----

struct MseTerm {
  static constexpr int K = 1;
  const float* prediction;
  const float* target;
  MLPH_KERNEL void operator()(int64_t i, double* t) const {
    const double e = static_cast<double>(prediction[i]) - target[i];
    t[0] = e * e;
  }
};
MLPH_KERNEL float mse_loss(double sum, int64_t n) { return static_cast<float>(sum / static_cast<double>(n)); }

// dprediction += 2 * dloss * (p - t) / n, dtarget -= the same (either may be null). dloss is the loss's
// gradient in device memory (1, or the loss scale). `first` bit 0 (dprediction), bit 1 (dtarget): this
// node is that gradient's first writer (0 + g: the bits of a memset and an add, without the memset).
MLPH_KERNEL void mse_backward_at(int64_t i, int64_t n, const float* dloss, const float* prediction,
                                 const float* target, float* dprediction, float* dtarget, unsigned first = 0) {
  const float scale = 2.0f * *dloss / static_cast<float>(n);
  const float g = scale * (prediction[i] - target[i]);
  if (dprediction) put_into(dprediction[i], g, !(first & 1u));
  if (dtarget) put_into(dtarget[i], -g, !(first & 2u));  // d - g is d + (-g) exactly
}

struct AbsErrorTerm {
  static constexpr int K = 1;
  const float* prediction;
  const float* target;
  MLPH_KERNEL void operator()(int64_t i, double* t) const {
    t[0] = fabs(static_cast<double>(prediction[i]) - target[i]);
  }
};

// ---- softmax cross-entropy with class weights, logits [rows, C], labels [rows] ----

MLPH_KERNEL bool label_ok(int32_t label, int64_t classes) { return label >= 0 && label < classes; }

// The first maximum (std::max_element's: a NaN first stays, a NaN later is passed over).
MLPH_KERNEL int64_t first_max(const float* z, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c)
    if (z[best] < z[c]) best = c;
  return best;
}

// logsumexp of one row, shifted by its maximum, in double.
MLPH_KERNEL double log_sum_exp(const float* z, int64_t classes) {
  const float top = z[first_max(z, classes)];
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += exp(static_cast<double>(z[c]) - top);
  return top + log(sum);
}

// Row r's weighted loss, w[l] * (logsumexp(z) - z[l]), summed over rows then divided by rows.
struct SoftmaxCrossEntropyTerm {
  static constexpr int K = 1;
  const float* logits;
  const int32_t* labels;
  const float* class_weights;
  int64_t classes;
  MLPH_KERNEL void operator()(int64_t r, double* t) const {
    const float* z = logits + r * classes;
    const int32_t label = labels[r];
    t[0] = label_ok(label, classes)
               ? static_cast<double>(class_weights[label]) * (log_sum_exp(z, classes) - z[label])
               : nan("");
  }
};
MLPH_KERNEL float softmax_cross_entropy_loss(double sum, int64_t rows) {
  return static_cast<float>(sum / static_cast<double>(rows));
}

// dlogits[r, :] += dloss * w[l] / rows * (softmax(z) - onehot(l)), one row per thread; `accumulate`
// false: dlogits' first writer (0 + v, and 0 in a row whose label is bad).
MLPH_KERNEL void softmax_cross_entropy_backward_at(int64_t r, int64_t rows, int64_t classes, const float* logits,
                                                   const int32_t* labels, const float* class_weights,
                                                   const float* dloss, float* dlogits, bool accumulate = true) {
  const int32_t label = labels[r];
  float* dz = dlogits + r * classes;
  if (!label_ok(label, classes)) {
    if (!accumulate)
      for (int64_t c = 0; c < classes; ++c) dz[c] = 0.0f;
    return;
  }
  const float* z = logits + r * classes;
  const double scale = static_cast<double>(*dloss) / static_cast<double>(rows);
  const double lse = log_sum_exp(z, classes), weight = scale * class_weights[label];
  for (int64_t c = 0; c < classes; ++c) {
    const double p = exp(static_cast<double>(z[c]) - lse) - (c == label ? 1.0 : 0.0);
    put_into(dz[c], static_cast<float>(weight * p), accumulate);
  }
}

// ---- iou, per sample: the mean over classes of tp / (tp + fp + fn) ----

// Summed over a sample's pixels per class c: {tp, predicted, actual} (exact integers in double). A bad
// label counts for no class.
struct IouCountTerm {
  static constexpr int K = 3;
  const float* logits;
  const int32_t* labels;
  int64_t classes;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const bool predicted = first_max(logits + r * classes, classes) == c, actual = labels[r] == c;
    t[0] = predicted && actual ? 1.0 : 0.0;
    t[1] = predicted ? 1.0 : 0.0;
    t[2] = actual ? 1.0 : 0.0;
  }
};
// iou[n] from sample n's counts [3][C] (the reduction's layout: counts + n * 3C), in float32 as the
// DeepCAM reference: a class absent from both prediction and label counts 1.
MLPH_KERNEL void iou_finish_at(int64_t n, int64_t classes, const double* counts, float* iou) {
  const double* tp = counts + n * 3 * classes;
  const double* predicted = tp + classes;
  const double* actual = predicted + classes;
  float sum = 0.0f;
  for (int64_t c = 0; c < classes; ++c) {
    const double joined = predicted[c] + actual[c] - tp[c];  // tp + fp + fn
    sum += joined == 0 ? 1.0f / static_cast<float>(classes)
                       : static_cast<float>(tp[c]) / (static_cast<float>(joined) * static_cast<float>(classes));
  }
  iou[n] = sum;
}

}  // namespace mlph::cuda
