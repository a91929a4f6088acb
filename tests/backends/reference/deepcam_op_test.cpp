// The DeepCAM ops of the reference backend on the kernels themselves: finite-difference gradients of each
// (gradient_check.hpp), forward passes against naive loops or exact values, IoU edge cases, and the Adam
// updates against numbers computed with numpy from docs/ops.md's formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.hpp"

namespace mlph::reference {
namespace {
using namespace test;

// ---- depthwise conv (the dedicated path: groups == in == out channels) ---------------------------------

TEST(ReferenceOpGradients, DepthwiseConvDilated) {
  // DeepCAM's separable conv: k3, padding = dilation = 2, 9 channels (a full vector width plus a remainder).
  expect_gradients_match(conv_op({2, {7, 9}, 9, 9, 9, {3, 3}, {}, {2, 2}, {2, 2}, {2, 2}}, true));
}

TEST(ReferenceOpGradients, DepthwiseConvStrided) {
  expect_gradients_match(conv_op({1, {8, 7}, 5, 5, 5, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}}, false));
}

TEST(ReferenceConv, DepthwiseForwardMatchesNaiveLoops) {
  for (const ConvSpec& spec : {ConvSpec{2, {6, 9}, 40, 40, 40, {3, 3}, {}, {2, 2}, {2, 2}, {2, 2}},
                               ConvSpec{1, {8, 7}, 5, 5, 5, {3, 3}, {2, 2}, {}, {1, 1}, {1, 1}}}) {
    const Window g = conv_window(spec);
    const auto x = random_floats(static_cast<size_t>(g.in_positions() * g.in_channels), 11);
    const auto w = random_floats(weights_size(g), 12);
    const auto b = random_floats(static_cast<size_t>(g.out_channels), 13);
    std::vector<float> y(static_cast<size_t>(g.out_positions() * g.out_channels), -99.0f);
    conv_forward(pool(), scratch(), g, x.data(), w.data(), b.data(), y.data());
    const std::vector<float> expected = naive_conv(g, x.data(), w.data(), b.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-4 * (1 + std::fabs(expected[i]))) << i;
  }
}

// ---- conv_transpose ----------------------------------------------------------------------------------

// A 2-D transposed conv: x [N, S.., Ci], kernel, stride, dilation, padding before/after, output_padding, Co.
struct TransposeSpec {
  int64_t batch, in[2], ci, co, kernel[2], stride[2], dilation[2], pad_before[2], pad_after[2], output_padding[2];
};

// The window of the conv it is the adjoint of, as sdk::program::lower_graph builds it.
Window transpose_window(const TransposeSpec& s) {
  Window g;
  g.batch = s.batch, g.in_channels = s.co, g.out_channels = s.ci;
  for (int d = 0; d < 2; ++d) {
    g.kernel[d + 1] = s.kernel[d], g.stride[d + 1] = s.stride[d], g.dilation[d + 1] = s.dilation[d];
    g.pad_before[d + 1] = s.pad_before[d], g.pad_after[d + 1] = s.pad_after[d] - s.output_padding[d];
    g.out[d + 1] = s.in[d];
    g.in[d + 1] = (s.in[d] - 1) * s.stride[d] - s.pad_before[d] - s.pad_after[d] + s.dilation[d] * (s.kernel[d] - 1) +
                  s.output_padding[d] + 1;
  }
  return g;
}

// docs/ops.md's definition: y[n,o,co] = b[co] + sum over i,k,ci with o = i*s - p_before + k*d of x[n,i,ci]*w[k,co,ci].
std::vector<float> naive_conv_transpose(const Window& g, const float* x, const float* w, const float* b) {
  const int64_t ci = g.out_channels, co = g.in_channels;
  std::vector<double> y(static_cast<size_t>(g.in_positions() * co));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.in[1] * g.in[2]; ++o)
      for (int64_t c = 0; c < co; ++c) y[static_cast<size_t>((n * g.in[1] * g.in[2] + o) * co + c)] = b ? b[c] : 0.0;
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t i0 = 0; i0 < g.out[1]; ++i0)
      for (int64_t i1 = 0; i1 < g.out[2]; ++i1)
        for (int64_t k0 = 0; k0 < g.kernel[1]; ++k0)
          for (int64_t k1 = 0; k1 < g.kernel[2]; ++k1) {
            const int64_t o0 = i0 * g.stride[1] - g.pad_before[1] + k0 * g.dilation[1];
            const int64_t o1 = i1 * g.stride[2] - g.pad_before[2] + k1 * g.dilation[2];
            if (o0 < 0 || o0 >= g.in[1] || o1 < 0 || o1 >= g.in[2]) continue;
            for (int64_t c = 0; c < co; ++c)
              for (int64_t k = 0; k < ci; ++k)
                y[static_cast<size_t>(((n * g.in[1] + o0) * g.in[2] + o1) * co + c)] +=
                    static_cast<double>(x[((n * g.out[1] + i0) * g.out[2] + i1) * ci + k]) *
                    w[((k0 * g.kernel[2] + k1) * co + c) * ci + k];
          }
  return {y.begin(), y.end()};
}

