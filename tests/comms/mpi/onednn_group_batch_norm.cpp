// SyncBatchNorm on onednn-cpu (mpirun -np 2): conv -> batch_norm -> relu (fused) -> conv -> batch_norm
// -> mse, both batch norms over a group of the 2 ranks, trained 2 steps on rank-dependent inputs.
// Checks, printing the figures: onednn-cpu equals the reference backend on every rank (loss,
// gradients, running statistics, weights); and the 2 ranks equal one rank holding both ranks'
// samples with group_size 1 (rank 0 trains it, without comms), while per-rank statistics
// (group_size 1 on each rank) are far from it. Channels 20 leave padding in blocked layouts.
// With `--time N H W C`: the seconds of a training step of x -> conv 1x1 -> batch_norm -> relu -> mse
// per rank, batch norm over group 1 and 2, less the same graph without the batch norm (the figures
// in backends/onednn-cpu/README.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend.hpp"  // the reference backend
#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "onednn_backend.hpp"

using namespace mlph;

namespace {

constexpr int64_t kLocalBatch = 2, kHeight = 5, kWidth = 7, kIn = 16, kMid = 20, kOut = 24;
constexpr int kSteps = 2;

std::vector<float> uniform(size_t n, uint64_t stream, float scale, float offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = offset + scale * (2.0f * mlph_uniform(11, stream, 0, i) - 1.0f);
  return v;
}

const MLPH_Graph* build(sdk::GraphBuilder& g, int64_t batch, int64_t group) {
  const auto value = [&](const std::string& name, std::vector<int64_t> shape) {
    return g.value(name, MLPH_DTYPE_F32, std::move(shape));
  };
  const int32_t x = value("x", {batch, kHeight, kWidth, kIn}), target = value("target", {batch, kHeight, kWidth, kOut});
  int32_t h = x;
  int64_t channels = kIn;
  std::vector<int32_t> params;
  for (int layer = 0; layer < 2; ++layer) {
    const int64_t out = layer == 0 ? kMid : kOut;
    const std::string l = std::to_string(layer);
    const int32_t w = value("w" + l, {1, 1, channels, out});
    const int32_t conv = value("conv" + l, {batch, kHeight, kWidth, out});
    g.node("conv", "conv" + l, {h, w}, {conv});
    g.parameter(w, uniform(size_t(channels * out), 10 + uint64_t(layer), 0.4f));
    const int32_t gamma = value("gamma" + l, {out}), beta = value("beta" + l, {out});
    const int32_t mean = value("running_mean" + l, {out}), var = value("running_var" + l, {out});
    const int32_t y = value("bn" + l, {batch, kHeight, kWidth, out});
    std::vector<sdk::AttrInit> attrs = {{"eps", 1e-3}, {"momentum", 0.3}};
    if (group > 1) attrs.push_back({"group_size", double(group)});
    g.node("batch_norm", "bn" + l, {conv, gamma, beta, mean, var}, {y}, std::move(attrs));
    g.parameter(gamma, uniform(size_t(out), 20 + uint64_t(layer), 0.5f, 1.0f));
    g.parameter(beta, uniform(size_t(out), 30 + uint64_t(layer), 0.5f));
    g.parameter(mean, std::vector<float>(size_t(out), 0.0f), 0.0, 1.0, 0);
    g.parameter(var, std::vector<float>(size_t(out), 1.0f), 0.0, 1.0, 0);
    h = y;
    if (layer == 0) {
      h = value("relu", {batch, kHeight, kWidth, out});
      g.node("relu", "relu", {y}, {h});
    }
    channels = out;
  }
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("mse", "mse", {h, target}, {loss});
  g.inputs({x, target});
  g.loss(loss);
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  return g.graph();
}

// Sample s of step `step`'s global batch: the same on every rank. Rank 1's samples sit around 3, rank
// 0's around 0, so that a group's statistics differ from each rank's own.
std::vector<float> sample(int step, int64_t s, size_t n, uint64_t input) {
  return uniform(n, 1000 * uint64_t(step) + 10 * uint64_t(s) + input, 1.0f, input == 0 && s >= kLocalBatch ? 3.0f : 0);
}

// Everything compared: the loss per step, then after the last step every parameter and every
// trainable parameter's gradient.
struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<float>> params, grads;
};

