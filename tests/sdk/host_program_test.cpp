// The SDK's lowering for host backends (mlph/sdk/program/lower.hpp): every op of the catalogue has a
// kind, windows are right-aligned into 3-D (a conv_transpose as the conv it is the adjoint of), the
// attributes land typed, the Program outlives the graph, and what an executor derives from it.
#include <gtest/gtest.h>

#include <algorithm>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/program/lower.hpp"

using namespace mlph;
using sdk::program::OpKind;

namespace {

using Ints = std::vector<int64_t>;

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

Ints spatial(const int64_t (&dims)[3]) { return {dims[0], dims[1], dims[2]}; }

const sdk::program::Node& node_named(const sdk::program::Program& p, const std::string& name) {
  for (const sdk::program::Node& n : p.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

// conv (padding after only) -> batch_norm over 2 ranks -> max_pool -> conv_transpose -> softmax
// cross-entropy; the builder, and with it every array the graph points to, is gone on return.
sdk::program::Program lowered_segmentation_graph() {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 6, 6, 3});
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {3, 3, 3, 4}), up = g.value("up", MLPH_DTYPE_F32, {3, 3, 2, 4});
  g.parameter(w, std::vector<float>(108, 0.25f), 0.5);
  g.parameter(up, std::vector<float>(72, 0.125f), 0, 0.5);
  const int32_t gamma = g.value("gamma", MLPH_DTYPE_F32, {4}), beta = g.value("beta", MLPH_DTYPE_F32, {4});
  const int32_t mean = g.value("mean", MLPH_DTYPE_F32, {4}), var = g.value("var", MLPH_DTYPE_F32, {4});
  for (int32_t v : {gamma, beta}) g.parameter(v, std::vector<float>(4, 1.0f));
  for (int32_t v : {mean, var}) g.parameter(v, std::vector<float>(4, 0.0f), 0, 1, 0);
  const int32_t c = g.node("conv", "conv", {x, w}, {g.value("c", MLPH_DTYPE_F32, {2, 5, 5, 4})}, {{"padding", {0, 0, 1, 1}}});
  const int32_t bn = g.node("batch_norm", "bn", {c, gamma, beta, mean, var}, {g.value("bn", MLPH_DTYPE_F32, {2, 5, 5, 4})},
                            {{"eps", 1e-3}, {"group_size", 2}});
  const int32_t pool = g.node("max_pool", "pool", {bn}, {g.value("pool", MLPH_DTYPE_F32, {2, 2, 2, 4})}, {{"kernel", {2, 2}}});
  const int32_t t = g.node("conv_transpose", "up", {pool, up}, {g.value("t", MLPH_DTYPE_F32, {2, 4, 4, 2})},
                           {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
  const int32_t labels = g.value("labels", MLPH_DTYPE_I32, {2, 4, 4});
  g.inputs({x, labels});
  g.loss(g.node("softmax_cross_entropy", "loss", {t, labels}, {g.value("loss", MLPH_DTYPE_F32, {})},
                {{"class_weights", {0.25, 2.0}}}));
  g.optimizer("lamb", {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-6}, {"weight_decay", 0.01}, {"max_grad_norm", 2.0}});
  g.seed(42);
  return sdk::program::lower_graph(*g.graph(), sdk::program::implements());
}

}  // namespace

// The lowering knows every op and optimizer of the catalogue: a backend passing implements() runs
// all of docs/ops.md, and an op added to the catalogue fails here until it is lowered.
TEST(HostProgram, ImplementsIsTheWholeCatalogueLessWhatIsMissing) {
  const sdk::Implements all = sdk::Implements::everything();
  EXPECT_EQ(sorted(sdk::program::implements().ops), sorted(all.ops));
  EXPECT_EQ(sorted(sdk::program::implements().optimizers), sorted(all.optimizers));
  const sdk::Implements some = sdk::program::implements({OpKind::halo_exchange, OpKind::spatial_gather});
  EXPECT_EQ(some.ops.size(), all.ops.size() - 2);
  EXPECT_FALSE(some.op("halo_exchange"));
  EXPECT_FALSE(some.op("spatial_gather"));
  EXPECT_TRUE(some.op("conv"));
}

