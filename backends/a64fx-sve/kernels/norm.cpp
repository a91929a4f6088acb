// Batch normalization over x [rows, channels]: per-channel statistics by channel_sums (float within
// blocks of rows, double across them), then one fused multiply-add per element with a scale and a
// shift per channel.
#include <cmath>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/host/kernel_math.hpp"
#include "reduce.hpp"
#include "sve.hpp"

namespace mlph::a64fx {
namespace {

// y = x * scale[c] + shift[c]
void normalize(Threads t, RowsByChannels s, const float* x, const std::vector<float>& scale,
               const std::vector<float>& shift, float* y) {
  parallel_chunks(t, s.rows, std::max<int64_t>(1, kMinChunk / s.channels), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < s.channels; c += vector_lanes()) {
        const svbool_t pg = lanes_from(c, s.channels);
        const int64_t i = r * s.channels + c;
        svst1(pg, y + i, svmla_x(pg, svld1(pg, shift.data() + c), svld1(pg, x + i), svld1(pg, scale.data() + c)));
      }
  });
}

}  // namespace

// Two passes (the mean, then squared deviations from it): no cancellation for inputs far from 0.
void batch_norm_train_forward(Threads t, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var, float* saved, float* y,
                              const GroupSum* group) {
  std::vector<double> mean = channel_sums<1>(t, s, [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t&) {
    s0 = svadd_x(pg, s0, svld1(pg, x + r * s.channels + c));
  });
  const double m = sdk::sum_over_group(mean, s.rows, group);
  std::vector<float> center(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) mean[c] /= m, center[c] = static_cast<float>(mean[c]);
  std::vector<double> var = channel_sums<1>(t, s, [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t&) {
    const svfloat32_t d = svsub_x(pg, svld1(pg, x + r * s.channels + c), svld1(pg, center.data() + c));
    s0 = svmla_x(pg, s0, d, d);
  });
  if (group) (*group)(var);
  const sdk::host::ChannelScaleShift f =
      sdk::host::finish_batch_norm_train(mean, var, m, a, gamma, beta, running_mean, running_var, saved);
  normalize(t, s, x, f.scale, f.shift, y);
}

void batch_norm_eval_forward(Threads t, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var, float* y) {
  const sdk::host::ChannelScaleShift f =
      sdk::host::batch_norm_eval_scale_shift(s.channels, a, gamma, beta, running_mean, running_var);
  normalize(t, s, x, f.scale, f.shift, y);
}

// With xhat = (x - mean) * inverse_std: dbeta = sum dy, dgamma = sum dy * xhat,
// dx = gamma * inverse_std * (dy - dbeta/M - xhat * dgamma/M).
void batch_norm_backward(Threads t, RowsByChannels s, const float* x, const float* gamma, const float* saved,
                         const float* dy, float* dx, float* dgamma, float* dbeta, const GroupSum* group) {
  const float* mean = saved;
  const float* inverse_std = saved + s.channels;
  std::vector<double> sums = channel_sums<2>(t, s, [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t& s1) {
    const int64_t i = r * s.channels + c;
    const svfloat32_t g = svld1(pg, dy + i);
    const svfloat32_t xhat = svmul_x(pg, svsub_x(pg, svld1(pg, x + i), svld1(pg, mean + c)), svld1(pg, inverse_std + c));
    s0 = svadd_x(pg, s0, g);
    s1 = svmla_x(pg, s1, g, xhat);
  });
  const auto channels = static_cast<size_t>(s.channels);
  for (size_t c = 0; c < channels; ++c) {  // this rank's own, before the group's sums replace them
    if (dbeta) dbeta[c] += static_cast<float>(sums[c]);
    if (dgamma) dgamma[c] += static_cast<float>(sums[channels + c]);
  }
  if (!dx) return;
  const double m = sdk::sum_over_group(sums, s.rows, group);
  std::vector<float> mean_dy(channels), mean_dy_xhat(channels), factor(channels);
  for (size_t c = 0; c < channels; ++c) {
    mean_dy[c] = static_cast<float>(sums[c] / m);
    mean_dy_xhat[c] = static_cast<float>(sums[channels + c] / m);
    factor[c] = gamma[c] * inverse_std[c];
  }
  parallel_chunks(t, s.rows, std::max<int64_t>(1, kMinChunk / s.channels), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < s.channels; c += vector_lanes()) {
        const svbool_t pg = lanes_from(c, s.channels);
        const int64_t i = r * s.channels + c;
        const svfloat32_t xhat = svmul_x(pg, svsub_x(pg, svld1(pg, x + i), svld1(pg, mean + c)), svld1(pg, inverse_std + c));
        // dy - mean_dy - xhat * mean_dy_xhat, times gamma * inverse_std
        const svfloat32_t centered = svmls_x(pg, svsub_x(pg, svld1(pg, dy + i), svld1(pg, mean_dy.data() + c)), xhat,
                                             svld1(pg, mean_dy_xhat.data() + c));
        svst1(pg, dx + i, svmla_x(pg, svld1(pg, dx + i), centered, svld1(pg, factor.data() + c)));
      }
  });
}

}  // namespace mlph::a64fx
