// pad_input_channels: a conv's few input channels zero-padded inside the backend (for AMX's bf16
// kernels) change nothing outside it: parameter shapes, gradients and training are the unpadded
// run's up to fp32 roundoff in the convolution's sums.
#include <gtest/gtest.h>

#include <dnnl.hpp>

#include "onednn_compare.hpp"
#include "settings.hpp"  // CosmoFlow's

namespace mlph::cosmoflow {  // workloads/cosmoflow/model.hpp
void build_model(sdk::GraphBuilder& g, const ModelSettings& model, double momentum, uint32_t batch, uint64_t seed);
}

namespace mlph::onednn::test {
namespace {

std::vector<MLPH_KeyValue> padded_to(const char* channels, const char* precision = "fp32") {
  return {{"threads", "2"}, {"precision", precision}, {"pad_input_channels", channels}};
}

// x [2,6,6,6,4] (trainable: its data gradient goes through the padded op too) -> conv k3 to 8 +
// bias -> leaky ReLU -> max-pool 2 (a pool chain over the padded conv's output) -> mse.
const MLPH_Graph* four_channel_block(Small& s) {
  const int32_t x = s.param("x", {2, 6, 6, 6, 4});
  const int32_t w = s.param("w", {3, 3, 3, 4, 8}, 0.3f), b = s.param("b", {8}, 0.1f, 0.0);
  const int32_t z = s.op("conv", {x, w, b}, {2, 6, 6, 6, 8}, {{"padding", {1, 1, 1, 1, 1, 1}}});
  const int32_t a = s.op("leaky_relu", {z}, {2, 6, 6, 6, 8}, {{"alpha", 0.3}});
  return s.finish(s.op("max_pool", {a}, {2, 3, 3, 3, 8}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}}));
}

// Three steps of `padded` against `plain`: losses, every parameter's gradient and value (x's data
// gradient included), each read in the model's own shape, within `tolerance`.
void expect_same_steps(const MLPH_Graph* graph, Compiled& plain, Compiled& padded, double tolerance) {
  for (int s = 0; s < 3; ++s) {
    Inputs in(*graph, uint64_t(7 * s));
    const double want = plain.train(in.tensors, 0.05, uint64_t(s)), got = padded.train(in.tensors, 0.05, uint64_t(s));
    EXPECT_NEAR(got, want, tolerance * std::fabs(want)) << "loss at step " << s;
    for (size_t p = 0; p < graph->n_params; ++p) {
      const MLPH_Value& v = graph->values[graph->params[p].value];
      EXPECT_LT(norm_relative(padded.read(p, v, true), plain.read(p, v, true)), tolerance) << "gradient of " << v.name;
      EXPECT_LT(norm_relative(padded.read(p, v), plain.read(p, v)), tolerance) << v.name;
    }
  }
}

TEST(OnednnPadding, PaddedConvTrainsAsTheUnpaddedOne) {
  Small s;
  const MLPH_Graph* graph = four_channel_block(s);
  for (const char* channels : {"8", "16"}) {
    SCOPED_TRACE(std::string("padded to ") + channels);
    Compiled plain(onednn(), graph, padded_to("0")), padded(onednn(), graph, padded_to(channels));
    expect_same_steps(graph, plain, padded, 1e-6);
  }
  // The padding is really on where asked, and only there.
  const BackendOptions off{2, false, 0}, on{2, false, 16};
  EXPECT_TRUE(conv_rewrites(*compile_model(core::host_api(), off, *graph, nullptr)).empty());
  EXPECT_EQ(conv_rewrites(*compile_model(core::host_api(), on, *graph, nullptr)).size(), 1u);
}

// The conv of a data input x [2,6,6,6,4] (no gradient wanted) with bias, then mse.
struct DataConv {
  std::vector<int64_t> kernel, stride, out;
  std::vector<double> padding;  // before x3, after x3
};
const MLPH_Graph* data_conv(Small& s, const DataConv& c) {
  const int32_t x = s.g.value("x", MLPH_DTYPE_F32, {2, 6, 6, 6, 4});
  s.inputs.push_back(x);
  const int32_t w = s.param("w", {c.kernel[0], c.kernel[1], c.kernel[2], 4, 8}, 0.3f), b = s.param("b", {8}, 0.1f, 0.0);
  std::vector<int64_t> y{2, c.out[0], c.out[1], c.out[2], 8};
  const std::vector<double> stride(c.stride.begin(), c.stride.end());
  return s.finish(s.op("conv", {x, w, b}, y, {{"stride", stride}, {"padding", c.padding}}));  // kernel: w's shape
}

