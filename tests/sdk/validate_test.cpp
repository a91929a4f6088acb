// The SDK's graph validator (mlph/sdk/graph/validate.hpp): the one line each rule gives (the bad graphs the
// conformance suite runs on every backend), the defaults and windows it fills in, op-sets, what a
// backend does not implement, and the real CosmoFlow and DeepCAM graphs.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "mlph/sdk/graph/validate.hpp"
#include "tools/conformance/bad_graphs.hpp"
#include "workloads/cosmoflow/model.hpp"
#ifdef MLPH_TEST_DEEPCAM
#include "workloads/deepcam/model.hpp"
#endif

using namespace mlph;

namespace {

struct Expected {
  MLPH_Code code;
  std::string message;
};

// What validate_graph throws for `graph` (MLPH_OK and "" when it accepts it).
Expected error_of(const MLPH_Graph& graph, const sdk::Implements& backend = sdk::Implements::everything()) {
  try {
    sdk::validate_graph(graph, backend);
    return {MLPH_OK, ""};
  } catch (const sdk::Error& e) {
    return {e.code(), e.what()};
  }
}

const sdk::ValidNode& node_named(const sdk::ValidGraph& g, const std::string& name) {
  for (const sdk::ValidNode& n : g.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

using Ints = std::vector<int64_t>;
using Numbers = std::vector<double>;

}  // namespace

// The line every backend gives for each rule: the same whoever calls the validator (no backend named).
TEST(Validator, EveryRuleHasItsOneLine) {
  const std::map<std::string, Expected> expected = {
      {"graph struct size", {MLPH_INVALID_ARGUMENT, "graph: MLPH_Graph is too small (an older ABI?)"}},
      {"op-set 0", {MLPH_INVALID_ARGUMENT, "graph: op-set 0 does not exist (set MLPH_Graph.opset to MLPH_OPSET, as sdk::GraphBuilder does)"}},
      {"op-set newer than the SDK", {MLPH_UNIMPLEMENTED, "graph: op-set 3 is newer than this backend's SDK (op-set 2); rebuild the backend against a newer SDK"}},
      {"null array", {MLPH_INVALID_ARGUMENT, "graph: params is null but holds 1 entry"}},
      {"value shape", {MLPH_INVALID_ARGUMENT, "graph: value 'empty' has an invalid shape (ndim 2, every dim >= 1)"}},
      {"graph input dtype", {MLPH_UNIMPLEMENTED, "graph: input 0 'x' is float64, expected float32, int16 or int32"}},
      {"value index", {MLPH_INVALID_ARGUMENT, "graph: the loss: value index 99 is out of range (the graph has 4 values)"}},
      {"value defined twice", {MLPH_INVALID_ARGUMENT, "graph: parameter 0: defines value 'x', which is already defined"}},
      {"parameter dtype", {MLPH_INVALID_ARGUMENT, "graph: parameter 'x' must be float32 with initial contents"}},
      {"parameter l2", {MLPH_INVALID_ARGUMENT, "graph: parameter 'x': l2 must be >= 0, got -0.5"}},
      {"parameter weight_decay", {MLPH_INVALID_ARGUMENT, "graph: parameter 'x': weight_decay must be >= 0, got -1"}},
      {"incomplete node", {MLPH_INVALID_ARGUMENT, "graph: node 0 is incomplete (null op, name or array)"}},
      {"unknown op", {MLPH_UNIMPLEMENTED, "node 'probe' (frobnicate): op 'frobnicate' is not in op-set 1 (docs/ops.md)"}},
      {"op of a later op-set", {MLPH_UNIMPLEMENTED, "node 'probe' (spatial_gather): op 'spatial_gather' is not in op-set 1 (docs/ops.md)"}},
      {"one output", {MLPH_INVALID_ARGUMENT, "node 'act' (relu): expects exactly one output, got 0"}},
      {"arity", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): expects 2 to 3 inputs (x, w, optional b), got 1"}},
      {"topological order", {MLPH_INVALID_ARGUMENT, "node 'second' (relu): uses value 'a' before it is defined (nodes must be in topological order)"}},
      {"output defined twice", {MLPH_INVALID_ARGUMENT, "node 'act' (relu): defines value 'x', which is already defined"}},
      {"unknown attribute", {MLPH_UNIMPLEMENTED, "node 'probe' (leaky_relu): attribute 'slope_mode' is not in op-set 1 (leaky_relu takes alpha)"}},
      {"attribute given twice", {MLPH_INVALID_ARGUMENT, "node 'probe' (leaky_relu): attribute 'alpha' is given twice"}},
      {"missing required attribute", {MLPH_INVALID_ARGUMENT, "node 'probe' (leaky_relu): missing required attribute 'alpha'"}},
      {"attribute type", {MLPH_INVALID_ARGUMENT, "node 'probe' (leaky_relu): attribute 'alpha' must be numeric, got text"}},
      {"attribute scalar", {MLPH_INVALID_ARGUMENT, "node 'probe' (scale): attribute 'factor' must be a single number, got 2 values"}},
      {"attribute integer", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): attribute 'groups' must be an integer, got 1.5"}},
      {"attribute range", {MLPH_INVALID_ARGUMENT, "node 'probe' (dropout): attribute 'rate' must be in [0, 1), got 1"}},
      {"attribute finite", {MLPH_INVALID_ARGUMENT, "node 'probe' (scale): attribute 'factor' must be finite, got inf"}},
      {"attribute count", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): attribute 'padding' needs 2 or 4 values (one or two per spatial dim), got 3"}},
      {"input dtype", {MLPH_UNIMPLEMENTED, "node 'probe' (log1p): input x 'counts' is int32, expected float32 or int16"}},
      {"output dtype", {MLPH_UNIMPLEMENTED, "node 'probe' (relu): output 'probe.out' is int32, expected float32"}},
      {"running statistics are state", {MLPH_INVALID_ARGUMENT, "node 'probe' (batch_norm): input running_mean 'mean' must be a parameter without MLPH_PARAM_TRAINABLE (state the op updates)"}},
      {"shape: elementwise", {MLPH_INVALID_ARGUMENT, "node 'probe' (add): inputs [2,3] and [3,2] differ in shape"}},
      {"shape: elementwise output", {MLPH_INVALID_ARGUMENT, "node 'probe' (relu): input [1,4,4,2] gives output [1,4,4,2], but 'probe.out' is declared [1,4,2,4]"}},
      {"shape: loss", {MLPH_INVALID_ARGUMENT, "node 'probe' (mse): prediction [2,3] and target [3,2] differ in shape"}},
      {"shape: conv output", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): input [1,4,4,2] with weights [3,3,2,4] gives output [1,2,2,4], but 'probe.out' is declared [1,4,4,4]"}},
      {"shape: conv input rank", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): input 'x' [1,4,2] must be [N, spatial..., C] with 2 or 3 spatial dims"}},
      {"shape: conv groups", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): weights [3,3,2,4] do not fit input [1,4,4,2] in 2 groups (expected [kernel..., 1, Co], Co divisible by groups)"}},
      {"shape: conv window", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): input [1,4,4,2] with weights [5,5,2,4]: the window along spatial dim 0 is larger than the padded input"}},
      {"shape: conv bias", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv): input 'b' [2] must be [4], one per output channel"}},
      {"shape: conv_transpose weights", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv_transpose): weights 'w' [3,3,4,3] must be [kernel..., Co, 2] for input [1,4,4,2]"}},
      {"shape: conv_transpose output", {MLPH_INVALID_ARGUMENT, "node 'probe' (conv_transpose): input [1,4,4,2] with weights [3,3,4,2] gives output [1,9,9,4], but 'probe.out' is declared [1,8,8,4]"}},
      {"shape: pool window", {MLPH_INVALID_ARGUMENT, "node 'probe' (max_pool): input [1,4,4,2]: the window along spatial dim 0 (kernel 5) is larger than the input"}},
      {"shape: pool output", {MLPH_INVALID_ARGUMENT, "node 'probe' (max_pool): input [1,4,4,2] gives output [1,2,2,2], but 'probe.out' is declared [1,3,3,2]"}},
      {"shape: dense", {MLPH_INVALID_ARGUMENT, "node 'probe' (dense): input [2,5] and weights [3,4] must be [N, in] and [in, out]"}},
      {"shape: reshape count", {MLPH_INVALID_ARGUMENT, "node 'probe' (reshape): cannot reshape input [1,4,4,2] to output [2,8]"}},
      {"shape: reshape attribute", {MLPH_INVALID_ARGUMENT, "node 'probe' (reshape): attribute 'shape' [32,1] disagrees with output 'probe.out' [1,32]"}},
      {"shape: per channel", {MLPH_INVALID_ARGUMENT, "node 'probe' (channel_affine): input 'w' [3] must be [2], one per channel of [1,4,4,2]"}},
      {"shape: batch_norm statistics", {MLPH_INVALID_ARGUMENT, "node 'probe' (batch_norm): training needs more than 1 value per channel, input is [1,2]"}},
      {"shape: concat", {MLPH_INVALID_ARGUMENT, "node 'probe' (concat): input 'b' [1,4,2,2] differs from [1,4,4,2] in more than the channels"}},
      {"shape: global_avg_pool", {MLPH_INVALID_ARGUMENT, "node 'probe' (global_avg_pool): input 'x' [4,2] must be [N, spatial..., C]"}},
      {"shape: broadcast", {MLPH_INVALID_ARGUMENT, "node 'probe' (broadcast): input [1,4,4,2] cannot be broadcast to [1,8,4,2] (only size-1 spatial dims are repeated)"}},
      {"shape: halo output", {MLPH_INVALID_ARGUMENT, "node 'probe' (halo_exchange): input [1,4,4,2] with halo [1,1] gives output [1,6,6,2], but 'probe.out' is declared [1,4,4,2]"}},
      {"shape: halo wider than the block", {MLPH_INVALID_ARGUMENT, "node 'probe' (halo_exchange): input [1,4,4,2]: the block along spatial dim 0 (4) is narrower than its halo (5) over 2 ranks"}},
      {"shape: spatial_gather", {MLPH_INVALID_ARGUMENT, "node 'probe' (spatial_gather): input [1,4,4,2] over grid [2,1] gives output [1,8,4,2], but 'probe.out' is declared [1,4,4,2]"}},
      {"shape: segmentation labels", {MLPH_INVALID_ARGUMENT, "node 'probe' (softmax_cross_entropy): logits [2,3,3] and labels [2,2] must be [N, S..., C] and [N, S...]"}},
      {"shape: segmentation metric", {MLPH_INVALID_ARGUMENT, "node 'probe' (iou): logits [2,3,3] gives output [2], but 'probe.out' is declared []"}},
      {"attribute count: class_weights", {MLPH_INVALID_ARGUMENT, "node 'probe' (softmax_cross_entropy): attribute 'class_weights' needs 3 values (one per channel), got 2"}},
      {"labels dtype", {MLPH_UNIMPLEMENTED, "node 'probe' (softmax_cross_entropy): input labels 'labels' is float32, expected int32"}},
      {"loss scalar", {MLPH_INVALID_ARGUMENT, "graph: the loss 'act.out' must be a float32 scalar, got float32 [2,3]"}},
      {"eval output dtype", {MLPH_UNIMPLEMENTED, "graph: eval output 0 'counts' is int16, expected float32 or int32"}},
      {"unknown optimizer", {MLPH_UNIMPLEMENTED, "optimizer 'adagrad' is not in op-set 1 (docs/ops.md: sgd_keras, adam, adamw, lamb)"}},
      {"optimizer attribute missing", {MLPH_INVALID_ARGUMENT, "optimizer 'adam': missing required attribute 'beta1'"}},
      {"optimizer attribute range", {MLPH_INVALID_ARGUMENT, "optimizer 'adamw': attribute 'beta1' must be in [0, 1), got 1"}},
      {"optimizer weight_decay", {MLPH_INVALID_ARGUMENT, "optimizer 'lamb': attribute 'weight_decay' must be >= 0, got -0.1"}},
      {"optimizer unknown attribute", {MLPH_UNIMPLEMENTED, "optimizer 'adam': attribute 'amsgrad' is not in op-set 1 (adam takes beta1, beta2, eps, weight_decay)"}},
      {"sgd momentum", {MLPH_INVALID_ARGUMENT, "optimizer 'sgd_keras': attribute 'momentum' must be >= 0, got -0.9"}},
  };
  std::set<std::string> seen;
  for (const auto& bad : conformance::bad_graphs()) {
    seen.insert(bad->rule);
    const Expected got = error_of(bad->graph);
    const auto want = expected.find(bad->rule);
    ASSERT_NE(want, expected.end()) << bad->rule << ": " << got.message;
    EXPECT_EQ(got.code, want->second.code) << bad->rule << ": " << got.message;
    EXPECT_EQ(got.message, want->second.message) << bad->rule;
    EXPECT_EQ(got.message.find('\n'), std::string::npos) << bad->rule;
  }
  EXPECT_EQ(seen.size(), expected.size()) << "one bad graph per rule, each with its own name";
}

TEST(Validator, DefaultsAndWindowsAreFilledIn) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 6, 6, 3});
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {3, 3, 3, 4}), up = g.value("up", MLPH_DTYPE_F32, {3, 3, 2, 4});
  g.parameter(w, std::vector<float>(108, 0.1f));
  g.parameter(up, std::vector<float>(72, 0.1f));
  const int32_t gamma = g.value("gamma", MLPH_DTYPE_F32, {4}), beta = g.value("beta", MLPH_DTYPE_F32, {4});
  const int32_t mean = g.value("mean", MLPH_DTYPE_F32, {4}), var = g.value("var", MLPH_DTYPE_F32, {4});
  for (int32_t v : {gamma, beta}) g.parameter(v, std::vector<float>(4, 1.0f));
  for (int32_t v : {mean, var}) g.parameter(v, std::vector<float>(4, 0.0f), 0, 1, 0);
  // conv: no attributes but padding, given as befores then afters.
  const int32_t c = g.node("conv", "conv", {x, w}, {g.value("c", MLPH_DTYPE_F32, {2, 5, 5, 4})}, {{"padding", {0, 0, 1, 1}}});
  const int32_t bn = g.node("batch_norm", "bn", {c, gamma, beta, mean, var}, {g.value("bn", MLPH_DTYPE_F32, {2, 5, 5, 4})});
  const int32_t pool = g.node("max_pool", "pool", {bn}, {g.value("pool", MLPH_DTYPE_F32, {2, 2, 2, 4})}, {{"kernel", {2, 2}}});
  const int32_t t = g.node("conv_transpose", "up", {pool, up}, {g.value("t", MLPH_DTYPE_F32, {2, 4, 4, 2})},
                           {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
  const int32_t labels = g.value("labels", MLPH_DTYPE_I32, {2, 4, 4});
  const int32_t flat = g.node("reshape", "flat", {t}, {g.value("flat", MLPH_DTYPE_F32, {2, 32})});
  const int32_t loss = g.node("softmax_cross_entropy", "loss", {t, labels}, {g.value("loss", MLPH_DTYPE_F32, {})});
  g.inputs({x, labels});
  g.loss(loss);
  g.eval_outputs({flat, labels});  // an int32 eval output: a graph input, returned as fed
  g.optimizer("sgd_keras", {});
  const sdk::ValidGraph v = sdk::validate_graph(*g.graph(), sdk::Implements::everything());

  EXPECT_EQ(v.opset, 1u);
  const sdk::ValidNode& conv = node_named(v, "conv");
  EXPECT_EQ(conv.attrs.ints("stride"), (Ints{1, 1}));
  EXPECT_EQ(conv.attrs.ints("dilation"), (Ints{1, 1}));
  EXPECT_EQ(conv.attrs.integer("groups"), 1);
  EXPECT_EQ(conv.window.in, (Ints{6, 6}));
  EXPECT_EQ(conv.window.out, (Ints{5, 5}));  // (6 + 0 + 1 - 2 - 1)/1 + 1
  EXPECT_EQ(conv.window.pad_before, (Ints{0, 0}));
  EXPECT_EQ(conv.window.pad_after, (Ints{1, 1}));
  EXPECT_EQ(conv.window.kernel, (Ints{3, 3}));
  const sdk::ValidNode& norm = node_named(v, "bn");
  EXPECT_EQ(norm.attrs.number("eps"), 1e-5);
  EXPECT_EQ(norm.attrs.number("momentum"), 0.1);
  EXPECT_EQ(norm.attrs.integer("group_size"), 1);
  const sdk::ValidNode& max_pool = node_named(v, "pool");
  EXPECT_EQ(max_pool.attrs.ints("stride"), (Ints{2, 2})) << "Keras: the stride defaults to the kernel";
  EXPECT_EQ(max_pool.window.out, (Ints{2, 2}));
  const sdk::ValidNode& transpose = node_named(v, "up");
  EXPECT_EQ(transpose.window.in, (Ints{2, 2}));
  EXPECT_EQ(transpose.window.out, (Ints{4, 4}));  // (2-1)*2 - 1 - 1 + 2 + 1 + 1
  EXPECT_EQ(transpose.window.output_padding, (Ints{1, 1}));
  EXPECT_EQ(node_named(v, "flat").attrs.ints("shape"), (Ints{2, 32})) << "reshape: the output's shape";
  EXPECT_EQ(node_named(v, "loss").attrs.numbers("class_weights"), (Numbers{1, 1})) << "one per class";
  EXPECT_EQ(v.optimizer.name, "sgd_keras");
  EXPECT_EQ(v.optimizer.attrs.number("momentum"), 0.0);
  EXPECT_EQ(v.eval_outputs, (std::vector<int32_t>{flat, labels}));
  ASSERT_EQ(v.params.size(), 6u);
  EXPECT_FALSE(v.params[4].trainable);
  EXPECT_TRUE(v.params[0].trainable);
}

TEST(Validator, AnOlderGraphWithoutTheMemberIsOpSet1) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 3}), y = g.value("y", MLPH_DTYPE_F32, {2, 3});
  g.parameter(x, std::vector<float>(6, 0.5f));
  g.node("relu", "act", {x}, {y});
  g.loss(g.node("mse", "loss", {y, x}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.optimizer("sgd_keras", {{"momentum", 0.9}});
  MLPH_Graph older = *g.graph();
  EXPECT_EQ(older.opset, 1u) << "GraphBuilder stamps the op-set the graph needs";
  older.struct_size = MLPH_STRUCT_SIZE(MLPH_Graph, seed);
  older.opset = 77;  // beyond struct_size: never read
  EXPECT_EQ(sdk::validate_graph(older, sdk::Implements::everything()).opset, 1u);
}

// A graph of op-set 1's ops stays op-set 1 (backends built before op-set 2 still run it); one using
// an op of op-set 2 is stamped 2, and halo_exchange's windows and spatial_gather's shape check out.
TEST(Validator, GraphBuilderStampsTheOpSetItsOpsNeed) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 4, 6, 3});
  g.parameter(x, std::vector<float>(2 * 4 * 6 * 3, 0.5f));
  const int32_t h = g.node("halo_exchange", "halo", {x}, {g.value("h", MLPH_DTYPE_F32, {2, 5, 8, 3})},
                           {{"grid", {2, 1}}, {"halo", {0, 1, 1, 1}}});
  const int32_t y = g.node("spatial_gather", "gather", {h}, {g.value("y", MLPH_DTYPE_F32, {2, 10, 8, 3})},
                           {{"grid", {2, 1}}});
  g.loss(g.node("mse", "loss", {y, y}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.optimizer("sgd_keras", {});
  EXPECT_EQ(g.graph()->opset, 2u);
  const sdk::ValidGraph v = sdk::validate_graph(*g.graph(), sdk::Implements::everything());
  EXPECT_EQ(node_named(v, "halo").attrs.ints("halo"), (Ints{0, 1, 1, 1}));
  EXPECT_EQ(node_named(v, "gather").attrs.ints("grid"), (Ints{2, 1}));
}

TEST(Validator, WhatTheBackendDoesNotImplementIsUnimplemented) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 3}), y = g.value("y", MLPH_DTYPE_F32, {2, 3});
  g.parameter(x, std::vector<float>(6, 0.5f));
  g.node("tanh", "act", {x}, {y});
  g.loss(g.node("mse", "loss", {y, x}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.optimizer("lamb", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.01}, {"max_grad_norm", 1.0}});
  sdk::Implements some = sdk::Implements::everything();
  EXPECT_EQ(error_of(*g.graph(), some).code, MLPH_OK);
  some.optimizers = {"sgd_keras", "adam"};
  Expected e = error_of(*g.graph(), some);
  EXPECT_EQ(e.code, MLPH_UNIMPLEMENTED);
  EXPECT_EQ(e.message, "optimizer 'lamb': this backend does not implement it");
  some.ops = {"mse", "relu"};
  e = error_of(*g.graph(), some);
  EXPECT_EQ(e.code, MLPH_UNIMPLEMENTED);
  EXPECT_EQ(e.message, "node 'act' (tanh): this backend does not implement op 'tanh'");
}

