#include "accumulation.hpp"

#include <fmt/format.h>

#include <memory>

#include "mlph/core/host.hpp"
#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/graph.hpp"

namespace mlph::conformance {
namespace {

constexpr int64_t kBatch = 4, kIn = 6, kHidden = 8, kOut = 3;
constexpr int kWindow = 2, kUpdates = 2;
constexpr double kLearningRate = 0.05;

struct Weights {
  std::vector<float> w1, b1, w2, b2;
};

std::vector<float> uniform(size_t n, uint64_t seed, uint64_t stream, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2 * mlph_uniform(seed, stream, 0, i) - 1);
  return v;
}

// The graph for micro-batches of `batch` samples in windows of `window`.
std::unique_ptr<sdk::GraphBuilder> make_graph(int64_t batch, int window, const Weights& w) {
  auto g = std::make_unique<sdk::GraphBuilder>();
  const int32_t x = g->value("x", MLPH_DTYPE_F32, {batch, kIn}), target = g->value("target", MLPH_DTYPE_F32, {batch, kOut});
  const int32_t w1 = g->value("w1", MLPH_DTYPE_F32, {kIn, kHidden}), b1 = g->value("b1", MLPH_DTYPE_F32, {kHidden});
  const int32_t w2 = g->value("w2", MLPH_DTYPE_F32, {kHidden, kOut}), b2 = g->value("b2", MLPH_DTYPE_F32, {kOut});
  g->parameter(w1, w.w1, 0.01, 1, MLPH_PARAM_TRAINABLE);  // l2: regularization joins once per update
  g->parameter(b1, w.b1, 0, 1, MLPH_PARAM_TRAINABLE);
  g->parameter(w2, w.w2, 0, 1, MLPH_PARAM_TRAINABLE);
  g->parameter(b2, w.b2, 0, 1, MLPH_PARAM_TRAINABLE);
  const int32_t h = g->value("h", MLPH_DTYPE_F32, {batch, kHidden}), a = g->value("a", MLPH_DTYPE_F32, {batch, kHidden});
  const int32_t y = g->value("y", MLPH_DTYPE_F32, {batch, kOut}), loss = g->value("loss", MLPH_DTYPE_F32, {});
  g->node("dense", "dense1", {x, w1, b1}, {h});
  g->node("tanh", "tanh", {h}, {a});
  g->node("dense", "dense2", {a, w2, b2}, {y});
  g->node("mse", "mse", {y, target}, {loss});
  int32_t objective = loss;
  if (window > 1) {
    objective = g->value("loss.per_window", MLPH_DTYPE_F32, {});
    g->node("scale", "per_window", {loss}, {objective}, {{"factor", 1.0 / window}});
  }
  g->inputs({x, target});
  g->loss(objective);
  g->eval_outputs({y});
  g->optimizer("sgd_keras", {{"momentum", 0.9}});
  g->seed(1);
  return g;
}

// A compiled model with its inputs.
class Trainer {
 public:
  Trainer(const LoadedBackend& backend, const MLPH_Graph& graph)
      : backend_(backend), graph_(graph), model_(compile_model(backend, graph)) {}
  double step(std::vector<HostTensor>& inputs, const MLPH_StepArgs& args) {
    std::vector<MLPH_Tensor> in;
    for (HostTensor& t : inputs) in.push_back(t.view());
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(backend_.api()->train_step(model_.get(), in.data(), in.size(), &args, &result),
                fmt::format("train_step (micro-batch {})", args.micro_step));
    return result.loss;
  }
  std::vector<HostTensor> read(bool gradients) {
    std::vector<HostTensor> out;
    for (size_t p = 0; p < graph_.n_params; ++p) {
      HostTensor& t = out.emplace_back(HostTensor::like(graph_.values[graph_.params[p].value]));
      MLPH_Tensor view = t.view();
      core::check(gradients ? backend_.api()->read_gradient(model_.get(), p, &view)
                            : backend_.api()->read_parameter(model_.get(), p, &view),
                  (gradients ? "read_gradient of '" : "read_parameter of '") + t.name + "'");
    }
    return out;
  }

