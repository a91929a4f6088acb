#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"  // the reference backend
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "settings.hpp"  // CosmoFlow's (its model.hpp name clashes with the reference's)
#include "onednn_backend.hpp"

namespace mlph::cosmoflow {  // workloads/cosmoflow/model.hpp
void build_model(sdk::GraphBuilder& g, const ModelSettings& model, double momentum, uint32_t batch, uint64_t seed);
}

namespace mlph::onednn::test {
namespace {

std::vector<float> random_floats(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * mlph_uniform(99, stream, 0, i) - 1.0f);
  return v;
}

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

// One backend and one compiled model through a C table.
class Compiled {
 public:
  Compiled(const MLPH_BackendApi* api, const MLPH_Graph* graph, std::vector<MLPH_KeyValue> options = {{"threads", "2"}})
      : api_(api) {
    core::check(api->create(core::host_api(), options.data(), options.size(), &backend_));
    if (MLPH_Error* e = api->compile(backend_, graph, nullptr, &model_)) {
      api->destroy(backend_);
      core::check(e);
    }
  }
  ~Compiled() {
    api_->model_destroy(model_);
    api_->destroy(backend_);
  }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  double train(std::vector<MLPH_Tensor> inputs, double lr, uint64_t step) {
    MLPH_StepArgs args{sizeof(MLPH_StepArgs), nullptr, lr, step};
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api_->train_step(model_, inputs.data(), inputs.size(), &args, &result));
    return result.loss;
  }
  std::vector<float> eval(std::vector<MLPH_Tensor> inputs, const MLPH_Value& out) {
    std::vector<float> data(size_t(sdk::numel(out)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, out.shape, out.ndim, data.data());
    core::check(api_->eval_step(model_, inputs.data(), inputs.size(), &t, 1));
    return data;
  }
  std::vector<float> read(size_t index, const MLPH_Value& v, bool gradient = false) {
    std::vector<float> out(size_t(sdk::numel(v)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, out.data());
    core::check(gradient ? api_->read_gradient(model_, index, &t) : api_->read_parameter(model_, index, &t));
    return out;
  }
  void write(size_t index, const MLPH_Value& v, std::vector<float> values) {
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    core::check(api_->write_parameter(model_, index, &t));
  }

 private:
  const MLPH_BackendApi* api_;
  MLPH_Backend* backend_ = nullptr;
  MLPH_Model* model_ = nullptr;
};

const MLPH_BackendApi* onednn() { return sdk::backend_api<OnednnBackend>(); }
const MLPH_BackendApi* reference() { return sdk::backend_api<reference::ReferenceBackend>(); }

// Largest |a - b| / (tolerance_floor + |b|) over the elements.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / (floor + std::fabs(double(b[i]))));
  return worst;
}

// ||a - b|| / ||b||: gradients are sums with cancellation, so single elements near zero carry
// large relative rounding while the vector as a whole agrees.
double norm_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::pow(double(a[i]) - b[i], 2), ref += std::pow(double(b[i]), 2);
  return std::sqrt(diff / std::max(ref, 1e-30));
}

// Random inputs for a graph's inputs (int16 counts, int32 labels in [0, classes), floats).
struct Inputs {
  std::vector<std::vector<char>> storage;
  std::vector<MLPH_Tensor> tensors;
  Inputs(const MLPH_Graph& g, uint64_t stream, int32_t classes = 3) {
    for (size_t i = 0; i < g.n_inputs; ++i) {
      const MLPH_Value& v = g.values[g.inputs[i]];
      const auto n = size_t(sdk::numel(v));
      auto& bytes = storage.emplace_back(n * mlph_dtype_size(v.dtype));
      for (size_t k = 0; k < n; ++k) {
        const float u = mlph_uniform(7, stream + i, 0, k);
        if (v.dtype == MLPH_DTYPE_I16) reinterpret_cast<int16_t*>(bytes.data())[k] = int16_t(u * 20);
        else if (v.dtype == MLPH_DTYPE_I32) reinterpret_cast<int32_t*>(bytes.data())[k] = int32_t(u * float(classes)) % classes;
        else reinterpret_cast<float*>(bytes.data())[k] = 2.0f * u - 1.0f;
      }
      tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, bytes.data()));
    }
  }
};

// Trains `steps` steps on both backends from the same weights; losses, gradients, weights and the
// first eval output must agree within `tolerance` (weights and outputs element-wise, relative with a
// floor for values near 0; gradients as whole vectors).
void expect_same_training(const MLPH_Graph* g, int steps, double lr, double tolerance, double floor = 1e-3) {
  Compiled ours(onednn(), g), theirs(reference(), g);
  for (int s = 0; s < steps; ++s) {
    Inputs in(*g, uint64_t(100 * s));
    const double a = ours.train(in.tensors, lr, uint64_t(s)), b = theirs.train(in.tensors, lr, uint64_t(s));
    EXPECT_NEAR(a, b, tolerance * (floor + std::fabs(b))) << "loss at step " << s;
    for (size_t p = 0; p < g->n_params; ++p) {
      const MLPH_Value& v = g->values[g->params[p].value];
      if (g->params[p].flags & MLPH_PARAM_TRAINABLE) {
        EXPECT_LT(norm_relative(ours.read(p, v, true), theirs.read(p, v, true)), tolerance)
            << "gradient of " << v.name << " at step " << s;
      }
      EXPECT_LT(worst_relative(ours.read(p, v), theirs.read(p, v), floor), tolerance)
          << "parameter " << v.name << " after step " << s;
    }
  }
  if (g->n_eval_outputs) {
    Inputs in(*g, 999);
    const MLPH_Value& out = g->values[g->eval_outputs[0]];
    EXPECT_LT(worst_relative(ours.eval(in.tensors, out), theirs.eval(in.tensors, out), floor), tolerance);
  }
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

}  // namespace
}  // namespace mlph::onednn::test