TEST(Validator, TheRealCosmoFlowGraphPasses) {
  sdk::GraphBuilder g;
  cosmoflow::ModelSettings model;
  model.edge = 32;
  model.kernel_size = 2;  // Keras 'same' with an even kernel: the odd padding goes after
  cosmoflow::build_model(g, model, 0.9, 2, 7);
  const sdk::ValidGraph v = sdk::validate_graph(*g.graph(), sdk::Implements::everything());
  EXPECT_EQ(v.nodes.size(), g.graph()->n_nodes);
  EXPECT_EQ(v.params.size(), g.graph()->n_params);
  const sdk::ValidNode& conv1 = node_named(v, "conv1");
  EXPECT_EQ(conv1.window.pad_before, (Ints{0, 0, 0}));
  EXPECT_EQ(conv1.window.pad_after, (Ints{1, 1, 1}));
  EXPECT_EQ(conv1.window.out, (Ints{32, 32, 32}));
  EXPECT_EQ(node_named(v, "conv5.pool").window.out, (Ints{1, 1, 1}));
  EXPECT_EQ(node_named(v, "dense1.dropout").attrs.number("rate"), 0.5);
  EXPECT_FALSE(node_named(v, "log1p").gradient());
  EXPECT_EQ(v.value(v.inputs[0]).dtype, MLPH_DTYPE_I16);
}