 private:
  const LoadedBackend& backend_;
  const MLPH_Graph& graph_;
  core::Owned<MLPH_Model> model_;
};

// Rows [first, first + count) of a [kBatch, cols] tensor.
HostTensor rows(const HostTensor& t, int64_t first, int64_t count) {
  const int64_t cols = t.shape[1];
  HostTensor part = HostTensor::zeros(t.name, t.dtype, {count, cols});
  std::copy(t.as<float>() + first * cols, t.as<float>() + (first + count) * cols, part.as<float>());
  return part;
}

double worst_error(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected) {
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, relative_error(actual[i], expected[i]));
  return worst;
}

// Each parameter's change since `initial`: the weights themselves would hide a wrong small update.
std::vector<HostTensor> changes(std::vector<HostTensor> now, const std::vector<HostTensor>& initial) {
  for (size_t p = 0; p < now.size(); ++p)
    for (size_t i = 0; i < now[p].numel(); ++i) now[p].as<float>()[i] -= initial[p].as<float>()[i];
  return now;
}

bool bitwise_equal(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes) return false;
  return true;
}

}  // namespace

Row check_accumulation(const LoadedBackend& backend, double tolerance, uint64_t seed) {
  Row row("accumulation",
          fmt::format("{} updates of {} micro-batches of {} vs batch {}: dense, tanh, dense, mse, l2, sgd momentum",
                      kUpdates, kWindow, kBatch / kWindow, kBatch),
          tolerance);
  const Weights w{uniform(kIn * kHidden, seed, 1, 0.5f), uniform(kHidden, seed, 2, 0.1f),
                  uniform(kHidden * kOut, seed, 3, 0.5f), uniform(kOut, seed, 4, 0.1f)};
  std::vector<HostTensor> whole = {HostTensor::zeros("x", MLPH_DTYPE_F32, {kBatch, kIn}),
                                   HostTensor::zeros("target", MLPH_DTYPE_F32, {kBatch, kOut})};
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<float> values = uniform(whole[i].numel(), seed, 10 + i, 1.0f);
    std::copy(values.begin(), values.end(), whole[i].as<float>());
  }
  try {
    const auto batch_graph = make_graph(kBatch, 1, w), micro_graph = make_graph(kBatch / kWindow, kWindow, w);
    Trainer one(backend, *batch_graph->graph()), split(backend, *micro_graph->graph());
    const std::vector<HostTensor> initial = split.read(false);
    HostTensor expected_loss = HostTensor::zeros("loss", MLPH_DTYPE_F64, {kUpdates});
    HostTensor actual_loss = HostTensor::zeros("loss", MLPH_DTYPE_F64, {kUpdates});
    std::vector<HostTensor> expected_grad, actual_grad;
    for (int u = 0; u < kUpdates; ++u) {
      expected_loss.as<double>()[u] = one.step(whole, sdk::step_args(kLearningRate, u));
      if (u == 0) expected_grad = one.read(true);
      for (int k = 0; k < kWindow; ++k) {
        const int64_t micro = int64_t{u} * kWindow + k, per = kBatch / kWindow;
        std::vector<HostTensor> part = {rows(whole[0], k * per, per), rows(whole[1], k * per, per)};
        const bool apply = k == kWindow - 1;
        actual_loss.as<double>()[u] += split.step(part, sdk::step_args(kLearningRate, u, micro, apply));
        if (micro == 0 && !bitwise_equal(split.read(false), initial)) {
          row.verdict = Verdict::fail;
          row.reason = "the parameters moved on a micro-batch with apply_update 0";
          return row;
        }
      }
      if (u == 0) actual_grad = split.read(true);
    }
    row.forward = relative_error(actual_loss, expected_loss);
    row.gradient = worst_error(actual_grad, expected_grad);
    row.update = worst_error(changes(split.read(false), initial), changes(one.read(false), initial));
  } catch (const core::PluginError& e) {
    record_error(backend.name, e, row);
    return row;
  }
  for (const auto& [what, error] : {std::pair{"loss", row.forward}, {"gradient", row.gradient}, {"parameter", row.update}}) {
    if (*error <= tolerance) continue;
    row.verdict = Verdict::fail;
    row.reason += fmt::format("{}{} {:.1e}", row.reason.empty() ? "" : ", ", what, *error);
  }
  return row;
}

}  // namespace mlph::conformance
