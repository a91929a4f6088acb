// Per-channel and layout ops of DeepCAM: add, concat, global average pooling, broadcast, channel affine,
// shift-scale and batch normalization. Activations are channels-last, so each is a loop over rows
// (positions) with an inner loop over contiguous channels, which the compiler vectorises. Reductions over
// rows take private per-thread sums in double, added in thread order (repeatable for a fixed thread count).
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "mlph/sdk/host/kernel_math.hpp"
#include "ops.hpp"

namespace mlph::reference {
namespace {

constexpr int64_t kMinElements = 1 << 15;  // below this, waking the other threads costs more

// Rows per chunk so that a chunk holds about kMinElements floats.
int64_t min_rows(int64_t channels) { return std::max<int64_t>(1, kMinElements / std::max<int64_t>(1, channels)); }

// sums[k * C + c] = sum over rows r of term(r, c)[k] for K per-channel sums at once, in double, over threads.
template <size_t K, class F>
std::vector<double> channel_sums(ThreadPool& pool, RowsByChannels s, F&& term) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.size(), s.rows / min_rows(s.channels)));
  const size_t width = K * static_cast<size_t>(s.channels);
  std::vector<double> partial(static_cast<size_t>(parts) * width, 0.0);
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      double* mine = partial.data() + static_cast<size_t>(part) * width;
      for (int64_t r = s.rows * part / parts; r < s.rows * (part + 1) / parts; ++r)
        for (int64_t c = 0; c < s.channels; ++c) {
          const std::array<double, K> t = term(r, c);
          for (size_t k = 0; k < K; ++k) mine[static_cast<int64_t>(k) * s.channels + c] += t[k];
        }
    }
  });
  std::vector<double> total(width, 0.0);
  for (int64_t part = 0; part < parts; ++part)
    for (size_t i = 0; i < width; ++i) total[i] += partial[static_cast<size_t>(part) * width + i];
  return total;
}

template <class F>
void for_rows(ThreadPool& pool, RowsByChannels s, F&& f) {
  pool.parallel_for(s.rows, min_rows(s.channels), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r);
  });
}

}  // namespace

void add_forward(ThreadPool& pool, int64_t n, const float* a, const float* b, float* y) {
  pool.parallel_for(n, kMinElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
  });
}

void concat_forward(ThreadPool& pool, int64_t rows, const std::vector<const float*>& inputs,
                    const std::vector<int64_t>& widths, float* y) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  for_rows(pool, {rows, total}, [&](int64_t r) {
    float* out = y + r * total;
    for (size_t k = 0; k < inputs.size(); ++k) {
      std::copy(inputs[k] + r * widths[k], inputs[k] + (r + 1) * widths[k], out);
      out += widths[k];
    }
  });
}

void concat_backward(ThreadPool& pool, int64_t rows, const std::vector<float*>& grads,
                     const std::vector<int64_t>& widths, const float* dy) {
  int64_t total = 0;
  for (int64_t w : widths) total += w;
  for_rows(pool, {rows, total}, [&](int64_t r) {
    const float* from = dy + r * total;
    for (size_t k = 0; k < grads.size(); from += widths[k], ++k)
      if (grads[k])
        for (int64_t c = 0; c < widths[k]; ++c) grads[k][r * widths[k] + c] += from[c];
  });
}

// Parallel over (sample, block of channels): each thread reads its columns of every position.
void global_avg_pool_forward(ThreadPool& pool, int64_t batch, int64_t positions, int64_t channels, const float* x,
                             float* y) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  pool.parallel_for(batch * blocks, [&](int64_t begin, int64_t end) {
    double sum[kBlock];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / blocks, c0 = item % blocks * kBlock, width = std::min(kBlock, channels - c0);
      std::fill(sum, sum + width, 0.0);
      for (int64_t p = 0; p < positions; ++p) {
        const float* row = x + (n * positions + p) * channels + c0;
        for (int64_t c = 0; c < width; ++c) sum[c] += row[c];
      }
      for (int64_t c = 0; c < width; ++c)
        y[n * channels + c0 + c] = static_cast<float>(sum[c] / static_cast<double>(positions));
    }
  });
}

void global_avg_pool_backward(ThreadPool& pool, int64_t batch, int64_t positions, int64_t channels, const float* dy,
                              float* dx) {
  const float inverse = 1.0f / static_cast<float>(positions);
  for_rows(pool, {batch * positions, channels}, [&](int64_t r) {
    const float* g = dy + r / positions * channels;
    for (int64_t c = 0; c < channels; ++c) dx[r * channels + c] += g[c] * inverse;
  });
}

namespace {
// The row of x (in rows of C) that output row `r` repeats: size-1 dims of `in` index 0.
int64_t source_row(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int64_t r) {
  int64_t index = 0, stride = 1;
  for (size_t d = out.size() - 1; d-- > 0;) {  // skip the channel dim
    const int64_t i = r % out[d];
    r /= out[d];
    if (in[d] != 1) index += i * stride;
    stride *= in[d];
  }
  return index;
}
}  // namespace

void broadcast_forward(ThreadPool& pool, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                       const float* x, float* y) {
  const int64_t channels = out.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < out.size(); ++d) rows *= out[d];
  for_rows(pool, {rows, channels}, [&](int64_t r) {
    const float* from = x + source_row(in, out, r) * channels;
    std::copy(from, from + channels, y + r * channels);
  });
}

// Threads take disjoint channel blocks (every output row adds into its source row: rows would race).
void broadcast_backward(ThreadPool& pool, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                        const float* dy, float* dx) {
  const int64_t channels = out.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < out.size(); ++d) rows *= out[d];
  pool.parallel_for(channels, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r) {
      float* to = dx + source_row(in, out, r) * channels;
      const float* from = dy + r * channels;
      for (int64_t c = c0; c < c1; ++c) to[c] += from[c];
    }
  });
}