// A data input's taps along the last axis go into the padded channels (4 x kw of 16) where the conv
// steps one by one along it, whatever its padding there; the training is the unpadded one's.
TEST(OnednnPadding, FoldedTapsTrainAsTheUnfoldedConv) {
  struct Case {
    DataConv conv;
    const char* folded;  // what conv_rewrites says after the padding
  };
  const std::vector<Case> cases{
      {{{3, 3, 3}, {1, 1, 1}, {6, 6, 6}, {1, 1, 1, 1, 1, 1}}, ", 3 taps folded"},   // same
      {{{3, 3, 3}, {1, 1, 1}, {4, 4, 4}, {0, 0, 0, 0, 0, 0}}, ", 3 taps folded"},   // valid (halo'd input)
      {{{3, 3, 3}, {1, 1, 1}, {6, 6, 7}, {1, 1, 2, 1, 1, 1}}, ", 3 taps folded"},   // uneven along w
      {{{3, 3, 2}, {2, 2, 1}, {3, 3, 6}, {1, 1, 0, 1, 1, 1}}, ", 2 taps folded"},   // strided elsewhere
      {{{3, 3, 3}, {1, 1, 2}, {6, 6, 3}, {1, 1, 1, 1, 1, 1}}, ""},                  // strided along w: padded only
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("kernel w " + std::to_string(c.conv.kernel[2]) + ", out " + std::to_string(c.conv.out[2]));
    Small s;
    const MLPH_Graph* graph = data_conv(s, c.conv);
    Compiled plain(onednn(), graph, padded_to("0")), padded(onednn(), graph, padded_to("16"));
    expect_same_steps(graph, plain, padded, 1e-6);
    const auto convs = conv_rewrites(*compile_model(core::host_api(), {2, false, 16}, *graph, nullptr));
    ASSERT_EQ(convs.size(), 1u);
    EXPECT_EQ(convs[0], "node 'conv1' (conv): input channels padded to 16" + std::string(c.folded));
  }
}

// In bf16 the inputs round alike either way; only the fp32 accumulation order may differ.
TEST(OnednnPadding, PaddedBf16ConvTrainsAsTheUnpaddedOne) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  Small s;
  const MLPH_Graph* graph = four_channel_block(s);
  Compiled plain(onednn(), graph, padded_to("0", "bf16")), padded(onednn(), graph, padded_to("16", "bf16"));
  expect_same_steps(graph, plain, padded, 1e-4);
}

// CosmoFlow's conv1 (4 channels) padded: the model trains as unpadded; conv2..5 are left alone.
TEST(OnednnPadding, CosmoflowConv1PaddedTrainsAsUnpadded) {
  sdk::GraphBuilder g;
  cosmoflow::ModelSettings m;
  m.edge = 32, m.dropout = 0.0;
  cosmoflow::build_model(g, m, 0.9, 2, 42);
  const MLPH_Graph* graph = g.graph();
  Compiled plain(onednn(), graph, padded_to("0")), padded(onednn(), graph, padded_to("16"));
  expect_same_steps(graph, plain, padded, 1e-5);
  const auto convs = conv_rewrites(*compile_model(core::host_api(), {2, false, 16}, *graph, nullptr));
  ASSERT_EQ(convs.size(), 1u);
  EXPECT_EQ(convs[0], "node 'conv1' (conv): input channels padded to 16, 3 taps folded");  // its input is data
}

TEST(OnednnPadding, BadPaddingIsNamed) {
  MLPH_Backend* backend = nullptr;
  const std::vector<MLPH_KeyValue> options{{"pad_input_channels", "65"}};
  MLPH_Error* error = onednn()->create(core::host_api(), options.data(), options.size(), &backend);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(core::error_code(error), MLPH_INVALID_ARGUMENT);
  const std::string message = core::error_message(error);
  EXPECT_NE(message.find("pad_input_channels"), std::string::npos) << message;
  core::error_free(error);
}

}  // namespace
}  // namespace mlph::onednn::test
