// The DeepCAM ops and the adam family on onednn-cpu against the reference backend, each in a small
// graph whose activations are trainable parameters, so that data gradients are compared too.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "onednn_compare.hpp"

namespace mlph::onednn::test {
namespace {

// conv_transpose k3 s2 p1 output_padding 1 (DeepCAM's decoder), with bias, into a relu.
const MLPH_Graph* conv_transpose_graph(Small& s, const std::string& optimizer = "sgd_keras",
                                       std::vector<sdk::AttrInit> attrs = {{"momentum", 0.9}}) {
  const int32_t x = s.param("x", {2, 5, 5, 3});
  const int32_t w = s.param("w", {3, 3, 4, 3}, 0.3f), b = s.param("b", {4}, 0.1f, 0.0);
  const int32_t y = s.op("conv_transpose", {x, w, b}, {2, 10, 10, 4},
                         {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
  return s.finish(s.op("relu", {y}, {2, 10, 10, 4}), optimizer, std::move(attrs));
}

TEST(OnednnDeepcamOps, ConvTransposeMatchesTheReference) {
  Small s;
  expect_same_training(conv_transpose_graph(s), 3, 0.05, 2e-3);
}

TEST(OnednnDeepcamOps, StridedConvTransposeIn3dMatchesTheReference) {
  Small s;
  const int32_t x = s.param("x", {1, 3, 3, 3, 8});
  const int32_t w = s.param("w", {2, 2, 2, 16, 8}, 0.3f);
  s.finish(s.op("conv_transpose", {x, w}, {1, 6, 6, 6, 16}, {{"stride", {2, 2, 2}}}));
  expect_same_training(s.g.graph(), 2, 0.05, 2e-3);
}

// Xception's depthwise conv and the ASPP's dilated convs.
TEST(OnednnDeepcamOps, DepthwiseAndDilatedConvsMatchTheReference) {
  Small s;
  const int32_t x = s.param("x", {2, 9, 9, 16});
  const int32_t dw = s.param("dw", {3, 3, 1, 16}, 0.3f), pw = s.param("pw", {3, 3, 16, 8}, 0.2f);
  const int32_t a = s.op("conv", {x, dw}, {2, 9, 9, 16}, {{"groups", 16.0}, {"dilation", {2, 2}}, {"padding", {2, 2}}});
  const int32_t r = s.op("relu", {a}, {2, 9, 9, 16});
  s.finish(s.op("conv", {r, pw}, {2, 9, 9, 8}, {{"dilation", {3, 3}}, {"padding", {3, 3}}}));
  expect_same_training(s.g.graph(), 3, 0.05, 2e-3);
}

// A dilated conv whose backward oneDNN would run on its gemm path (2.6: every dilated depthwise conv)
// runs it over its phases where the sizes and paddings are multiples of the dilation: the training
// (x's gradient included: x is a parameter) is the reference's, in fp32 to its roundoff and in bf16 to
// bf16's; where they are not, the conv runs as written.
TEST(OnednnDeepcamOps, DilatedDepthwiseBackwardOverPhasesMatchesTheReference) {
  struct Case {
    std::vector<int64_t> x, y;
    std::vector<double> dilation, padding;  // padding: before per axis, then after per axis
    std::string rewrite;                    // what conv_rewrites says, "" for none
  };
  const std::vector<Case> cases{
      {{2, 8, 12, 16}, {2, 8, 12, 16}, {2, 2}, {2, 2, 2, 2}, "4 phases"},  // DeepCAM's: same padding
      {{1, 8, 9, 16}, {1, 8, 9, 16}, {2, 3}, {2, 3, 2, 3}, "6 phases"},    // a dilation per axis
      {{1, 6, 8, 16}, {1, 4, 8, 16}, {2, 2}, {2, 2, 0, 2}, "4 phases"},    // uneven padding
      {{1, 8, 8, 16}, {1, 8, 4, 16}, {1, 2}, {1, 0, 1, 0}, "2 phases"},    // one axis dilated, unpadded
      {{2, 9, 9, 16}, {2, 9, 9, 16}, {2, 2}, {2, 2, 2, 2}, ""},            // odd sizes: as written
  };
  const bool bf16 = cpu_has_bf16();
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("x {}, dilation {}, padding {}", fmt::join(c.x, "x"), fmt::join(c.dilation, ","),
                             fmt::join(c.padding, ",")));
    Small s;
    const int32_t x = s.param("x", c.x);
    const int32_t w = s.param("w", {3, 3, 1, 16}, 0.3f), b = s.param("b", {16}, 0.1f, 0.0);
    s.finish(s.op("conv", {x, w, b}, c.y, {{"groups", 16.0}, {"dilation", c.dilation}, {"padding", c.padding}}));
    const MLPH_Graph* graph = s.g.graph();
    const auto rewrites = conv_rewrites(*compile_model(core::host_api(), {2, false, 0}, *graph, nullptr));
    if (c.rewrite.empty()) {
      EXPECT_TRUE(rewrites.empty());
    } else {
      ASSERT_EQ(rewrites.size(), 1u);
      EXPECT_EQ(rewrites[0], "node 'conv1' (conv): backward over " + c.rewrite);
    }
    expect_same_training(graph, 3, 0.05, 1e-4);
    // (outputs near 0 of bf16 products: relative to a floor of 0.1)
    if (bf16) expect_same_training(graph, 3, 0.05, 3e-2, 0.1, {{"threads", "2"}, {"precision", "bf16"}});
  }
}

// Training: output, gamma/beta and data gradients, running statistics after each step (compared as
// parameters); evaluation from the running statistics (the eval output).
TEST(OnednnDeepcamOps, BatchNormTrainsAndEvaluatesLikeTheReference) {
  Small s;
  const int32_t input = s.param("x", {4, 3, 5, 16}, 2.0f), w = s.param("w", {1, 1, 16, 16});
  const int32_t x = s.op("conv", {input, w}, {4, 3, 5, 16});  // as in DeepCAM: BN in the conv's layout
  const int32_t gamma = s.param("gamma", {16}, 1.0f), beta = s.param("beta", {16}, 0.5f);
  const int32_t mean = s.param("running_mean", {16}, 0.2f, 0.0, 0), var = s.constant("running_var", std::vector<float>(16, 1.5f));
  const int32_t y = s.op("batch_norm", {x, gamma, beta, mean, var}, {4, 3, 5, 16}, {{"eps", 1e-3}, {"momentum", 0.3}});
  s.finish(s.op("leaky_relu", {y}, {4, 3, 5, 16}, {{"alpha", 0.1}}));
  expect_same_training(s.g.graph(), 3, 0.05, 2e-3);
}

// batch_norm then relu runs as one primitive (fuse_norm_relu): outputs, every gradient, the running
// statistics and evaluation as unfused. The second pair's relu output is also the eval output.
TEST(OnednnDeepcamOps, BatchNormWithFusedReluMatchesTheReference) {
  Small s;
  const int32_t input = s.param("x", {2, 3, 5, 16}, 2.0f), w = s.param("w", {1, 1, 16, 16});
  int32_t h = s.op("conv", {input, w}, {2, 3, 5, 16});
  for (int i = 0; i < 2; ++i) {
    const int32_t gamma = s.param("gamma" + std::to_string(i), {16}, 1.0f);
    const int32_t beta = s.param("beta" + std::to_string(i), {16}, 0.5f);
    const int32_t mean = s.param("mean" + std::to_string(i), {16}, 0.2f, 0.0, 0);
    const int32_t var = s.constant("var" + std::to_string(i), std::vector<float>(16, 1.5f));
    h = s.op("relu", {s.op("batch_norm", {h, gamma, beta, mean, var}, {2, 3, 5, 16}, {{"momentum", 0.3}})},
             {2, 3, 5, 16});
  }
  expect_same_training(s.finish(h), 3, 0.05, 2e-3);
}

// concat, add (x feeding two ops: gradients add up), global_avg_pool, broadcast, channel_affine.
TEST(OnednnDeepcamOps, ConcatAddPoolBroadcastAffineMatchTheReference) {
  Small s;
  const int32_t a = s.param("a", {2, 4, 6, 3}), b = s.param("b", {2, 4, 6, 5}), d = s.param("d", {2, 4, 6, 8});
  const int32_t c = s.op("concat", {a, b}, {2, 4, 6, 8});
  const int32_t e = s.op("add", {c, d}, {2, 4, 6, 8});
  const int32_t p = s.op("global_avg_pool", {e}, {2, 1, 1, 8});
  const int32_t q = s.op("broadcast", {p}, {2, 4, 6, 8}, {{"shape", {2, 4, 6, 8}}});
  const int32_t r = s.op("add", {e, q}, {2, 4, 6, 8});
  const int32_t w = s.param("w", {8}), bias = s.param("bias", {8});
  s.finish(s.op("channel_affine", {r, w, bias}, {2, 4, 6, 8}));
  expect_same_training(s.g.graph(), 3, 0.05, 2e-3);
}

// shift_scale on an input, added to trainable logits; weighted softmax cross-entropy as the loss,
// iou as the eval output.
TEST(OnednnDeepcamOps, WeightedSoftmaxCrossEntropyAndIouMatchTheReference) {
  Small s;
  sdk::GraphBuilder& g = s.g;
  const int32_t raw = g.value("raw", MLPH_DTYPE_F32, {2, 4, 5, 3}), labels = g.value("labels", MLPH_DTYPE_I32, {2, 4, 5});
  const int32_t shift = s.constant("shift", {-1.0f, 0.0f, 0.5f}), scale = s.constant("scale", {0.5f, 2.0f, 1.0f});
  const int32_t logits = s.param("logits", {2, 4, 5, 3}, 2.0f);
  const int32_t normalized = s.op("shift_scale", {raw, shift, scale}, {2, 4, 5, 3});
  const int32_t sum = s.op("add", {normalized, logits}, {2, 4, 5, 3});
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {}), iou = g.value("iou", MLPH_DTYPE_F32, {2});
  g.node("softmax_cross_entropy", "loss", {sum, labels}, {loss}, {{"class_weights", {0.5, 1.0, 3.0}}});
  g.node("iou", "iou", {sum, labels}, {iou});
  g.inputs({raw, labels});
  g.loss(loss);
  g.eval_outputs({iou});
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  const MLPH_Graph* graph = g.graph();
  expect_same_training(graph, 3, 0.5, 1e-4);

