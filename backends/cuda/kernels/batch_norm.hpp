// Batch normalization bodies, channels-last x [rows, C], the reference's arithmetic
// (backends/reference/channel.cpp): statistics summed in double, two passes (the mean, then the
// squared deviations from it), coefficients per channel, then one multiply-add per element.
//
// SyncBatchNorm (group_size > 1) sums the statistics over a group of ranks between the kernels, so
// every pass leaves its per-channel sums in a buffer of doubles the caller may allreduce in place
// (MLPH_DTYPE_F64, sum), with this rank's row count riding along as the reference's
// sdk::sum_over_group sends it:
//
//   forward stats [2C + 1]:  [0, C) sum x, then the mean   [C] rows   [C + 1, 2C + 1) sum (x - mean)^2
//     batch_norm_sum           -> allreduce stats[0, C + 1)   (the sums and the count)
//     batch_norm_variance      -> allreduce stats[C + 1, 2C + 1)
//     batch_norm_finalize, batch_norm_apply
//   or in one pass (backend.batch_norm=one_pass), moments [2C + 1]: [0, C) sum x   [C, 2C) sum x^2   [2C] rows
//     batch_norm_moments       -> allreduce moments[0, 2C + 1)
//     batch_norm_finalize_moments, batch_norm_apply
//   backward sums [2C + 1]:  [0, C) sum dy   [C, 2C) sum dy * xhat   [2C] rows
//     batch_norm_backward_sums, batch_norm_backward_params (this rank's dgamma, dbeta: before the allreduce)
//                              -> allreduce sums[0, 2C + 1)
//     batch_norm_backward_data
// Without a group the same kernels run with nothing in between. `saved` [2C] (mean, 1/sqrt(var + eps)
// as float) is what the training forward leaves for the backward pass, as the reference's.
//
// x, y, dy and dx are stored as T (float, or Bf16 for bf16 activations: issue 33 item 4): each element
// widened to float as it is read, every result rounded once into T as it is written (dx accumulating:
// read, add in fp32, round once). Statistics, scale and shift, sums and coefficients are fp32/double in
// every precision.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"

namespace mlph::cuda {

// ---- forward (training) ----

// The mean, in place of the sum: stats[c] /= stats[C] (the group's count after the allreduce).
MLPH_KERNEL void batch_norm_mean_at(int64_t c, int64_t channels, double* stats) { stats[c] /= stats[channels]; }

// Summed over rows once the means are in stats[0, C): (x - mean)^2 in double.
template <class T = float>
struct BatchNormDeviationTerm {
  static constexpr int K = 1;
  const T* x;
  const double* mean;
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const double d = to_float(x[r * channels + c]) - mean[c];
    t[0] = d * d;
  }
};

// One pass over x instead of two (backend.batch_norm=one_pass): x and x^2 summed in double in one
// read, laid out as the backward's sums, moments [0, C) sum x, [C, 2C) sum x^2, [2C] rows (one
// allreduce for a group, not two). batch_norm_finalize_moments_at centers them in double:
// sum (x - mean)^2 = sum x^2 - mean * sum x loses log2(mean^2 / var) of double's 53 bits, none of the
// 24 a float statistic keeps for any activation short of mean / std ~ 2^14.
template <class T = float>
struct BatchNormMomentsTerm {
  static constexpr int K = 2;
  const T* x;
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const double v = to_float(x[r * channels + c]);
    t[0] = v;
    t[1] = v * v;
  }
};