TEST(HostProgram, WindowsAreRightAlignedInto3D) {
  const sdk::program::Program p = lowered_segmentation_graph();
  const sdk::program::Window& conv = node_named(p, "conv").window;
  EXPECT_EQ(conv.batch, 2);
  EXPECT_EQ(spatial(conv.in), (Ints{1, 6, 6}));
  EXPECT_EQ(spatial(conv.out), (Ints{1, 5, 5}));
  EXPECT_EQ(spatial(conv.kernel), (Ints{1, 3, 3}));
  EXPECT_EQ(spatial(conv.pad_before), (Ints{0, 0, 0}));
  EXPECT_EQ(spatial(conv.pad_after), (Ints{0, 1, 1}));
  EXPECT_EQ(conv.in_channels, 3);
  EXPECT_EQ(conv.out_channels, 4);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(conv.expected_out(d), conv.out[d]) << d;
  EXPECT_EQ(conv.macs(), 2.0 * 25 * 9 * 3 * 4);

  const sdk::program::Window& pool = node_named(p, "pool").window;
  EXPECT_EQ(spatial(pool.stride), (Ints{1, 2, 2}));
  EXPECT_EQ(pool.in_channels, 4);
  EXPECT_EQ(pool.out_channels, 4);
  EXPECT_EQ(pool.tap_offsets(), (Ints{0, 4, 20, 24}));  // (kh * 5 + kw) * 4 channels
  // Sample 1, output (1, 1): its window starts at input (2, 2) of a 5 x 5 x 4 sample.
  EXPECT_EQ(pool.window_offset(1 * 4 + 1 * 2 + 1), ((1 * 5 + 2) * 5 + 2) * 4);

  // The transpose [2,2,2,4] -> [2,4,4,2] runs as the conv from its output back to its input.
  const sdk::program::Window& up = node_named(p, "up").window;
  EXPECT_EQ(spatial(up.in), (Ints{1, 4, 4}));
  EXPECT_EQ(spatial(up.out), (Ints{1, 2, 2}));
  EXPECT_EQ(up.in_channels, 2);
  EXPECT_EQ(up.out_channels, 4);
  EXPECT_EQ(spatial(up.pad_before), (Ints{0, 1, 1}));
  EXPECT_EQ(spatial(up.pad_after), (Ints{0, 0, 0})) << "padding 1 less output_padding 1";
  for (int d = 0; d < 3; ++d) EXPECT_EQ(up.expected_out(d), up.out[d]) << d;
}