  // The loss by hand for one input: the backends agreeing is not enough.
  Compiled ours(onednn(), graph);
  Inputs in(*graph, 7);
  const auto* x = static_cast<const float*>(in.tensors[0].data);
  const auto* y = static_cast<const int32_t*>(in.tensors[1].data);
  const auto z = ours.read(2, graph->values[logits]);
  const float shifts[3] = {-1.0f, 0.0f, 0.5f}, scales[3] = {0.5f, 2.0f, 1.0f}, weights[3] = {0.5f, 1.0f, 3.0f};
  double expected = 0;
  for (size_t p = 0; p < 40; ++p) {
    double l[3], top = -1e30, sum_exp = 0;
    for (size_t c = 0; c < 3; ++c) l[c] = double((x[3 * p + c] - shifts[c]) * scales[c]) + z[3 * p + c], top = std::max(top, l[c]);
    for (double v : l) sum_exp += std::exp(v - top);
    expected += weights[y[p]] * (top + std::log(sum_exp) - l[y[p]]);
  }
  EXPECT_NEAR(ours.train(in.tensors, 0.0, 0), expected / 40, 1e-5);
}

// docs/ops.md allows int32 eval outputs (a graph input, returned as fed) beside float32 ones.
TEST(OnednnDeepcamOps, Int32EvalOutputsAreReturnedAsFed) {
  Small s;
  sdk::GraphBuilder& g = s.g;
  const int32_t labels = g.value("labels", MLPH_DTYPE_I32, {2, 4, 5});
  const int32_t logits = s.param("logits", {2, 4, 5, 3}, 2.0f);
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {}), iou = g.value("iou", MLPH_DTYPE_F32, {2});
  g.node("softmax_cross_entropy", "loss", {logits, labels}, {loss});
  g.node("iou", "iou", {logits, labels}, {iou});
  g.inputs({labels});
  g.loss(loss);
  g.eval_outputs({iou, labels});
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  const MLPH_Graph* graph = g.graph();
  Inputs in(*graph, 11);
  const auto* fed = static_cast<const int32_t*>(in.tensors[0].data);
  const MLPH_Value &iou_info = graph->values[iou], &labels_info = graph->values[labels];
  auto evaluate = [&](const MLPH_BackendApi* api, std::vector<float>& ious) {
    std::vector<int32_t> echoed(40, -1);
    Compiled(api, graph).eval_into(in.tensors, {sdk::host_tensor(MLPH_DTYPE_F32, iou_info.shape, 1, ious.data()),
                                                sdk::host_tensor(MLPH_DTYPE_I32, labels_info.shape, 3, echoed.data())});
    EXPECT_EQ(echoed, std::vector<int32_t>(fed, fed + 40));
  };
  std::vector<float> ours(2), theirs(2);
  evaluate(onednn(), ours);
  evaluate(reference(), theirs);
  EXPECT_LT(worst_relative(ours, theirs, 1e-3), 1e-6);
}