void channel_affine_forward(ThreadPool& pool, RowsByChannels s, const float* x, const float* w, const float* b,
                            float* y) {
  for_rows(pool, s, [&](int64_t r) {
    for (int64_t c = 0; c < s.channels; ++c) y[r * s.channels + c] = x[r * s.channels + c] * w[c] + b[c];
  });
}

void channel_affine_backward(ThreadPool& pool, RowsByChannels s, const float* x, const float* w, const float* dy,
                             float* dx, float* dw, float* db) {
  if (dx)
    for_rows(pool, s, [&](int64_t r) {
      for (int64_t c = 0; c < s.channels; ++c) dx[r * s.channels + c] += dy[r * s.channels + c] * w[c];
    });
  if (!dw && !db) return;
  const std::vector<double> sums = channel_sums<2>(pool, s, [&](int64_t r, int64_t c) {
    const double g = dy[r * s.channels + c];
    return std::array<double, 2>{g * x[r * s.channels + c], g};
  });
  for (int64_t c = 0; c < s.channels; ++c) {
    if (dw) dw[c] += static_cast<float>(sums[static_cast<size_t>(c)]);
    if (db) db[c] += static_cast<float>(sums[static_cast<size_t>(s.channels + c)]);
  }
}

void shift_scale_forward(ThreadPool& pool, RowsByChannels s, const float* x, const float* shift, const float* scale,
                         float* y) {
  for_rows(pool, s, [&](int64_t r) {
    for (int64_t c = 0; c < s.channels; ++c) y[r * s.channels + c] = (x[r * s.channels + c] - shift[c]) * scale[c];
  });
}

// ---- batch normalization ---------------------------------------------------------------------------

namespace {
// y = (x - mean[c]) * inverse_std[c] * gamma[c] + beta[c], as one scale and shift per channel.
void normalize(ThreadPool& pool, RowsByChannels s, const float* x, const std::vector<float>& scale,
               const std::vector<float>& shift, float* y) {
  for_rows(pool, s, [&](int64_t r) {
    for (int64_t c = 0; c < s.channels; ++c) y[r * s.channels + c] = x[r * s.channels + c] * scale[c] + shift[c];
  });
}
}  // namespace

// Two passes (mean, then the mean squared deviation) in double: no cancellation for inputs far from 0.
void batch_norm_train_forward(ThreadPool& pool, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var, float* saved, float* y,
                              const GroupSum* group) {
  std::vector<double> mean =
      channel_sums<1>(pool, s, [&](int64_t r, int64_t c) { return std::array<double, 1>{x[r * s.channels + c]}; });
  const double m = sdk::sum_over_group(mean, s.rows, group);
  for (double& v : mean) v /= m;
  std::vector<double> var = channel_sums<1>(pool, s, [&](int64_t r, int64_t c) {
    const double d = x[r * s.channels + c] - mean[static_cast<size_t>(c)];
    return std::array<double, 1>{d * d};
  });
  if (group) (*group)(var);
  const sdk::host::ChannelScaleShift f =
      sdk::host::finish_batch_norm_train(mean, var, m, a, gamma, beta, running_mean, running_var, saved);
  normalize(pool, s, x, f.scale, f.shift, y);
}

void batch_norm_eval_forward(ThreadPool& pool, RowsByChannels s, BatchNormAttrs a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var, float* y) {
  const sdk::host::ChannelScaleShift f =
      sdk::host::batch_norm_eval_scale_shift(s.channels, a, gamma, beta, running_mean, running_var);
  normalize(pool, s, x, f.scale, f.shift, y);
}

// With xhat = (x - mean) * inverse_std: dbeta = sum dy, dgamma = sum dy * xhat,
// dx = gamma * inverse_std * (dy - dbeta/M - xhat * dgamma/M).
void batch_norm_backward(ThreadPool& pool, RowsByChannels s, const float* x, const float* gamma, const float* saved,
                         const float* dy, float* dx, float* dgamma, float* dbeta, const GroupSum* group) {
  const float* mean = saved;
  const float* inverse_std = saved + s.channels;
  std::vector<double> sums = channel_sums<2>(pool, s, [&](int64_t r, int64_t c) {
    const double g = dy[r * s.channels + c];
    return std::array<double, 2>{g, g * (static_cast<double>(x[r * s.channels + c]) - mean[c]) * inverse_std[c]};
  });
  const size_t channels = static_cast<size_t>(s.channels);
  for (size_t c = 0; c < channels; ++c) {  // this rank's own, before the group's sums replace them
    if (dbeta) dbeta[c] += static_cast<float>(sums[c]);
    if (dgamma) dgamma[c] += static_cast<float>(sums[channels + c]);
  }
  const double m = sdk::sum_over_group(sums, s.rows, group);
  std::vector<float> mean_dy(channels), mean_dy_xhat(channels), factor(channels);
  for (size_t c = 0; c < mean_dy.size(); ++c) {
    mean_dy[c] = static_cast<float>(sums[c] / m);
    mean_dy_xhat[c] = static_cast<float>(sums[channels + c] / m);
    factor[c] = gamma[c] * inverse_std[c];
  }
  if (!dx) return;
  for_rows(pool, s, [&](int64_t r) {
    for (int64_t c = 0; c < s.channels; ++c) {
      const int64_t i = r * s.channels + c;
      const float xhat = (x[i] - mean[c]) * inverse_std[c];
      dx[i] += factor[c] * (dy[i] - mean_dy[c] - xhat * mean_dy_xhat[c]);
    }
  });
}

}  // namespace mlph::reference