OpUnderTest conv_transpose_op(const TransposeSpec& spec, bool bias) {
  const Window g = transpose_window(spec);
  OpUnderTest op;
  op.inputs.push_back(random_floats(static_cast<size_t>(g.out_positions() * spec.ci), 1));
  op.inputs.push_back(random_floats(static_cast<size_t>(g.taps() * spec.co * spec.ci), 2, 0.5f));
  if (bias) op.inputs.push_back(random_floats(static_cast<size_t>(spec.co), 3));
  op.out_size = static_cast<size_t>(g.in_positions() * spec.co);
  op.forward = [g, bias](const Tensors& in, std::vector<float>& y) {
    conv_transpose_forward(pool(), scratch(), g, in[0].data(), in[1].data(), bias ? in[2].data() : nullptr, y.data());
  };
  op.backward = [g, bias](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    conv_transpose_backward(pool(), scratch(), g, in[0].data(), in[1].data(), dy.data(), grads[0].data(),
                            grads[1].data(), bias ? grads[2].data() : nullptr);
  };
  return op;
}

// DeepCAM's upsampler: k3, stride 2, padding 1, output_padding 1 (output 2x the input).
const TransposeSpec kDeepCamUpsample{2, {4, 5}, 6, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
// Asymmetric everything: even kernel, stride 3 by 1, dilation, output padding 2 (> the padding after).
const TransposeSpec kOdd{1, {3, 4}, 3, 4, {2, 3}, {3, 1}, {1, 2}, {0, 2}, {1, 0}, {2, 0}};

TEST(ReferenceOpGradients, ConvTransposeDeepCamUpsample) {
  expect_gradients_match(conv_transpose_op(kDeepCamUpsample, true));
}
TEST(ReferenceOpGradients, ConvTransposeOddGeometry) { expect_gradients_match(conv_transpose_op(kOdd, false)); }

TEST(ReferenceConvTranspose, ForwardMatchesTheDefinition) {
  for (const TransposeSpec& spec : {kDeepCamUpsample, kOdd}) {
    const Window g = transpose_window(spec);
    const auto x = random_floats(static_cast<size_t>(g.out_positions() * spec.ci), 21);
    const auto w = random_floats(static_cast<size_t>(g.taps() * spec.co * spec.ci), 22);
    const auto b = random_floats(static_cast<size_t>(spec.co), 23);
    std::vector<float> y(static_cast<size_t>(g.in_positions() * spec.co), -99.0f);
    conv_transpose_forward(pool(), scratch(), g, x.data(), w.data(), b.data(), y.data());
    const std::vector<float> expected = naive_conv_transpose(g, x.data(), w.data(), b.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-4 * (1 + std::fabs(expected[i]))) << i;
  }
  // With room for the columns of 2 taps only, the upsampler runs in 5 passes: the same result.
  const Window g = transpose_window(kDeepCamUpsample);
  const auto x = random_floats(static_cast<size_t>(g.out_positions() * 6), 24);
  const auto w = random_floats(static_cast<size_t>(9 * 5 * 6), 25);
  std::vector<float> one_pass(static_cast<size_t>(g.in_positions() * 5)), passes(one_pass.size());
  conv_transpose_forward(pool(), scratch(), g, x.data(), w.data(), nullptr, one_pass.data());
  Scratch small;
  small.max_columns = 2 * g.out_positions() * 5;
  conv_transpose_forward(pool(), small, g, x.data(), w.data(), nullptr, passes.data());
  for (size_t i = 0; i < passes.size(); ++i) ASSERT_NEAR(passes[i], one_pass[i], 1e-5) << i;
  EXPECT_EQ(transpose_window(kDeepCamUpsample).in[1], 8);  // H_out = 2H
  EXPECT_EQ(transpose_window(kDeepCamUpsample).in[2], 10);
}

// ---- batch_norm --------------------------------------------------------------------------------------

TEST(ReferenceOpGradients, BatchNormTraining) {
  const RowsByChannels s{2 * 5 * 4, 6};
  OpUnderTest op;
  op.inputs = {random_floats(static_cast<size_t>(s.size()), 1, 2.0f), random_floats(6, 2), random_floats(6, 3)};
  for (float& v : op.inputs[0]) v += 0.5f;  // a mean away from 0
  op.out_size = static_cast<size_t>(s.size());
  auto forward = [s](const Tensors& in, std::vector<float>& y, std::vector<float>& saved) {
    std::vector<float> running_mean(6, 0.0f), running_var(6, 1.0f);
    saved.resize(12);
    batch_norm_train_forward(pool(), s, {}, in[0].data(), in[1].data(), in[2].data(), running_mean.data(),
                             running_var.data(), saved.data(), y.data());
  };
  op.forward = [forward](const Tensors& in, std::vector<float>& y) {
    std::vector<float> saved;
    forward(in, y, saved);
  };
  op.backward = [forward, s](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    std::vector<float> y(dy.size()), saved;
    forward(in, y, saved);
    batch_norm_backward(pool(), s, in[0].data(), in[1].data(), saved.data(), dy.data(), grads[0].data(),
                        grads[1].data(), grads[2].data());
  };
  expect_gradients_match(op, 1e-2f, 3e-3);
}

// One channel, M = 4 values {1, 2, 3, 6}: mean 3, biased var 3.5, unbiased 14/3.
TEST(ReferenceBatchNorm, TrainingStatisticsAndEvaluation) {
  const RowsByChannels s{4, 1};
  const std::vector<float> x{1, 2, 3, 6}, gamma{2}, beta{0.5f};
  std::vector<float> mean{1.0f}, var{2.0f}, saved(2), y(4);
  batch_norm_train_forward(pool(), s, {1e-5, 0.1}, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                           saved.data(), y.data());
  EXPECT_NEAR(mean[0], 0.9 * 1 + 0.1 * 3, 1e-6);
  EXPECT_NEAR(var[0], 0.9 * 2 + 0.1 * 14.0 / 3, 1e-6);  // unbiased, as PyTorch
  const double inverse_std = 1 / std::sqrt(3.5 + 1e-5);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2 * (x[i] - 3) * inverse_std + 0.5, 1e-6) << i;
  batch_norm_eval_forward(pool(), s, {1e-5, 0.1}, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                          y.data());
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2 * (x[i] - mean[0]) / std::sqrt(var[0] + 1e-5) + 0.5, 1e-6) << i;
}

