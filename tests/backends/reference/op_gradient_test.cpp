// Finite-difference checks of the backward pass of the CosmoFlow-era reference ops, on the kernels
// themselves (gradient_check.hpp). Also: conv forward agrees with a naive loop.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "gradient_check.hpp"

namespace mlph::reference {
namespace {
using namespace test;

// ---- conv ---------------------------------------------------------------------------------------

void expect_matches_naive(const ConvSpec& spec) {
  const Window g = conv_window(spec);
  const auto x = random_floats(static_cast<size_t>(g.in_positions() * g.in_channels), 11);
  const auto w = random_floats(weights_size(g), 12);
  const auto b = random_floats(static_cast<size_t>(g.out_channels), 13);
  std::vector<float> y(static_cast<size_t>(g.out_positions() * g.out_channels), -99.0f);
  conv_forward(pool(), scratch(), g, x.data(), w.data(), b.data(), y.data());
  const std::vector<float> expected = naive_conv(g, x.data(), w.data(), b.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-4 * (1 + std::fabs(expected[i]))) << i;
}

TEST(ReferenceOpGradients, Conv3dPaddedWithBias) {
  expect_gradients_match(conv_op({2, {5, 4, 6}, 3, 4, 1, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}}, true));
}

TEST(ReferenceOpGradients, Conv3dStrideDilationAsymmetricPadding) {
  expect_gradients_match(conv_op({1, {7, 6, 5}, 2, 5, 1, {2, 3, 2}, {2, 1, 2}, {1, 2, 1}, {0, 1, 1}, {1, 1, 0}}, true));
}

TEST(ReferenceOpGradients, Conv3dEvenKernelKerasSame) {
  expect_gradients_match(conv_op({1, {4, 4, 4}, 2, 3, 1, {2, 2, 2}, {}, {}, {0, 0, 0}, {1, 1, 1}}, false));
}

TEST(ReferenceOpGradients, Conv2dStrideDilationGroups) {
  expect_gradients_match(conv_op({2, {9, 8}, 4, 6, 2, {3, 3}, {3, 2}, {2, 2}, {1, 1}, {1, 1}}, false));
}

TEST(ReferenceOpGradients, Conv2dPaddingLargerThanKernel) {
  expect_gradients_match(conv_op({1, {3, 4}, 2, 3, 1, {2, 2}, {2, 1}, {}, {3, 0}, {1, 2}}, true));
}

// 27 input and 123 output channels in 3 groups: 9 and 41 per group exercise every register tile
// (8 + 1 inputs, 32 + 8 + 1 outputs), and 11 outputs per row a full tile of 8 plus single ones.
TEST(ReferenceOpGradients, Conv2dWideGroupsEveryTileSize) {
  expect_gradients_match(conv_op({1, {5, 11}, 27, 123, 3, {3, 3}, {}, {}, {1, 1}, {1, 1}}, true), 1e-2f, 2e-3, 120);
}

TEST(ReferenceConv, ForwardMatchesNaiveLoops) {
  expect_matches_naive({2, {5, 11}, 27, 123, 3, {3, 3}, {}, {}, {1, 1}, {1, 1}});
  expect_matches_naive({1, {7, 6, 5}, 2, 5, 1, {2, 3, 2}, {2, 1, 2}, {1, 2, 1}, {0, 1, 1}, {1, 1, 0}});
  expect_matches_naive({2, {6, 6, 6}, 4, 40, 1, {3, 3, 3}, {}, {}, {1, 1, 1}, {1, 1, 1}});
  expect_matches_naive({1, {9, 8}, 4, 6, 2, {3, 3}, {3, 2}, {2, 2}, {1, 1}, {1, 1}});
}

// ---- max_pool -----------------------------------------------------------------------------------

// Distinct values 0.01 apart in shuffled order: no tie, and a perturbation of 2e-3 never changes a winner.
std::vector<float> distinct_values(size_t n, uint64_t stream) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = n - 1; i > 0; --i)
    std::swap(order[i], order[static_cast<size_t>(mlph_uniform(7, stream, 0, i) * static_cast<float>(i + 1))]);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * (static_cast<float>(order[i]) - static_cast<float>(n) / 2);
  return v;
}

OpUnderTest pool_op(const ConvSpec& spec) {
  Window g = conv_window(spec);
  g.out_channels = g.in_channels;
  OpUnderTest op;
  op.inputs.push_back(distinct_values(static_cast<size_t>(g.in_positions() * g.in_channels), 5));
  op.out_size = static_cast<size_t>(g.out_positions() * g.in_channels);
  op.forward = [g](const Tensors& in, std::vector<float>& y) { max_pool_forward(pool(), g, in[0].data(), y.data()); };
  op.backward = [g](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    max_pool_backward(pool(), g, in[0].data(), dy.data(), grads[0].data());
  };
  return op;
}