Trace train(const MLPH_BackendApi* api, const MLPH_Graph& graph, const MLPH_CommsHandle* comms, int64_t first) {
  const MLPH_KeyValue threads{"threads", "1"};
  MLPH_Backend* backend = nullptr;
  core::check(api->create(core::host_api(), &threads, 1, &backend), "create");
  MLPH_Model* model = nullptr;
  core::check(api->compile(backend, &graph, comms, &model), "compile");
  Trace t;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> data(graph.n_inputs);
    std::vector<MLPH_Tensor> inputs;
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      const MLPH_Value& v = graph.values[graph.inputs[i]];
      const size_t per_sample = size_t(sdk::numel(v) / v.shape[0]);
      for (int64_t s = 0; s < v.shape[0]; ++s) {
        const std::vector<float> one = sample(step, first + s, per_sample, i);
        data[i].insert(data[i].end(), one.begin(), one.end());
      }
      inputs.push_back(sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, data[i].data()));
    }
    const MLPH_StepArgs args = sdk::step_args(0.1, uint64_t(step));
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api->train_step(model, inputs.data(), inputs.size(), &args, &result), "train_step");
    t.losses.push_back(result.loss);
  }
  for (size_t p = 0; p < graph.n_params; ++p) {
    const MLPH_Value& v = graph.values[graph.params[p].value];
    std::vector<float> values(size_t(sdk::numel(v)));
    MLPH_Tensor tensor = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    core::check(api->read_parameter(model, p, &tensor), "read_parameter");
    t.params.push_back(values);
    if (!(graph.params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
    core::check(api->read_gradient(model, p, &tensor), "read_gradient");
    t.grads.push_back(values);
  }
  api->model_destroy(model);
  api->destroy(backend);
  return t;
}

// The largest relative difference between two traces: losses and parameters element-wise with a
// floor of 1e-3, gradients as whole vectors (||a - b|| / ||b||).
double difference(const Trace& a, const Trace& b) {
  double worst = 0;
  for (size_t s = 0; s < a.losses.size(); ++s)
    worst = std::max(worst, std::abs(a.losses[s] - b.losses[s]) / (1e-3 + std::abs(b.losses[s])));
  for (size_t p = 0; p < a.params.size(); ++p)
    for (size_t i = 0; i < a.params[p].size(); ++i)
      worst = std::max(worst, std::abs(double(a.params[p][i]) - b.params[p][i]) / (1e-3 + std::abs(double(b.params[p][i]))));
  for (size_t p = 0; p < a.grads.size(); ++p) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.grads[p].size(); ++i)
      diff += std::pow(double(a.grads[p][i]) - b.grads[p][i], 2), norm += std::pow(double(b.grads[p][i]), 2);
    worst = std::max(worst, std::sqrt(diff / std::max(norm, 1e-30)));
  }
  return worst;
}

// The trace as all ranks see it: losses averaged over the ranks (each rank's is the mean over its own
// samples). Gradients and parameters are already the same on every rank.
Trace averaged(core::Session& session, Trace t) {
  for (double& loss : t.losses)
    core::check(session.comms_api()->allreduce(session.comm(), &loss, 1, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE),
                "allreduce");
  return t;
}

// x [n, h, w, c] -> conv 1x1 -> (batch_norm over `group`, or none when group is 0) -> relu -> mse.
const MLPH_Graph* timing_graph(sdk::GraphBuilder& g, const std::vector<int64_t>& shape, int64_t group) {
  const int64_t c = shape.back();
  const int32_t x = g.value("x", MLPH_DTYPE_F32, shape), target = g.value("target", MLPH_DTYPE_F32, shape);
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {1, 1, c, c}), conv = g.value("conv", MLPH_DTYPE_F32, shape);
  g.node("conv", "conv", {x, w}, {conv});
  g.parameter(w, uniform(size_t(c * c), 1, 0.2f));
  int32_t h = conv;
  if (group > 0) {
    const int32_t gamma = g.value("gamma", MLPH_DTYPE_F32, {c}), beta = g.value("beta", MLPH_DTYPE_F32, {c});
    const int32_t mean = g.value("mean", MLPH_DTYPE_F32, {c}), var = g.value("var", MLPH_DTYPE_F32, {c});
    h = g.value("bn", MLPH_DTYPE_F32, shape);
    g.node("batch_norm", "bn", {conv, gamma, beta, mean, var}, {h}, {{"group_size", double(group)}});
    g.parameter(gamma, std::vector<float>(size_t(c), 1.0f));
    g.parameter(beta, std::vector<float>(size_t(c), 0.0f));
    g.parameter(mean, std::vector<float>(size_t(c), 0.0f), 0.0, 1.0, 0);
    g.parameter(var, std::vector<float>(size_t(c), 1.0f), 0.0, 1.0, 0);
  }
  const int32_t y = g.value("y", MLPH_DTYPE_F32, shape), loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("relu", "relu", {h}, {y});
  g.node("mse", "mse", {y, target}, {loss});
  g.inputs({x, target});
  g.loss(loss);
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  return g.graph();
}