// ---- per-channel and layout ops ------------------------------------------------------------------------

TEST(ReferenceOpGradients, Add) {
  OpUnderTest op;
  op.inputs = {random_floats(50, 1), random_floats(50, 2)};
  op.out_size = 50;
  op.forward = [](const Tensors& in, std::vector<float>& y) {
    add_forward(pool(), 50, in[0].data(), in[1].data(), y.data());
  };
  op.backward = [](const Tensors&, const std::vector<float>& dy, Tensors& grads) {
    for (auto& g : grads) copy_backward(pool(), 50, dy.data(), g.data());  // as the executor routes it
  };
  expect_gradients_match(op);
}

TEST(ReferenceOpGradients, ConcatThreeInputs) {
  const std::vector<int64_t> widths{3, 1, 5};
  const int64_t rows = 7;
  OpUnderTest op;
  for (size_t k = 0; k < widths.size(); ++k)
    op.inputs.push_back(random_floats(static_cast<size_t>(rows * widths[k]), k));
  op.out_size = static_cast<size_t>(rows * 9);
  op.forward = [=](const Tensors& in, std::vector<float>& y) {
    concat_forward(pool(), rows, {in[0].data(), in[1].data(), in[2].data()}, widths, y.data());
  };
  op.backward = [=](const Tensors&, const std::vector<float>& dy, Tensors& grads) {
    concat_backward(pool(), rows, {grads[0].data(), grads[1].data(), grads[2].data()}, widths, dy.data());
  };
  expect_gradients_match(op);
  // Exact layout: row r of y is [a_r, b_r, c_r].
  std::vector<float> y(op.out_size);
  op.forward(op.inputs, y);
  EXPECT_EQ(y[9 * 2 + 3], op.inputs[1][2]);
  EXPECT_EQ(y[9 * 6 + 8], op.inputs[2][6 * 5 + 4]);
}

