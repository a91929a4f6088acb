// For host backends' kernels: the arithmetic around the hot loops that every host backend does the
// same way, so that their numbers agree with the reference's to the bit where the loops do (the
// reference and a64fx-sve share it): batch normalization's per-channel finalisation (the statistics
// turned into one scale and shift per channel, the saved values for backward, the running
// statistics), a row's log-sum-exp and gradient for the softmax cross-entropy, and the per-sample IoU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mlph/sdk/program/program.hpp"

namespace mlph::sdk::host {

// y = x * scale[c] + shift[c]: batch normalization as one multiply-add per element.
struct ChannelScaleShift {
  std::vector<float> scale, shift;
};

// Training: from the per-channel `mean` (the sums over the `m` rows of the group, divided) and `var`
// (the summed squared deviations from it), the scale and shift of y; `saved` gets [mean, 1/std]
// (channels each, for backward), and the running statistics move by `a.momentum` towards the batch's
// (its variance unbiased, as PyTorch's).
inline ChannelScaleShift finish_batch_norm_train(const std::vector<double>& mean, const std::vector<double>& var,
                                                 double m, program::BatchNormAttrs a, const float* gamma, const float* beta,
                                                 float* running_mean, float* running_var, float* saved) {
  ChannelScaleShift out{std::vector<float>(mean.size()), std::vector<float>(mean.size())};
  for (size_t c = 0; c < mean.size(); ++c) {
    const double biased = var[c] / m, inverse_std = 1.0 / std::sqrt(biased + a.eps);
    saved[c] = static_cast<float>(mean[c]);
    saved[mean.size() + c] = static_cast<float>(inverse_std);
    out.scale[c] = static_cast<float>(gamma[c] * inverse_std);
    out.shift[c] = static_cast<float>(beta[c] - mean[c] * gamma[c] * inverse_std);
    running_mean[c] = static_cast<float>((1 - a.momentum) * running_mean[c] + a.momentum * mean[c]);
    running_var[c] = static_cast<float>((1 - a.momentum) * running_var[c] + a.momentum * var[c] / (m - 1));
  }
  return out;
}

// Evaluation: the scale and shift from the running statistics.
inline ChannelScaleShift batch_norm_eval_scale_shift(int64_t channels, program::BatchNormAttrs a, const float* gamma,
                                                     const float* beta, const float* running_mean,
                                                     const float* running_var) {
  ChannelScaleShift out{std::vector<float>(static_cast<size_t>(channels)), std::vector<float>(static_cast<size_t>(channels))};
  for (size_t c = 0; c < out.scale.size(); ++c) {
    const double inverse_std = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + a.eps);
    out.scale[c] = static_cast<float>(gamma[c] * inverse_std);
    out.shift[c] = static_cast<float>(beta[c] - running_mean[c] * gamma[c] * inverse_std);
  }
  return out;
}

// logsumexp of one row of `classes` logits in double, shifted by its maximum (a NaN or Inf logit
// reaches the loss): the softmax cross-entropy's.
inline double log_sum_exp(const float* z, int64_t classes) {
  const float top = *std::max_element(z, z + classes);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c]) - top);
  return top + std::log(sum);
}

// Softmax cross-entropy's gradient for one row, added to `dlogits`: weight * (softmax(z) - onehot(label)),
// in double.
inline void add_softmax_cross_entropy_gradient(const float* z, int32_t label, int64_t classes, double weight,
                                               float* dlogits) {
  const double lse = log_sum_exp(z, classes);
  for (int64_t c = 0; c < classes; ++c) {
    const double p = std::exp(static_cast<double>(z[c]) - lse) - (c == label ? 1.0 : 0.0);
    dlogits[c] += static_cast<float>(weight * p);
  }
}

// One sample's mean IoU over `classes` (DeepCAM's metric): its `pixels` rows of logits (the
// prediction: the first maximum) against the labels. The counts are exact integers, the IoU
// arithmetic float32 as the reference's; a class neither predicted nor present counts 1.
inline float sample_iou(const float* logits, const int32_t* labels, int64_t pixels, int64_t classes) {
  std::vector<int64_t> tp(static_cast<size_t>(classes)), predicted(tp.size()), actual(tp.size());
  for (int64_t r = 0; r < pixels; ++r) {
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
  return sum;
}

}  // namespace mlph::sdk::host
