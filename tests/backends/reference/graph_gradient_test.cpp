// Finite-difference checks through the executor and the C table: the gradient read back after a
// train step (lr 0, so nothing moves) must match central differences of the reported loss, l2
// penalty included. This checks the plumbing the kernel tests cannot: gradient routing between
// nodes, fan-out accumulation, the mse target's gradient, dropout masks, regularization.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

namespace mlph::reference {
namespace {
using test::random_floats;

// A graph under construction whose trainable parameters are what the test differentiates.
struct Case {
  sdk::GraphBuilder g;
  int32_t target = -1;

  int32_t param(const std::string& name, std::vector<int64_t> shape, float scale = 1.0f, double l2 = 0.0) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, std::move(shape));
    g.parameter(v, random_floats(static_cast<size_t>(sdk::numel(g.value_info(v))), static_cast<uint64_t>(v) + 1, scale),
                l2);
    return v;
  }
  int32_t value(const std::string& name, std::vector<int64_t> shape) {
    return g.value(name, MLPH_DTYPE_F32, std::move(shape));
  }
  int32_t unary(const std::string& op, int32_t x, std::vector<sdk::AttrInit> attrs = {}) {
    const MLPH_Value in = g.value_info(x);
    return g.node(op, op, {x}, {value(op, {in.shape, in.shape + in.ndim})}, std::move(attrs));
  }
  // loss = mse(out, target) with target a graph input.
  void finish(int32_t out) {
    const MLPH_Value o = g.value_info(out);
    target = g.value("target", MLPH_DTYPE_F32, {o.shape, o.shape + o.ndim});
    g.inputs({target});
    finish_with_loss(g.node("mse", "loss", {out, target}, {value("loss", {})}));
  }
  void finish_with_loss(int32_t loss) {
    g.loss(loss);
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
    g.seed(5);
  }
};

void expect_gradients_match(Case& c, float h = 1e-2f, double tolerance = 2e-3) {
  const MLPH_Graph* graph = c.g.graph();
  test::Compiled model(graph);
  std::vector<float> target;
  std::vector<MLPH_Tensor> inputs;
  if (c.target >= 0) {
    target = random_floats(static_cast<size_t>(sdk::numel(c.g.value_info(c.target))), 77, 0.5f);
    inputs.push_back(test::tensor_for(c.g.value_info(c.target), target));
  }
  for (size_t p = 0; p < graph->n_params; ++p) {
    const MLPH_Value& v = graph->values[graph->params[p].value];
    std::vector<float> w = model.read_parameter(p, v);
    model.train(inputs, 0.0);
    const std::vector<float> grad = model.read_gradient(p, v);
    const size_t step = std::max<size_t>(1, w.size() / 40);
    for (size_t i = 0; i < w.size(); i += step) {
      const float saved = w[i];
      w[i] = saved + h;
      model.write_parameter(p, v, w);
      const double up = model.train(inputs, 0.0);
      w[i] = saved - h;
      model.write_parameter(p, v, w);
      const double down = model.train(inputs, 0.0);
      w[i] = saved;
      model.write_parameter(p, v, w);
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(grad[i], numeric, tolerance * (1.0 + std::fabs(numeric))) << v.name << "[" << i << "]";
    }
  }
}

TEST(ReferenceGraphGradients, EveryOpInAChainWithL2) {
  Case c;
  const int32_t x = c.param("x", {2, 4, 4, 4, 3});
  int32_t h = c.unary("leaky_relu", x, {{"alpha", 0.3}});
  h = c.g.node("max_pool", "pool", {h}, {c.value("pool", {2, 2, 2, 2, 3})},
               {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
  h = c.g.node("reshape", "flatten", {h}, {c.value("flat", {2, 24})}, {{"shape", {2, 24}}});
  const int32_t w = c.param("w", {24, 5}, 0.5f, /*l2=*/0.05), b = c.param("b", {5});
  h = c.g.node("dense", "dense", {h, w, b}, {c.value("dense", {2, 5})});
  h = c.unary("relu", h);
  h = c.unary("dropout", h, {{"rate", 0.4}});
  h = c.unary("tanh", h);
  h = c.unary("scale", h, {{"factor", 1.2}});
  c.finish(h);
  expect_gradients_match(c);
}

// x feeds two convolutions (fan-out: its gradient is the sum), and mse compares their outputs,
// so the target side of mse carries a gradient too; the second path stacks two convs.
TEST(ReferenceGraphGradients, FanOutConvChainAndMseTarget) {
  Case c;
  const int32_t x = c.param("x", {1, 5, 5, 5, 2});
  const int32_t w1 = c.param("w1", {3, 3, 3, 2, 3}, 0.4f), b1 = c.param("b1", {3});
  const int32_t w2 = c.param("w2", {1, 1, 1, 2, 4}, 0.5f, /*l2=*/0.1);
  const int32_t w3 = c.param("w3", {2, 2, 2, 4, 3}, 0.4f);
  const int32_t a = c.g.node("conv", "conv_a", {x, w1, b1}, {c.value("a", {1, 5, 5, 5, 3})}, {{"padding", {1, 1, 1}}});
  const int32_t m = c.g.node("conv", "conv_m", {x, w2}, {c.value("m", {1, 5, 5, 5, 4})});
  const int32_t z =
      c.g.node("conv", "conv_z", {m, w3}, {c.value("z", {1, 5, 5, 5, 3})}, {{"padding", {0, 0, 0, 1, 1, 1}}});
  c.finish_with_loss(c.g.node("mse", "loss", {a, z}, {c.value("loss", {})}));
  expect_gradients_match(c);
}

}  // namespace
}  // namespace mlph::reference