TEST(ReferenceOpGradients, GlobalAvgPool) {
  OpUnderTest op;  // [2, 3x4 positions, 70 channels]: two channel blocks
  op.inputs = {random_floats(2 * 12 * 70, 1)};
  op.out_size = 2 * 70;
  op.forward = [](const Tensors& in, std::vector<float>& y) {
    global_avg_pool_forward(pool(), 2, 12, 70, in[0].data(), y.data());
  };
  op.backward = [](const Tensors&, const std::vector<float>& dy, Tensors& grads) {
    global_avg_pool_backward(pool(), 2, 12, 70, dy.data(), grads[0].data());
  };
  expect_gradients_match(op, 1e-2f, 2e-3, 2000);
}

TEST(ReferenceOpGradients, BroadcastOneAndBothSpatialDims) {
  for (const std::vector<int64_t>& in : {std::vector<int64_t>{2, 1, 1, 3}, std::vector<int64_t>{2, 1, 5, 3}}) {
    const std::vector<int64_t> out{2, 4, 5, 3};
    OpUnderTest op;
    op.inputs = {random_floats(static_cast<size_t>(in[0] * in[1] * in[2] * in[3]), 1)};
    op.out_size = 2 * 4 * 5 * 3;
    op.forward = [=](const Tensors& x, std::vector<float>& y) {
      broadcast_forward(pool(), in, out, x[0].data(), y.data());
    };
    op.backward = [=](const Tensors&, const std::vector<float>& dy, Tensors& grads) {
      broadcast_backward(pool(), in, out, dy.data(), grads[0].data());
    };
    expect_gradients_match(op);
    std::vector<float> y(op.out_size);
    op.forward(op.inputs, y);
    // y[n=1, h=3, w=2, c=1] repeats x[1, 0, in[2] == 1 ? 0 : 2, 1].
    EXPECT_EQ(y[((1 * 4 + 3) * 5 + 2) * 3 + 1], op.inputs[0][((1 * in[1]) * in[2] + (in[2] == 1 ? 0 : 2)) * 3 + 1]);
  }
}

TEST(ReferenceOpGradients, ChannelAffine) {
  const RowsByChannels s{9, 4};
  OpUnderTest op;
  op.inputs = {random_floats(36, 1), random_floats(4, 2), random_floats(4, 3)};
  op.out_size = 36;
  op.forward = [s](const Tensors& in, std::vector<float>& y) {
    channel_affine_forward(pool(), s, in[0].data(), in[1].data(), in[2].data(), y.data());
  };
  op.backward = [s](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    channel_affine_backward(pool(), s, in[0].data(), in[1].data(), dy.data(), grads[0].data(), grads[1].data(),
                            grads[2].data());
  };
  expect_gradients_match(op);
}

TEST(ReferenceShiftScale, MinMaxNormalization) {
  const std::vector<float> x{5, -1, 7, 3}, shift{1, -3}, scale{0.25f, 0.5f};
  std::vector<float> y(4);
  shift_scale_forward(pool(), {2, 2}, x.data(), shift.data(), scale.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{1.0f, 1.0f, 1.5f, 3.0f}));
}

// ---- softmax_cross_entropy and iou ---------------------------------------------------------------------

const std::vector<float> kDeepCamWeights{1.00172996521f, 2.61461114883f, 1.71641969681f};

TEST(ReferenceOpGradients, SoftmaxCrossEntropyWithClassWeights) {
  const RowsByChannels s{20, 3};
  std::vector<int32_t> labels(20);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i * 7 % 3);
  OpUnderTest op;
  op.inputs = {random_floats(60, 1, 3.0f)};
  op.out_size = 1;
  op.forward = [=](const Tensors& in, std::vector<float>& y) {
    y[0] = static_cast<float>(
        softmax_cross_entropy_forward(pool(), s, in[0].data(), labels.data(), kDeepCamWeights.data()));
  };
  op.backward = [=](const Tensors& in, const std::vector<float>& dy, Tensors& grads) {
    softmax_cross_entropy_backward(pool(), s, in[0].data(), labels.data(), kDeepCamWeights.data(), dy[0],
                                   grads[0].data());
  };
  expect_gradients_match(op, 1e-2f, 2e-3);
}

// Two pixels: logits (0, ln 3, 0) with label 1 and (ln 2, 0, 0) with label 2.
//   pixel 1: logsumexp = ln 5, loss ln 5 - ln 3, weight w1;  pixel 2: logsumexp = ln 4, loss ln 4, weight w2.
TEST(ReferenceSoftmaxCrossEntropy, PlainMeanOfWeightedLosses) {
  const std::vector<float> logits{0, std::log(3.0f), 0, std::log(2.0f), 0, 0};
  const std::vector<int32_t> labels{1, 2};
  const double expected =
      (kDeepCamWeights[1] * (std::log(5.0) - std::log(3.0)) + kDeepCamWeights[2] * std::log(4.0)) / 2;
  EXPECT_NEAR(softmax_cross_entropy_forward(pool(), {2, 3}, logits.data(), labels.data(), kDeepCamWeights.data()),
              expected, 1e-6);  // not PyTorch's weight-normalized mean, which divides by w1 + w2
}