TEST(ReferenceOpGradients, MaxPool3d) {
  expect_gradients_match(pool_op({2, {4, 6, 5}, 3, 3, 1, {2, 2, 2}, {2, 2, 2}, {}, {}, {}}), 2e-3f, 2e-3, 1000);
}

TEST(ReferenceOpGradients, MaxPool2dOverlappingWindows) {
  expect_gradients_match(pool_op({2, {7, 6}, 10, 10, 1, {3, 2}, {2, 1}, {}, {}, {}}), 2e-3f, 2e-3, 1000);
}

// Ties: the first maximum in row-major window order takes the whole gradient.
TEST(ReferenceMaxPool, TieGoesToFirstMaximumAndNanPropagates) {
  Window g = conv_window({1, {2, 2}, 1, 1, 1, {2, 2}, {2, 2}, {}, {}, {}});
  const std::vector<float> x{1.0f, 3.0f, 3.0f, 3.0f};
  std::vector<float> y(1), dx(4, 0.0f);
  max_pool_forward(pool(), g, x.data(), y.data());
  max_pool_backward(pool(), g, x.data(), std::vector<float>{5.0f}.data(), dx.data());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 5.0f, 0.0f, 0.0f}));
  const std::vector<float> with_nan{1.0f, NAN, 3.0f, 2.0f};
  max_pool_forward(pool(), g, with_nan.data(), y.data());
  EXPECT_TRUE(std::isnan(y[0]));
}

// ---- dense ----------------------------------------------------------------------------------------

OpUnderTest dense_op(DenseShape s, bool bias) {
  OpUnderTest op;
  op.inputs.push_back(random_floats(static_cast<size_t>(s.batch * s.in), 1));
  op.inputs.push_back(random_floats(static_cast<size_t>(s.in * s.out), 2, 0.5f));
  if (bias) op.inputs.push_back(random_floats(static_cast<size_t>(s.out), 3));
  op.out_size = static_cast<size_t>(s.batch * s.out);
  op.forward = [s, bias](const Tensors& in, std::vector<float>& y) {
    dense_forward(pool(), scratch(), s, in[0].data(), in[1].data(), bias ? in[2].data() : nullptr, y.data());
  };
  op.backward = [s, bias](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    dense_backward(pool(), s, in[0].data(), in[1].data(), dy.data(), grads[0].data(), grads[1].data(),
                   bias ? grads[2].data() : nullptr);
  };
  return op;
}

TEST(ReferenceOpGradients, Dense) { expect_gradients_match(dense_op({3, 70, 37}, true)); }
TEST(ReferenceOpGradients, DenseWithoutBiasBatchOne) { expect_gradients_match(dense_op({1, 20, 5}, false)); }

// ---- element-wise -------------------------------------------------------------------------------

// Values at least 0.1 away from 0, so a perturbation never crosses a kink.
std::vector<float> away_from_zero(size_t n, uint64_t stream) {
  std::vector<float> v = random_floats(n, stream);
  for (float& x : v) x = std::copysign(0.1f + std::fabs(x), x);
  return v;
}

OpUnderTest unary_op(
    size_t n, std::function<void(int64_t, const float*, float*)> forward,
    std::function<void(int64_t, const float* x, const float* y, const float* dy, float* dx)> backward) {
  OpUnderTest op;
  op.inputs.push_back(away_from_zero(n, 9));
  op.out_size = n;
  op.forward = [forward](const Tensors& in, std::vector<float>& y) {
    forward(static_cast<int64_t>(y.size()), in[0].data(), y.data());
  };
  op.backward = [forward, backward](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    std::vector<float> y(dy.size());
    forward(static_cast<int64_t>(y.size()), in[0].data(), y.data());
    backward(static_cast<int64_t>(y.size()), in[0].data(), y.data(), dy.data(), grads[0].data());
  };
  return op;
}

TEST(ReferenceOpGradients, LeakyRelu) {
  expect_gradients_match(unary_op(
      200, [](int64_t n, const float* x, float* y) { leaky_relu_forward(pool(), n, 0.3f, x, y); },
      [](int64_t n, const float* x, const float*, const float* dy, float* dx) {
        leaky_relu_backward(pool(), n, 0.3f, x, dy, dx);
      }));
}