// CosmoFlow split 2x2x1 at 32^3: four blocks on [16,16,32] parts (conv5's input, 2^3 whole, would
// leave blocks of 1), then the gather; the convs pad nothing, the halos do.
TEST(Validator, TheRealSpatialCosmoFlowGraphPasses) {
  sdk::GraphBuilder g;
  cosmoflow::ModelSettings model;
  model.edge = 32;
  model.grid = {2, 2, 1};
  EXPECT_EQ(cosmoflow::spatial_blocks(model), 4);
  cosmoflow::build_model(g, model, 0.9, 2, 7);
  EXPECT_EQ(g.graph()->opset, 2u);
  const sdk::ValidGraph v = sdk::validate_graph(*g.graph(), sdk::Implements::everything());
  EXPECT_EQ(v.value(v.inputs[0]).shape, (Ints{2, 16, 16, 32, 4}));
  EXPECT_EQ(node_named(v, "conv1").window.in, (Ints{18, 18, 34}));
  EXPECT_EQ(node_named(v, "conv1").window.pad_before, (Ints{0, 0, 0}));
  EXPECT_EQ(node_named(v, "conv1.halo").attrs.ints("halo"), (Ints{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(v.value(node_named(v, "gather").output).shape, (Ints{2, 2, 2, 2, 256}));
  EXPECT_EQ(node_named(v, "conv5").window.pad_before, (Ints{1, 1, 1})) << "after the gather: 'same' as usual";
  EXPECT_THROW(v.value(node_named(v, "conv5.halo").output), std::runtime_error);
}

#ifdef MLPH_TEST_DEEPCAM
TEST(Validator, TheRealDeepCamGraphPasses) {
  sdk::GraphBuilder g;
  deepcam::DataSettings data;
  data.height = 16, data.width = 16;
  deepcam::build_model(g, data, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 2, 7);
  const sdk::ValidGraph v = sdk::validate_graph(*g.graph(), sdk::Implements::everything());
  EXPECT_EQ(v.nodes.size(), g.graph()->n_nodes);
  size_t batch_norms = 0;
  for (const sdk::ValidNode& n : v.nodes) {
    if (n.op != "batch_norm") continue;
    ++batch_norms;
    EXPECT_EQ(n.attrs.integer("group_size"), 1) << n.name;
  }
  EXPECT_GT(batch_norms, 40u);
  const auto weights = deepcam::class_weights();
  EXPECT_EQ(node_named(v, "loss").attrs.numbers("class_weights"),
            (Numbers{double(weights[0]), double(weights[1]), double(weights[2])}));
  EXPECT_EQ(v.optimizer.name, "lamb");
  EXPECT_GT(v.optimizer.attrs.number("max_grad_norm"), 0.0);
}
#endif