// 2 samples of 4 pixels, 3 classes.
TEST(ReferenceIou, AbsentClassCountsAsOneAndTiesGoToTheLowestClass) {
  // Sample 0: predictions 0, 0 (a tie of 0 and 1 goes to 0), 1, 1; labels 0, 1, 1, 1. Class 2 is absent from both.
  //   class 0: tp 1, fp 1, fn 0 -> 1/2; class 1: tp 2, fp 0, fn 1 -> 2/3; class 2: 1.  IoU = (1/2 + 2/3 + 1)/3.
  // Sample 1: everything is predicted 2 (a three-way tie goes to 0 in pixel 0: predicted 0), labels 2, 2, 2, 2.
  //   class 0: tp 0, fp 1 -> 0; class 1: absent -> 1; class 2: tp 3, fn 1 -> 3/4.  IoU = (0 + 1 + 3/4)/3.
  const std::vector<float> logits{
      5, 1, 0, 2, 2, 0, 0, 3, 1, 0, 4, 1,  // sample 0
      1, 1, 1, 0, 0, 1, 0, 0, 2, 0, 0, 3,  // sample 1
  };
  const std::vector<int32_t> labels{0, 1, 1, 1, 2, 2, 2, 2};
  std::vector<float> iou(2);
  iou_forward(pool(), {8, 3}, 2, logits.data(), labels.data(), iou.data());
  EXPECT_NEAR(iou[0], (0.5 + 2.0 / 3 + 1.0) / 3, 1e-6);
  EXPECT_NEAR(iou[1], (0.0 + 1.0 + 0.75) / 3, 1e-6);
  // A perfect prediction of a sample with one class: (1 + 1 + 1)/3 = 1, the absent classes counting 1.
  const std::vector<float> one_class{0, 1, 0, 0, 1, 0};
  const std::vector<int32_t> ones{1, 1};
  iou_forward(pool(), {2, 3}, 1, one_class.data(), ones.data(), iou.data());
  EXPECT_FLOAT_EQ(iou[0], 1.0f);
}

// ---- Adam and AdamW --------------------------------------------------------------------------------------

// w0 = (0.5, -1, 2); gradients (0.1, -0.2, 0.3), (0.05, 0.4, -0.1), (-0.3, 0.1, 0.2) at lr 0.1, 0.05, 0.02;
// beta1 0.9, beta2 0.999, eps 1e-6, decay 0.1. Expected values from numpy (float64) with docs/ops.md's formulas.
void expect_adam_steps(bool decoupled, const float (&expected)[3][3]) {
  std::vector<float> w{0.5f, -1.0f, 2.0f}, m(3, 0.0f), v(3, 0.0f);
  const float grads[3][3] = {{0.1f, -0.2f, 0.3f}, {0.05f, 0.4f, -0.1f}, {-0.3f, 0.1f, 0.2f}};
  const double lrs[3] = {0.1, 0.05, 0.02};
  const AdamAttrs attrs{0.9, 0.999, 1e-6, 0.1, 1.0};
  for (uint64_t step = 0; step < 3; ++step) {
    adam_update(pool(), 3, lrs[step], attrs, step + 1, 0.1, decoupled, grads[step], m.data(), v.data(), w.data());
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(w[i], expected[step][i], 2e-6) << "step " << step + 1 << " [" << i << "]";
  }
}

TEST(ReferenceAdam, CoupledL2ThreeSteps) {
  const float expected[3][3] = {{0.400000667f, -0.900000333f, 1.9000002f},
                                {0.35212654f, -0.903451078f, 1.86043332f},
                                {0.35463481f, -0.904803866f, 1.84296119f}};
  expect_adam_steps(false, expected);
}

TEST(ReferenceAdam, DecoupledAdamWThreeSteps) {
  const float expected[3][3] = {{0.395001f, -0.8900005f, 1.88000033f},
                                {0.346417603f, -0.903855616f, 1.85058949f},
                                {0.3526692f, -0.910360897f, 1.83482664f}};
  expect_adam_steps(true, expected);
}

}  // namespace
}  // namespace mlph::reference