TEST(HostProgram, AttributesParametersAndTheOptimizerLandTyped) {
  const sdk::program::Program p = lowered_segmentation_graph();
  ASSERT_EQ(p.nodes.size(), 5u);
  const sdk::program::Node& bn = node_named(p, "bn");
  EXPECT_EQ(bn.kind, OpKind::batch_norm);
  EXPECT_EQ(bn.batch_norm.eps, 1e-3);
  EXPECT_EQ(bn.batch_norm.momentum, 0.1);
  EXPECT_EQ(bn.batch_norm.group_size, 2);
  EXPECT_EQ(bn.rows.rows, 50);
  EXPECT_EQ(bn.rows.channels, 4);
  EXPECT_EQ(bn.index, 1u);
  const sdk::program::Node& loss = node_named(p, "loss");
  EXPECT_EQ(loss.rows.rows, 32);
  EXPECT_EQ(loss.rows.channels, 2);
  EXPECT_EQ(loss.batch, 2);
  EXPECT_EQ(loss.class_weights, (std::vector<float>{0.25f, 2.0f}));
  EXPECT_FALSE(node_named(p, "conv").has_bias());

  // The initial contents are the Program's own: the graph that held them is gone.
  ASSERT_EQ(p.params.size(), 6u);
  EXPECT_EQ(p.params[0].init, std::vector<float>(108, 0.25f));
  EXPECT_EQ(p.params[0].l2, 0.5);
  EXPECT_EQ(p.params[1].init, std::vector<float>(72, 0.125f));
  EXPECT_EQ(p.params[1].weight_decay, 0.5);
  EXPECT_FALSE(p.params[4].trainable);

  EXPECT_EQ(p.optimizer.kind, sdk::program::OptimizerKind::lamb);
  EXPECT_EQ(p.optimizer.state, (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(p.optimizer.adam.beta1, 0.8);
  EXPECT_EQ(p.optimizer.adam.beta2, 0.99);
  EXPECT_EQ(p.optimizer.adam.eps, 1e-6);
  EXPECT_EQ(p.optimizer.adam.weight_decay, 0.01);
  EXPECT_EQ(p.optimizer.adam.max_grad_norm, 2.0);
  EXPECT_EQ(p.seed, 42u);
}

// Gradients flow into the values between a trainable parameter and the loss; the trainable
// parameters' gradients tile one buffer in graph order, each final after the first node reading it.
TEST(HostProgram, GradientsAndTheirLayout) {
  const sdk::program::Program p = lowered_segmentation_graph();
  const std::vector<bool>& needed = p.needs_gradient;
  std::vector<std::string> with_gradient;
  for (size_t v = 0; v < needed.size(); ++v)
    if (needed[v]) with_gradient.push_back(p.values[v].name);
  EXPECT_EQ(sorted(with_gradient), sorted({"w", "up", "gamma", "beta", "c", "bn", "pool", "t", "loss"}));

  const std::vector<sdk::GradientParam> layout = sdk::program::gradient_layout(p);
  ASSERT_EQ(layout.size(), 4u);  // the running statistics are frozen
  const size_t offsets[] = {0, 108, 180, 184}, counts[] = {108, 72, 4, 4};
  const int64_t first_use[] = {0, 3, 1, 1};  // conv, up, bn, bn
  for (size_t i = 0; i < layout.size(); ++i) {
    EXPECT_EQ(layout[i].offset, offsets[i]) << i;
    EXPECT_EQ(layout[i].count, counts[i]) << i;
    EXPECT_EQ(layout[i].first_use, first_use[i]) << i;
  }
}

// Halos given once per dim or before/after apart; an op the backend leaves out is the validator's
// one line.
TEST(HostProgram, SpatialOpsAndWhatABackendLeavesOut) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 4, 6, 3});
  g.parameter(x, std::vector<float>(2 * 4 * 6 * 3, 0.5f));
  const int32_t h = g.node("halo_exchange", "halo", {x}, {g.value("h", MLPH_DTYPE_F32, {2, 5, 8, 3})},
                           {{"grid", {2, 1}}, {"halo", {0, 1, 1, 1}}});
  const int32_t s = g.node("halo_exchange", "same", {x}, {g.value("s", MLPH_DTYPE_F32, {2, 6, 8, 3})},
                           {{"grid", {2, 1}}, {"halo", {1, 1}}});
  const int32_t y = g.node("spatial_gather", "gather", {h}, {g.value("y", MLPH_DTYPE_F32, {2, 10, 8, 3})},
                           {{"grid", {2, 1}}});
  g.loss(g.node("mse", "loss", {s, s}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.eval_outputs({y});
  g.optimizer("sgd_keras", {{"momentum", 0.9}});

  const sdk::program::Program p = sdk::program::lower_graph(*g.graph(), sdk::program::implements());
  const sdk::program::Node& halo = node_named(p, "halo");
  EXPECT_EQ(halo.grid, (Ints{2, 1}));
  EXPECT_EQ(halo.before, (Ints{0, 1}));
  EXPECT_EQ(halo.after, (Ints{1, 1}));
  EXPECT_EQ(node_named(p, "same").before, (Ints{1, 1}));
  EXPECT_EQ(node_named(p, "same").after, (Ints{1, 1}));
  EXPECT_EQ(node_named(p, "gather").grid, (Ints{2, 1}));
  EXPECT_EQ(p.optimizer.momentum, 0.9);
  EXPECT_EQ(p.optimizer.state, (std::vector<std::string>{"velocity"}));

  try {
    sdk::program::lower_graph(*g.graph(), sdk::program::implements({OpKind::halo_exchange, OpKind::spatial_gather}));
    FAIL() << "lowered an op the backend leaves out";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_UNIMPLEMENTED);
    EXPECT_STREQ(e.what(), "node 'halo' (halo_exchange): this backend does not implement op 'halo_exchange'");
  }
}
