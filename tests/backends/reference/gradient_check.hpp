// Finite-difference checking of the reference kernels, shared by the op tests: for L = sum(op(inputs) * R)
// with a random R (accumulated in double), the analytic gradient (backward with dy = R) must match central
// differences of L for every input element (or an even sample), and backward must accumulate. Also the
// conv geometry helpers and a naive conv (the definition, with bounds checks) as an oracle.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "ops.hpp"
#include "test_util.hpp"

namespace mlph::reference::test {

using Tensors = std::vector<std::vector<float>>;

inline ThreadPool& pool() {
  static ThreadPool shared(3);  // more threads than this machine's cores: uneven splits get exercised
  return shared;
}

inline Scratch& scratch() {  // reused across calls, as the executor does
  static Scratch shared;
  return shared;
}

struct OpUnderTest {
  Tensors inputs;  // the differentiable inputs
  size_t out_size = 0;
  std::function<void(const Tensors& in, std::vector<float>& out)> forward;
  // Accumulates d(sum(out * dy))/d(in[k]) into grads[k].
  std::function<void(const Tensors& in, const std::vector<float>& dy, Tensors& grads)> backward;
};

inline double weighted_sum(const OpUnderTest& op, const Tensors& in, const std::vector<float>& r) {
  std::vector<float> out(op.out_size);
  op.forward(in, out);
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * r[i];
  return sum;
}

inline void expect_gradients_match(OpUnderTest op, float h = 1e-2f, double tolerance = 2e-3,
                                   size_t checks_per_input = 300) {
  const std::vector<float> r = random_floats(op.out_size, 4242);
  Tensors grads, twice;
  for (const auto& in : op.inputs) grads.emplace_back(in.size(), 0.0f);
  op.backward(op.inputs, r, grads);
  twice = grads;
  op.backward(op.inputs, r, twice);
  for (size_t k = 0; k < op.inputs.size(); ++k) {
    std::vector<float>& x = op.inputs[k];
    const size_t step = std::max<size_t>(1, x.size() / checks_per_input);
    double largest = 0;
    for (size_t i = 0; i < x.size(); i += step) {
      const float saved = x[i], up_value = saved + h, down_value = saved - h;
      x[i] = up_value;
      const double up = weighted_sum(op, op.inputs, r);
      x[i] = down_value;
      const double down = weighted_sum(op, op.inputs, r);
      x[i] = saved;
      const double numeric = (up - down) / (static_cast<double>(up_value) - down_value);
      largest = std::max(largest, std::fabs(numeric));
      ASSERT_NEAR(grads[k][i], numeric, tolerance * (1.0 + std::fabs(numeric))) << "input " << k << " element " << i;
      ASSERT_NEAR(twice[k][i], 2 * grads[k][i], 1e-4 * (1 + std::fabs(grads[k][i])))
          << "backward must accumulate: input " << k << " element " << i;
    }
    EXPECT_GT(largest, 1e-3) << "input " << k << ": a vanishing gradient proves nothing";
  }
}

// ---- conv ---------------------------------------------------------------------------------------

struct ConvSpec {
  int64_t batch = 1;
  std::vector<int64_t> in;  // spatial dims, 2 or 3
  int64_t ci = 1, co = 1, groups = 1;
  std::vector<int64_t> kernel, stride, dilation, pad_before, pad_after;
};

inline Window conv_window(const ConvSpec& s) {
  Window g;
  const size_t offset = 3 - s.in.size();  // 2-D problems run with depth 1
  g.batch = s.batch;
  g.in_channels = s.ci, g.out_channels = s.co, g.groups = s.groups;
  for (size_t d = 0; d < s.in.size(); ++d) {
    const size_t e = offset + d;
    g.in[e] = s.in[d], g.kernel[e] = s.kernel[d];
    g.stride[e] = s.stride.empty() ? 1 : s.stride[d];
    g.dilation[e] = s.dilation.empty() ? 1 : s.dilation[d];
    g.pad_before[e] = s.pad_before.empty() ? 0 : s.pad_before[d];
    g.pad_after[e] = s.pad_after.empty() ? 0 : s.pad_after[d];
    g.out[e] = g.expected_out(static_cast<int>(e));
  }
  return g;
}

inline size_t weights_size(const Window& g) {
  return static_cast<size_t>(g.taps() * g.in_channels / g.groups * g.out_channels);
}

// The definition, with bounds checks instead of padding: an oracle independent of the tiled kernels.
inline std::vector<float> naive_conv(const Window& g, const float* x, const float* w, const float* b) {
  const int64_t ci_g = g.in_channels / g.groups, co_g = g.out_channels / g.groups;
  std::vector<float> y(static_cast<size_t>(g.out_positions() * g.out_channels));
  for (int64_t pos = 0; pos < g.out_positions(); ++pos) {
    const int64_t o2 = pos % g.out[2], o1 = pos / g.out[2] % g.out[1], o0 = pos / (g.out[2] * g.out[1]) % g.out[0];
    const int64_t n = pos / (g.out[0] * g.out[1] * g.out[2]);
    for (int64_t co = 0; co < g.out_channels; ++co) {
      double sum = b ? b[co] : 0.0;
      const int64_t grp = co / co_g;
      for (int64_t tap = 0; tap < g.taps(); ++tap) {
        const int64_t k2 = tap % g.kernel[2], k1 = tap / g.kernel[2] % g.kernel[1],
                      k0 = tap / (g.kernel[2] * g.kernel[1]);
        const int64_t i0 = o0 * g.stride[0] - g.pad_before[0] + k0 * g.dilation[0];
        const int64_t i1 = o1 * g.stride[1] - g.pad_before[1] + k1 * g.dilation[1];
        const int64_t i2 = o2 * g.stride[2] - g.pad_before[2] + k2 * g.dilation[2];
        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
        const float* xs = x + (((n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * g.in_channels + grp * ci_g;
        for (int64_t i = 0; i < ci_g; ++i)
          sum += static_cast<double>(xs[i]) * w[(tap * ci_g + i) * g.out_channels + co];
      }
      y[static_cast<size_t>(pos * g.out_channels + co)] = static_cast<float>(sum);
    }
  }
  return y;
}

// conv(x, w) [+ b] with x, w, b the differentiable inputs.
inline OpUnderTest conv_op(const ConvSpec& spec, bool bias) {
  const Window g = conv_window(spec);
  OpUnderTest op;
  op.inputs.push_back(random_floats(static_cast<size_t>(g.in_positions() * g.in_channels), 1));
  op.inputs.push_back(random_floats(weights_size(g), 2, 0.5f));
  if (bias) op.inputs.push_back(random_floats(static_cast<size_t>(g.out_channels), 3));
  op.out_size = static_cast<size_t>(g.out_positions() * g.out_channels);
  op.forward = [g, bias](const Tensors& in, std::vector<float>& y) {
    conv_forward(pool(), scratch(), g, in[0].data(), in[1].data(), bias ? in[2].data() : nullptr, y.data());
  };
  op.backward = [g, bias](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    conv_backward_data(pool(), scratch(), g, in[1].data(), dy.data(), grads[0].data());
    conv_backward_weights(pool(), scratch(), g, in[0].data(), dy.data(), grads[1].data(),
                          bias ? grads[2].data() : nullptr);
  };
  return op;
}

}  // namespace mlph::reference::test
