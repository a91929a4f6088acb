#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "settings.hpp"  // CosmoFlow's (its model.hpp name clashes with the reference's)
#include "onednn_compare.hpp"

namespace mlph::cosmoflow {  // workloads/cosmoflow/model.hpp
void build_model(sdk::GraphBuilder& g, const ModelSettings& model, double momentum, uint32_t batch, uint64_t seed);
}

namespace mlph::onednn::test {
namespace {

struct CallResult {
  MLPH_Code code = MLPH_OK;
  std::string message;
};
CallResult result_of(MLPH_Error* error) {
  if (!error) return {};
  CallResult r{core::error_code(error), core::error_message(error)};
  core::error_free(error);
  return r;
}

sdk::GraphBuilder cosmoflow(int edge, uint32_t batch, double dropout) {
  sdk::GraphBuilder g;
  cosmoflow::ModelSettings m;
  m.edge = edge, m.dropout = dropout, m.weight_decay = 0.01;
  cosmoflow::build_model(g, m, 0.9, batch, 42);
  return g;
}

TEST(OnednnCosmoflow, TrainsAndEvaluatesLikeTheReference) {
  sdk::GraphBuilder g = cosmoflow(32, 2, 0.5);
  expect_same_training(g.graph(), 3, 0.01, 2e-3);
}

TEST(OnednnCosmoflow, ParametersRoundTripThroughBlockedLayoutsExactly) {
  sdk::GraphBuilder g = cosmoflow(32, 2, 0.0);
  const MLPH_Graph* graph = g.graph();
  Compiled model(onednn(), graph);
  std::vector<std::vector<float>> written;
  for (size_t p = 0; p < graph->n_params; ++p) {
    const MLPH_Value& v = graph->values[graph->params[p].value];
    written.push_back(random_floats(size_t(sdk::numel(v)), p, 0.05f));
    model.write(p, v, written.back());
  }
  Inputs in(*graph, 5);
  model.train(in.tensors, 0.0, 0);  // lr 0: the weights go through the primitives' layouts unchanged
  for (size_t p = 0; p < graph->n_params; ++p)
    EXPECT_EQ(model.read(p, graph->values[graph->params[p].value]), written[p]) << "parameter " << p;
}

// A trainable [4, 1000] tensor through dropout into mse against zeros: the gradient is nonzero
// exactly where the mask keeps an element, so equal gradients mean equal masks.
TEST(OnednnDropout, MaskIsBitwiseTheReferences) {
  sdk::GraphBuilder g;
  const int32_t t = g.value("t", MLPH_DTYPE_F32, {4, 1000}), p = g.value("p", MLPH_DTYPE_F32, {4, 1000});
  const int32_t y = g.value("y", MLPH_DTYPE_F32, {4, 1000}), loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.parameter(p, random_floats(4000, 3));
  g.node("dropout", "drop", {p}, {y}, {{"rate", 0.3}});
  g.node("mse", "loss", {y, t}, {loss});
  g.inputs({t});
  g.loss(loss);
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  g.seed(77);
  Compiled ours(onednn(), g.graph()), theirs(reference(), g.graph());
  std::vector<float> zeros(4000, 0.0f);
  const MLPH_Value& tv = g.graph()->values[t];
  for (uint64_t step : {0u, 5u}) {
    ours.train({sdk::host_tensor(MLPH_DTYPE_F32, tv.shape, 2, zeros.data())}, 0.0, step);
    theirs.train({sdk::host_tensor(MLPH_DTYPE_F32, tv.shape, 2, zeros.data())}, 0.0, step);
    const auto a = ours.read(0, g.graph()->values[p], true), b = theirs.read(0, g.graph()->values[p], true);
    EXPECT_EQ(a, b);
    const auto dropped = std::count(a.begin(), a.end(), 0.0f);
    EXPECT_GT(dropped, 1000);  // about 30% of 4000
    EXPECT_LT(dropped, 1400);
  }
}

TEST(OnednnErrors, UnknownOptionOpAndAttributeAreNamed) {
  MLPH_Backend* backend = nullptr;
  std::vector<MLPH_KeyValue> bad{{"thread", "2"}};
  CallResult r = result_of(onednn()->create(core::host_api(), bad.data(), 1, &backend));
  EXPECT_EQ(r.code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("'thread'"), std::string::npos) << r.message;

  for (const char* op : {"frobnicate", "relu"}) {
    sdk::GraphBuilder g;
    const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 3}), y = g.value("y", MLPH_DTYPE_F32, {2, 3});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node(op, "odd", {x}, {y}, {{"colour", 1.0}});
    g.node("mse", "loss", {y, x}, {loss});
    g.inputs({x});
    g.loss(loss);
    g.optimizer("sgd_keras", {});
    std::vector<MLPH_KeyValue> options{{"threads", "1"}};
    core::check(onednn()->create(core::host_api(), options.data(), 1, &backend));
    MLPH_Model* model = nullptr;
    r = result_of(onednn()->compile(backend, g.graph(), nullptr, &model));
    onednn()->destroy(backend);
    EXPECT_EQ(r.code, MLPH_UNIMPLEMENTED);
    EXPECT_NE(r.message.find("node 'odd'"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(std::string(op) == "relu" ? "'colour'" : "'frobnicate'"), std::string::npos) << r.message;
  }
}

// A batch norm over a group of 2 ranks compiled without comms: one line naming the node (the 2-rank
// runs are in tests/comms/mpi/onednn_group_batch_norm.cpp).
TEST(OnednnErrors, GroupBatchNormWithoutRanksIsNamed) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 3, 3, 4}), y = g.value("y", MLPH_DTYPE_F32, {2, 3, 3, 4});
  std::vector<int32_t> vectors;
  for (const char* name : {"gamma", "beta", "mean", "var"}) {
    vectors.push_back(g.value(name, MLPH_DTYPE_F32, {4}));
    g.parameter(vectors.back(), std::vector<float>(4, 1.0f), 0.0, 1.0, vectors.size() > 2 ? 0 : MLPH_PARAM_TRAINABLE);
  }
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("batch_norm", "bn7", {x, vectors[0], vectors[1], vectors[2], vectors[3]}, {y}, {{"group_size", 2.0}});
  g.node("mse", "loss", {y, x}, {loss});
  g.inputs({x});
  g.loss(loss);
  g.optimizer("sgd_keras", {});
  MLPH_Backend* backend = nullptr;
  std::vector<MLPH_KeyValue> options{{"threads", "1"}};
  core::check(onednn()->create(core::host_api(), options.data(), 1, &backend));
  MLPH_Model* model = nullptr;
  const CallResult r = result_of(onednn()->compile(backend, g.graph(), nullptr, &model));
  onednn()->destroy(backend);
  EXPECT_EQ(r.code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(r.message.find("onednn-cpu backend: node 'bn7' (batch_norm): group_size 2 needs 2 ranks; this run has 1"),
            std::string::npos)
      << r.message;
}

}  // namespace
}  // namespace mlph::onednn::test