// The fastest of 5 training steps (after one warm-up), in seconds, the ranks in step.
double step_seconds(core::Session& session, const MLPH_Graph& graph) {
  const MLPH_BackendApi* api = sdk::backend_api<onednn::OnednnBackend>();
  MLPH_Backend* backend = nullptr;
  core::check(api->create(core::host_api(), nullptr, 0, &backend), "create");
  MLPH_Model* model = nullptr;
  core::check(api->compile(backend, &graph, session.comms_handle(), &model), "compile");
  const MLPH_Value& v = graph.values[graph.inputs[0]];
  const std::vector<float> x = uniform(size_t(sdk::numel(v)), 1, 1.0f, 0.5f), target = uniform(x.size(), 2, 1.0f);
  std::vector<MLPH_Tensor> inputs = {sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, const_cast<float*>(x.data())),
                                     sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, const_cast<float*>(target.data()))};
  double best = 1e30;
  for (int step = 0; step < 6; ++step) {
    core::check(session.comms_api()->barrier(session.comm()), "barrier");
    const auto start = std::chrono::steady_clock::now();
    const MLPH_StepArgs args = sdk::step_args(0.01, uint64_t(step));
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api->train_step(model, inputs.data(), inputs.size(), &args, &result), "train_step");
    if (step > 0) best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  api->model_destroy(model);
  api->destroy(backend);
  return best;
}

int time_batch_norm(core::Session& session, const std::vector<int64_t>& shape) {
  double seconds[3];
  for (int64_t group = 0; group <= 2; ++group) {
    sdk::GraphBuilder g;
    seconds[group] = step_seconds(session, *timing_graph(g, shape, group));
  }
  if (session.topology().rank == 0)
    std::printf("x [%lld, %lld, %lld, %lld] per rank, 2 ranks: training step conv+relu %.4f s; batch norm adds "
                "%.4f s over group 1, %.4f s over group 2\n",
                static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), static_cast<long long>(shape[2]),
                static_cast<long long>(shape[3]), seconds[0], seconds[1] - seconds[0], seconds[2] - seconds[0]);
  return 0;
}

int run(const std::vector<std::string>& args) {
  core::RunOptions options;
  options.workload = "cosmoflow";  // only the comms are used; a session needs a workload
  options.comms = "mpi";
  options.division = "open";
  options.plugin_dirs = {MLPH_PLUGIN_DIR};
  core::Session session(options);
  const int rank = session.topology().rank;
  if (session.topology().size != 2) {
    std::fprintf(stderr, "run me under mpirun -np 2 (got %d ranks)\n", session.topology().size);
    return 2;
  }
  if (args.size() == 5 && args[0] == "--time")
    return time_batch_norm(session, {std::stoll(args[1]), std::stoll(args[2]), std::stoll(args[3]), std::stoll(args[4])});
  const MLPH_BackendApi* onednn = sdk::backend_api<onednn::OnednnBackend>();
  const MLPH_BackendApi* reference = sdk::backend_api<reference::ReferenceBackend>();
  sdk::GraphBuilder grouped_graph, apart_graph, whole_graph;
  const MLPH_Graph& grouped = *build(grouped_graph, kLocalBatch, 2);
  const MLPH_Graph& apart = *build(apart_graph, kLocalBatch, 1);
  const int64_t first = rank * kLocalBatch;
  const Trace ours = train(onednn, grouped, session.comms_handle(), first);
  const Trace theirs = train(reference, grouped, session.comms_handle(), first);
  const Trace ours_apart = averaged(session, train(onednn, apart, session.comms_handle(), first));
  const double vs_reference = difference(ours, theirs);
  int failures = vs_reference <= 2e-3 ? 0 : 1;
  std::printf("rank %d: onednn-cpu vs reference, group_size 2: max relative difference %.3g: %s\n", rank, vs_reference,
              failures ? "FAIL" : "equal");
  const Trace ours_averaged = averaged(session, ours);
  if (rank == 0) {
    const Trace whole = train(onednn, *build(whole_graph, 2 * kLocalBatch, 1), nullptr, 0);
    const double error = difference(ours_averaged, whole), apart_error = difference(ours_apart, whole);
    const bool ok = error <= 1e-4 && apart_error > 1e-2;
    std::printf("onednn-cpu: 2 ranks x %lld samples in one group vs 1 rank x %lld: max relative difference %.3g "
                "(per-rank statistics: %.3g): %s\n",
                static_cast<long long>(kLocalBatch), static_cast<long long>(2 * kLocalBatch), error, apart_error,
                ok ? "equal" : "FAIL");
    if (!ok) ++failures;
  }
  core::check(session.comms_api()->allreduce(session.comm(), &failures, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM),
              "allreduce");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run({argv + 1, argv + argc});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onednn_group_batch_norm: %s\n", e.what());
    return 1;
  }
}