TEST(ReferenceOpGradients, Relu) {
  expect_gradients_match(unary_op(
      200, [](int64_t n, const float* x, float* y) { relu_forward(pool(), n, x, y); },
      [](int64_t n, const float* x, const float*, const float* dy, float* dx) {
        relu_backward(pool(), n, x, dy, dx);
      }));
}

TEST(ReferenceOpGradients, Tanh) {
  expect_gradients_match(unary_op(
                             200, [](int64_t n, const float* x, float* y) { tanh_forward(pool(), n, x, y); },
                             [](int64_t n, const float*, const float* y, const float* dy, float* dx) {
                               tanh_backward(pool(), n, y, dy, dx);
                             }),
                         1e-3f);
}

TEST(ReferenceOpGradients, Scale) {
  expect_gradients_match(unary_op(
      200, [](int64_t n, const float* x, float* y) { scale_forward(pool(), n, 1.2f, x, y); },
      [](int64_t n, const float*, const float*, const float* dy, float* dx) {
        scale_backward(pool(), n, 1.2f, dy, dx);
      }));
}

TEST(ReferenceOpGradients, ReshapeCopy) {
  expect_gradients_match(unary_op(
      70000,  // above the element-wise ops' parallel threshold
      [](int64_t n, const float* x, float* y) { copy_forward(pool(), n, x, y); },
      [](int64_t n, const float*, const float*, const float* dy, float* dx) { copy_backward(pool(), n, dy, dx); }));
}

TEST(ReferenceOpGradients, DropoutWithFixedMask) {
  std::vector<float> mask(300);
  dropout_mask(pool(), 300, 0.4, 5, 2, 7, mask.data());
  const auto kept = std::count(mask.begin(), mask.end(), 1.0f / 0.6f);
  EXPECT_EQ(kept + std::count(mask.begin(), mask.end(), 0.0f), 300);
  EXPECT_GT(kept, 140);  // ~180 expected
  EXPECT_LT(kept, 220);
  expect_gradients_match(unary_op(
      300, [&](int64_t n, const float* x, float* y) { mask_forward(pool(), n, mask.data(), x, y); },
      [&](int64_t n, const float*, const float*, const float* dy, float* dx) {
        mask_backward(pool(), n, mask.data(), dy, dx);
      }));
}

// ---- losses ----------------------------------------------------------------------------------------

TEST(ReferenceOpGradients, MsePredictionAndTarget) {
  OpUnderTest op;
  op.inputs = {random_floats(30, 1), random_floats(30, 2)};
  op.out_size = 1;
  op.forward = [](const Tensors& in, std::vector<float>& y) {
    y[0] = static_cast<float>(mse_forward(pool(), 30, in[0].data(), in[1].data()));
  };
  op.backward = [](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    mse_backward(pool(), 30, in[0].data(), in[1].data(), dy[0], grads[0].data(), grads[1].data());
  };
  expect_gradients_match(op, 1e-2f);
}

TEST(ReferenceOpGradients, L2Penalty) {
  OpUnderTest op;
  op.inputs = {random_floats(40, 3)};
  op.out_size = 1;
  op.forward = [](const Tensors& in, std::vector<float>& y) {
    y[0] = static_cast<float>(l2_penalty(pool(), 40, 0.7, in[0].data()));
  };
  op.backward = [](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    std::vector<float> dw(40, 0.0f);  // l2_backward takes no upstream gradient: the penalty joins the loss directly
    l2_backward(pool(), 40, 0.7, in[0].data(), dw.data());
    for (size_t i = 0; i < dw.size(); ++i) grads[0][i] += dy[0] * dw[i];
  };
  expect_gradients_match(op, 1e-2f);
}

TEST(ReferenceLosses, ExactValues) {
  const std::vector<float> p{1.0f, -2.0f, 0.5f}, t{0.0f, 1.0f, 0.5f};
  EXPECT_DOUBLE_EQ(mse_forward(pool(), 3, p.data(), t.data()), (1.0 + 9.0 + 0.0) / 3);
  EXPECT_DOUBLE_EQ(abs_error_sum(pool(), 3, p.data(), t.data()), 4.0);
  EXPECT_DOUBLE_EQ(l2_penalty(pool(), 3, 0.5, p.data()), 0.5 * (1.0 + 4.0 + 0.25));
  EXPECT_TRUE(std::isnan(mse_forward(pool(), 1, std::vector<float>{NAN}.data(), t.data())));
}

}  // namespace
}  // namespace mlph::reference
