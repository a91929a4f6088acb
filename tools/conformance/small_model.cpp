#include "small_model.hpp"

#include <fmt/format.h>

#include "mlph/core/host.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::conformance::small {
namespace {

std::vector<float> uniform(size_t n, uint64_t seed, uint64_t stream, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2 * mlph_uniform(seed, stream, 0, i) - 1);
  return v;
}

}  // namespace

Weights random_weights(uint64_t seed) {
  return {uniform(kIn * kHidden, seed, 1, 0.5f), uniform(kHidden, seed, 2, 0.1f), uniform(kHidden * kOut, seed, 3, 0.5f),
          uniform(kOut, seed, 4, 0.1f)};
}

std::vector<HostTensor> random_batch(uint64_t seed) {
  std::vector<HostTensor> batch = {HostTensor::zeros("x", MLPH_DTYPE_F32, {kBatch, kIn}),
                                   HostTensor::zeros("target", MLPH_DTYPE_F32, {kBatch, kOut})};
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::vector<float> values = uniform(batch[i].numel(), seed, 10 + i, 1.0f);
    std::copy(values.begin(), values.end(), batch[i].as<float>());
  }
  return batch;
}

std::vector<HostTensor> rows(const std::vector<HostTensor>& batch, int64_t first, int64_t count) {
  std::vector<HostTensor> parts;
  for (const HostTensor& t : batch) {
    const int64_t cols = t.shape[1];
    HostTensor& part = parts.emplace_back(HostTensor::zeros(t.name, t.dtype, {count, cols}));
    std::copy(t.as<float>() + first * cols, t.as<float>() + (first + count) * cols, part.as<float>());
  }
  return parts;
}

Optimizer sgd_momentum() { return {"sgd_keras", {{"momentum", 0.9}}}; }

std::unique_ptr<sdk::GraphBuilder> make_graph(int64_t batch, int window, const Weights& w, const Optimizer& optimizer) {
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
  g->optimizer(optimizer.name, optimizer.attrs);
  g->seed(1);
  return g;
}

Trainer::Trainer(const LoadedBackend& backend, const MLPH_Graph& graph)
    : backend_(backend), graph_(graph), model_(compile_model(backend, graph)) {}

double Trainer::step(std::vector<HostTensor>& inputs, const MLPH_StepArgs& args) {
  std::vector<MLPH_Tensor> in;
  for (HostTensor& t : inputs) in.push_back(t.view());
  MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
  core::check(backend_.api()->train_step(model_.get(), in.data(), in.size(), &args, &result),
              fmt::format("train_step (micro-batch {})", args.micro_step));
  return result.loss;
}

std::vector<HostTensor> Trainer::parameters() const { return read(Kind::parameter, ""); }
std::vector<HostTensor> Trainer::gradients() const { return read(Kind::gradient, ""); }
std::vector<HostTensor> Trainer::state(const std::string& slot) const { return read(Kind::state, slot); }
void Trainer::set_parameters(std::vector<HostTensor> values) { write(Kind::parameter, "", values); }
void Trainer::set_state(const std::string& slot, std::vector<HostTensor> values) { write(Kind::state, slot, values); }

// Every parameter's value or gradient, or state slot `slot` of every trainable parameter.
std::vector<HostTensor> Trainer::read(Kind kind, const std::string& slot) const {
  const MLPH_BackendApi* api = backend_.api();
  std::vector<HostTensor> out;
  for (size_t p = 0; p < graph_.n_params; ++p) {
    if (kind == Kind::state && !(graph_.params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
    HostTensor& t = out.emplace_back(HostTensor::like(graph_.values[graph_.params[p].value]));
    MLPH_Tensor view = t.view();
    switch (kind) {
      case Kind::parameter:
        core::check(api->read_parameter(model_.get(), p, &view), "read_parameter of '" + t.name + "'");
        break;
      case Kind::gradient:
        core::check(api->read_gradient(model_.get(), p, &view), "read_gradient of '" + t.name + "'");
        break;
      case Kind::state:
        core::check(api->read_state(model_.get(), p, slot.c_str(), &view),
                    "read_state '" + slot + "' of '" + t.name + "'");
        break;
    }
  }
  return out;
}

void Trainer::write(Kind kind, const std::string& slot, std::vector<HostTensor>& values) {
  const MLPH_BackendApi* api = backend_.api();
  auto value = values.begin();
  for (size_t p = 0; p < graph_.n_params; ++p) {
    if (kind == Kind::state && !(graph_.params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
    MLPH_Tensor view = value->view();
    if (kind == Kind::parameter)
      core::check(api->write_parameter(model_.get(), p, &view), "write_parameter of '" + value->name + "'");
    else
      core::check(api->write_state(model_.get(), p, slot.c_str(), &view),
                  "write_state '" + slot + "' of '" + value->name + "'");
    ++value;
  }
}

double worst_error(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected) {
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, relative_error(actual[i], expected[i]));
  return worst;
}

bool bitwise_equal(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes) return false;
  return true;
}

}  // namespace mlph::conformance::small