class OnednnOptimizers : public ::testing::TestWithParam<const char*> {};

// Three steps of each, decay masked off the bias (multiplier 0); lamb's clipping engaged.
TEST_P(OnednnOptimizers, ThreeStepsMatchTheReference) {
  const std::string name = GetParam();
  std::vector<sdk::AttrInit> attrs{{"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-3}, {"weight_decay", 0.1}};
  if (name == "lamb") attrs.emplace_back("max_grad_norm", 0.05);
  Small s;
  expect_same_training(conv_transpose_graph(s, name, attrs), 3, 0.02, 2e-3);
}

// A tensor large enough for the optimizers' parallel, vectorized loops and sliced norms (20,435
// elements: uneven slices and lane tails). Per element the arithmetic is the reference's; only
// the double sums' order differs, so the weights agree far closer than a missed slice would allow.
TEST_P(OnednnOptimizers, LargeTensorMatchesTheReferenceClosely) {
  const std::string name = GetParam();
  std::vector<sdk::AttrInit> attrs{{"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-3}, {"weight_decay", 0.1}};
  if (name == "lamb") attrs.emplace_back("max_grad_norm", 0.05);
  Small s;
  const int32_t x = s.param("x", {1, 61, 67, 5});
  expect_same_training(s.finish(s.op("relu", {x}, {1, 61, 67, 5}), name, attrs), 3, 0.02, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AdamFamily, OnednnOptimizers, ::testing::Values("adam", "adamw", "lamb"));

}  // namespace
}  // namespace mlph::onednn::test