// Per channel, from the row count m, the mean and sum (x - mean)^2: saved mean and inverse std, the
// scale and shift of batch_norm_apply ([2C]: scale, then shift), and the running statistics' update
// (PyTorch: the unbiased variance goes into running_var).
MLPH_KERNEL void batch_norm_finalize_channel(int64_t c, int64_t channels, double eps, double momentum, double m,
                                             double mean, double var, const float* gamma, const float* beta,
                                             float* running_mean, float* running_var, float* saved,
                                             float* scale_shift) {
  const double biased = var / m, inverse_std = 1.0 / sqrt(biased + eps);
  saved[c] = static_cast<float>(mean);
  saved[channels + c] = static_cast<float>(inverse_std);
  scale_shift[c] = static_cast<float>(gamma[c] * inverse_std);
  scale_shift[channels + c] = static_cast<float>(beta[c] - mean * gamma[c] * inverse_std);
  running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1 - momentum) * running_var[c] + momentum * var / (m - 1));
}
// From the two passes' stats (the layout above).
MLPH_KERNEL void batch_norm_finalize_at(int64_t c, int64_t channels, double eps, double momentum, const double* stats,
                                        const float* gamma, const float* beta, float* running_mean,
                                        float* running_var, float* saved, float* scale_shift) {
  batch_norm_finalize_channel(c, channels, eps, momentum, stats[channels], stats[c], stats[channels + 1 + c], gamma,
                              beta, running_mean, running_var, saved, scale_shift);
}
// From one pass's moments (BatchNormMomentsTerm's layout).
MLPH_KERNEL void batch_norm_finalize_moments_at(int64_t c, int64_t channels, double eps, double momentum,
                                                const double* moments, const float* gamma, const float* beta,
                                                float* running_mean, float* running_var, float* saved,
                                                float* scale_shift) {
  const double m = moments[2 * channels], mean = moments[c] / m;
  const double centered = moments[channels + c] - mean * moments[c];
  batch_norm_finalize_channel(c, channels, eps, momentum, m, mean, centered > 0 ? centered : 0.0, gamma, beta,
                              running_mean, running_var, saved, scale_shift);
}

// ---- forward (evaluation): the running statistics' scale and shift ----

MLPH_KERNEL void batch_norm_eval_coefficients_at(int64_t c, int64_t channels, double eps, const float* gamma,
                                                 const float* beta, const float* running_mean,
                                                 const float* running_var, float* scale_shift) {
  const double inverse_std = 1.0 / sqrt(static_cast<double>(running_var[c]) + eps);
  scale_shift[c] = static_cast<float>(gamma[c] * inverse_std);
  scale_shift[channels + c] = static_cast<float>(beta[c] - running_mean[c] * gamma[c] * inverse_std);
}

// y = x * scale[c] + shift[c], training and evaluation alike.
template <class T = float>
MLPH_KERNEL void batch_norm_apply_at(int64_t r, int64_t c, int64_t channels, const T* x, const float* scale_shift, T* y) {
  y[r * channels + c] = from_float<T>(to_float(x[r * channels + c]) * scale_shift[c] + scale_shift[channels + c]);
}

// ---- backward (of the training forward) ----

// Summed over rows: {dy, dy * xhat} with xhat = (x - mean) * inverse_std, in double.
template <class T = float>
struct BatchNormBackwardTerm {
  static constexpr int K = 2;
  const T* x;
  const T* dy;
  const float* saved;
  int64_t channels;
  MLPH_KERNEL void operator()(int64_t r, int64_t c, double* t) const {
    const double g = to_float(dy[r * channels + c]);
    t[0] = g;
    t[1] = g * (static_cast<double>(to_float(x[r * channels + c])) - saved[c]) * saved[channels + c];
  }
};

// This rank's dbeta += sum dy, dgamma += sum dy * xhat (either may be null), from the sums before any
// allreduce: the parameters' gradients are averaged with the others' later, as every gradient.
MLPH_KERNEL void batch_norm_backward_params_at(int64_t c, int64_t channels, const double* sums, float* dgamma,
                                               float* dbeta) {
  if (dbeta) dbeta[c] += static_cast<float>(sums[c]);
  if (dgamma) dgamma[c] += static_cast<float>(sums[channels + c]);
}

// Per channel, from the (group's) sums: [3C] = mean dy, mean dy * xhat, gamma * inverse_std.
MLPH_KERNEL void batch_norm_backward_coefficients_at(int64_t c, int64_t channels, const double* sums,
                                                     const float* gamma, const float* saved, float* coefficients) {
  const double m = sums[2 * channels];
  coefficients[c] = static_cast<float>(sums[c] / m);
  coefficients[channels + c] = static_cast<float>(sums[channels + c] / m);
  coefficients[2 * channels + c] = gamma[c] * saved[channels + c];
}

// dx += gamma * inverse_std * (dy - mean dy - xhat * mean(dy * xhat)).
template <class T = float>
MLPH_KERNEL void batch_norm_backward_data_at(int64_t r, int64_t c, int64_t channels, const T* x, const T* dy,
                                             const float* saved, const float* coefficients, T* dx,
                                             bool accumulate = true) {
  const int64_t i = r * channels + c;
  const float xhat = (to_float(x[i]) - saved[c]) * saved[channels + c];
  put_into(dx[i], coefficients[2 * channels + c] * (to_float(dy[i]) - coefficients[c] - xhat * coefficients[channels + c]),
           accumulate);
}

}  // namespace mlph::cuda
