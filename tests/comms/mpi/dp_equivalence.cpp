// Data parallelism is exact: on 2 ranks (mpirun -np 2), CosmoFlow (32^3, dropout 0) trained for a
// few steps with batch b per rank ends with the same weights as 1 rank with batch 2b on the same
// samples (rank 0 trains that model too, without comms). Prints the figures; exits non-zero if the
// weights differ beyond float tolerance or the replicas are not bitwise identical. Then the same
// with gradient accumulation (2 micro-batches of 1 per rank and update), batch norm over both
// ranks (SyncBatchNorm) against one rank with both batches, and the per-epoch averaging of
// BatchNorm running statistics on a one-node graph.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"

using namespace mlph;
using namespace mlph::core;

namespace {

constexpr uint32_t kLocalBatch = 2;
constexpr int kSteps = 4;
constexpr double kLearningRate = 0.01;

// Sample `s` of the global batch, the same on every rank: element j of input i from a fixed stream.
void fill_sample(const MLPH_Value& v, uint64_t input, uint64_t s, std::byte* dst) {
  const int64_t per_sample = sdk::numel(v) / v.shape[0];
  for (int64_t j = 0; j < per_sample; ++j) {
    const float u = mlph_uniform(99, input, s, static_cast<uint64_t>(j));
    if (v.dtype == MLPH_DTYPE_I16)
      reinterpret_cast<int16_t*>(dst)[j] = static_cast<int16_t>(u * 40);
    else
      reinterpret_cast<float*>(dst)[j] = u;
  }
}

// Trains `model` (compiled from `graph`) on global samples [first, first + window * batch) of every
// step, in `window` micro-batches of the graph's batch whose gradients accumulate into one update.
// The graph's loss is a mean over its batch, so the window's gradients add up to `window` times the
// mean: the learning rate is divided by it (exact with SGD: no l2 here).
std::vector<double> train(const MLPH_BackendApi* api, MLPH_Model* model, const MLPH_Graph& graph, uint64_t first,
                          int window = 1) {
  std::vector<double> losses;
  for (int micro = 0; micro < kSteps * window; ++micro) {
    const int step = micro / window;
    std::vector<std::vector<std::byte>> buffers;
    std::vector<MLPH_Tensor> inputs;
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      const MLPH_Value& v = graph.values[graph.inputs[i]];
      const size_t sample_bytes = static_cast<size_t>(sdk::numel(v) / v.shape[0]) * mlph_dtype_size(v.dtype);
      buffers.emplace_back(sample_bytes * static_cast<size_t>(v.shape[0]));
      for (int64_t s = 0; s < v.shape[0]; ++s)
        fill_sample(v, i, static_cast<uint64_t>(step) * 1000 + first + static_cast<uint64_t>((micro % window) * v.shape[0] + s),
                    buffers.back().data() + static_cast<size_t>(s) * sample_bytes);
    }
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      const MLPH_Value& v = graph.values[graph.inputs[i]];
      inputs.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, buffers[i].data()));
    }
    const MLPH_StepArgs args = mlph::sdk::step_args(kLearningRate / window, static_cast<uint64_t>(step),
                                                    static_cast<uint64_t>(micro), (micro + 1) % window == 0);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    check(api->train_step(model, inputs.data(), inputs.size(), &args, &result), "train_step");
    if (micro % window == 0) losses.push_back(0);
    losses.back() += result.loss / window;
  }
  return losses;
}

struct Shape {
  std::vector<int64_t> dims;
  size_t numel() const { return static_cast<size_t>(sdk::numel(dims.data(), static_cast<int32_t>(dims.size()))); }
};

std::vector<Shape> parameter_shapes(const MLPH_Graph& graph) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Value& v = graph.values[graph.params[i].value];
    shapes.push_back({{v.shape, v.shape + v.ndim}});
  }
  return shapes;
}

std::vector<std::vector<float>> weights(const MLPH_BackendApi* api, MLPH_Model* model,
                                        const std::vector<Shape>& shapes) {
  std::vector<std::vector<float>> all;
  for (size_t i = 0; i < shapes.size(); ++i) {
    all.emplace_back(shapes[i].numel());
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, shapes[i].dims.data(), static_cast<int32_t>(shapes[i].dims.size()),
                                     all.back().data());
    check(api->read_parameter(model, i, &t), "read_parameter");
  }
  return all;
}

// Gradient accumulation across ranks: 2 ranks x 2 micro-batches of 1 per update must match 1 rank x
// batch 4 (`reference`, rank 0 only), with the allreduce deferred to each window's last micro-batch.
int check_accumulation(Session& session, const std::vector<Shape>& shapes,
                       const std::vector<std::vector<float>>& reference, const std::vector<double>& reference_losses) {
  const MLPH_Graph* graph = nullptr;
  check(session.workload_api()->build_graph(session.workload(), 1, session.seed(), &graph), "build_graph");
  auto model = session.compile(*graph);
  std::vector<double> losses = train(session.backend_api(), model.get(), *graph,
                                     static_cast<uint64_t>(session.topology().rank) * kLocalBatch, kLocalBatch);
  for (double& loss : losses)
    check(session.comms_api()->allreduce(session.comm(), &loss, 1, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE), "allreduce");
  const std::vector<std::vector<float>> mine = weights(session.backend_api(), model.get(), shapes);
  if (session.topology().rank != 0) return 0;
  double max_diff = 0, max_weight = 0, max_loss_diff = 0;
  for (size_t p = 0; p < reference.size(); ++p)
    for (size_t i = 0; i < reference[p].size(); ++i) {
      max_diff = std::max(max_diff, std::abs(double{mine[p][i]} - reference[p][i]));
      max_weight = std::max(max_weight, std::abs(double{reference[p][i]}));
    }
  for (size_t s = 0; s < losses.size(); ++s)
    max_loss_diff = std::max(max_loss_diff, std::abs(losses[s] - reference_losses[s]) / std::abs(reference_losses[s]));
  const double tolerance = 1e-5 * std::max(1.0, max_weight);
  const bool ok = max_diff <= tolerance && max_loss_diff <= 1e-5;
  std::printf("accumulation: 2 ranks x 2 micro-batches of 1 vs 1 rank x batch %u: max |w diff| = %.3g, "
              "max relative loss diff = %.3g: %s\n",
              2 * kLocalBatch, max_diff, max_loss_diff, ok ? "equal" : "FAIL");
  return ok ? 0 : 1;
}

// Ends a graph whose input is `x` with h -> batch_norm (over `group` ranks; running statistics 0 and 1,
// state) -> mse against a second input, `target`, shaped like h; SGD without momentum. The batch
// norm's parameters follow those added before: gamma, beta, running mean, running var.
void batch_norm_mse(sdk::GraphBuilder& g, int32_t x, int32_t h, std::vector<float> gamma, std::vector<float> beta,
                    int64_t group = 1) {
  const MLPH_Value& info = g.value_info(h);
  const std::vector<int64_t> shape(info.shape, info.shape + info.ndim);
  const int64_t c = shape.back();
  const int32_t target = g.value("target", MLPH_DTYPE_F32, shape);
  const int32_t gamma_v = g.value("gamma", MLPH_DTYPE_F32, {c}), beta_v = g.value("beta", MLPH_DTYPE_F32, {c});
  const int32_t mean = g.value("running_mean", MLPH_DTYPE_F32, {c}), var = g.value("running_var", MLPH_DTYPE_F32, {c});
  const int32_t y = g.value("y", MLPH_DTYPE_F32, shape), loss = g.value("loss", MLPH_DTYPE_F32, {});
  std::vector<sdk::AttrInit> attrs = {{"eps", 1e-5}, {"momentum", 0.1}};
  if (group > 1) attrs.push_back({"group_size", static_cast<double>(group)});
  g.node("batch_norm", "bn", {h, gamma_v, beta_v, mean, var}, {y}, std::move(attrs));
  g.node("mse", "mse", {y, target}, {loss});
  g.parameter(gamma_v, std::move(gamma));
  g.parameter(beta_v, std::move(beta));
  g.parameter(mean, std::vector<float>(static_cast<size_t>(c), 0.0f), 0.0, 1.0, 0);
  g.parameter(var, std::vector<float>(static_cast<size_t>(c), 1.0f), 0.0, 1.0, 0);
  g.inputs({x, target});
  g.loss(loss);
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
}

// dense -> batch_norm -> mse on rows [first, first + rows) of a fixed [8, 3] input, the batch norm over
// `group` ranks; returns w's gradient, then the running mean and var, after one step.
std::vector<float> dense_batch_norm_step(Session& session, int64_t rows, int64_t first, int64_t group, bool alone) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {rows, 3});
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {3, 3}), h = g.value("h", MLPH_DTYPE_F32, {rows, 3});
  g.node("dense", "dense", {x, w}, {h});
  g.parameter(w, {0.5f, -0.2f, 0.1f, 0.3f, 0.8f, -0.4f, -0.6f, 0.2f, 0.9f});
  batch_norm_mse(g, x, h, {1.0f, 1.5f, 0.5f}, {0.0f, 0.1f, -0.1f}, group);
  const MLPH_Graph& graph = *g.graph();
  MLPH_Model* raw = nullptr;
  if (alone) check(session.backend_api()->compile(session.backend(), &graph, nullptr, &raw), "compile");
  Owned<MLPH_Model> model = alone ? Owned<MLPH_Model>(raw, session.backend_api()->model_destroy) : session.compile(graph);
  std::vector<float> xs, targets;
  for (int64_t i = 3 * first; i < 3 * (first + rows); ++i) {
    xs.push_back(static_cast<float>((i * 7) % 11) - 4.0f + 10.0f * static_cast<float>(i >= 12));  // ranks differ
    targets.push_back(static_cast<float>(i % 5) * 0.3f);
  }
  const int64_t shape[2] = {rows, 3};
  MLPH_Tensor inputs[2] = {sdk::host_tensor(MLPH_DTYPE_F32, shape, 2, xs.data()),
                           sdk::host_tensor(MLPH_DTYPE_F32, shape, 2, targets.data())};
  const MLPH_StepArgs args = mlph::sdk::step_args(0.1, 0);
  MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
  check(session.backend_api()->train_step(model.get(), inputs, 2, &args, &result), "train_step");
  std::vector<float> out(9 + 6);
  const int64_t w_shape[2] = {3, 3}, c_shape[1] = {3};
  MLPH_Tensor grad = sdk::host_tensor(MLPH_DTYPE_F32, w_shape, 2, out.data());
  check(session.backend_api()->read_gradient(model.get(), 0, &grad), "read_gradient");
  for (size_t p = 3; p < 5; ++p) {
    MLPH_Tensor stat = sdk::host_tensor(MLPH_DTYPE_F32, c_shape, 1, out.data() + 9 + 3 * (p - 3));
    check(session.backend_api()->read_parameter(model.get(), p, &stat), "read_parameter");
  }
  return out;
}

// SyncBatchNorm: 2 ranks x 4 rows with one batch-norm group of 2 compute what 1 rank x 8 rows does:
// the running statistics (mean and unbiased var over all 8) and the averaged gradient of the weight
// before the batch norm (the input gradient uses the group's sums).
int check_group_batch_norm(Session& session) {
  const int64_t rank = session.topology().rank;
  const std::vector<float> grouped = dense_batch_norm_step(session, 4, 4 * rank, 2, false);
  const std::vector<float> apart = dense_batch_norm_step(session, 4, 4 * rank, 1, false);  // per-rank statistics
  if (rank != 0) return 0;
  const std::vector<float> whole = dense_batch_norm_step(session, 8, 0, 1, true);
  double error = 0, apart_error = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    const double scale = 1e-6 + std::abs(double{whole[i]});
    error = std::max(error, std::abs(double{grouped[i]} - whole[i]) / scale);
    apart_error = std::max(apart_error, std::abs(double{apart[i]} - whole[i]) / scale);
  }
  const bool ok = error <= 1e-5 && apart_error > 1e-2;
  std::printf("group batch norm: 2 ranks x 4 rows in one group vs 1 rank x 8 rows: max relative difference %.3g "
              "(per-rank statistics: %.3g): %s\n",
              error, apart_error, ok ? "equal" : "FAIL");
  return ok ? 0 : 1;
}

// A batch_norm trained one step on rank-dependent data: its running statistics differ between the
// ranks until Session::average_non_trainable makes them the mean of both.
int check_running_statistics_average(Session& session) {
  const float rank = static_cast<float>(session.topology().rank);
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 4, 3});
  batch_norm_mse(g, x, x, {1, 1, 1}, {0, 0, 0});
  const MLPH_Graph& graph = *g.graph();
  auto model = session.compile(graph);
  std::vector<float> xs(24), targets(24, 0.5f);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) * (1 + 3 * rank) + 10 * rank;
  const int64_t shape[3] = {2, 4, 3};
  MLPH_Tensor inputs[2] = {sdk::host_tensor(MLPH_DTYPE_F32, shape, 3, xs.data()),
                           sdk::host_tensor(MLPH_DTYPE_F32, shape, 3, targets.data())};
  const MLPH_StepArgs args = mlph::sdk::step_args(0.1, 0);
  MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
  check(session.backend_api()->train_step(model.get(), inputs, 2, &args, &result), "train_step");

  const std::vector<Shape> shapes = parameter_shapes(graph);
  const auto stats = [&] {  // running mean then running var, 6 floats
    const auto w = weights(session.backend_api(), model.get(), shapes);
    std::vector<float> both = w[2];
    both.insert(both.end(), w[3].begin(), w[3].end());
    return both;
  };
  const std::vector<float> mine = stats();
  std::vector<float> all(12);
  check(session.comms_api()->allgather(session.comm(), mine.data(), all.data(), 6 * sizeof(float)), "allgather");
  session.average_non_trainable(model.get(), graph);
  const std::vector<float> averaged = stats();
  int failures = 0;
  double spread = 0;
  for (size_t i = 0; i < 6; ++i) {
    spread = std::max(spread, std::abs(double{all[i]} - all[6 + i]));
    if (!(std::abs(averaged[i] - 0.5f * (all[i] + all[6 + i])) <= 1e-6f * (1 + std::abs(averaged[i])))) ++failures;
  }
  if (spread < 0.1) ++failures;  // the ranks' statistics must have differed for the check to mean anything
  std::printf("rank %d: BN running statistics up to %.4g apart between the ranks; after averaging: %s\n",
              session.topology().rank, spread, failures ? "NOT the mean of both" : "the mean of both");
  return failures;
}

int run() {
  RunOptions options;
  options.workload = "cosmoflow";
  options.comms = "mpi";
  options.division = "open";
  options.seed = 4321;
  options.plugin_dirs = {MLPH_PLUGIN_DIR};
  options.sets = {"data.edge=32", "model.dropout=0", "train.batch_size=" + std::to_string(kLocalBatch)};
  Session session(options);
  const MLPH_Topology& topology = session.topology();
  if (topology.size != 2) {
    std::fprintf(stderr, "run me under mpirun -np 2 (got %d ranks)\n", topology.size);
    return 2;
  }
  const MLPH_WorkloadApi* workload = session.workload_api();
  const MLPH_BackendApi* backend = session.backend_api();

  const MLPH_Graph* graph = nullptr;
  check(workload->build_graph(session.workload(), kLocalBatch, session.seed(), &graph), "build_graph");
  const std::vector<Shape> shapes = parameter_shapes(*graph);
  auto parallel = session.compile(*graph);  // gets the comms handle: averages gradients over the 2 ranks
  const std::vector<std::vector<float>> initial = weights(backend, parallel.get(), shapes);
  std::vector<double> losses =
      train(backend, parallel.get(), *graph, static_cast<uint64_t>(topology.rank) * kLocalBatch);
  for (double& loss : losses)
    check(session.comms_api()->allreduce(session.comm(), &loss, 1, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE), "allreduce");
  std::vector<std::vector<float>> mine = weights(backend, parallel.get(), shapes);

  // The replicas must be bitwise identical: compare with rank 0's.
  bool replicas_equal = true;
  for (auto& w : mine) {
    std::vector<float> theirs = w;
    check(session.comms_api()->broadcast(session.comm(), theirs.data(), theirs.size() * sizeof(float), 0), "broadcast");
    replicas_equal = replicas_equal && theirs == w;
  }
  int failures = replicas_equal ? 0 : 1;
  std::printf("rank %d: replica weights %s rank 0's\n", topology.rank,
              replicas_equal ? "bitwise equal to" : "DIFFER from");

  std::vector<std::vector<float>> reference;  // rank 0: 1 rank x batch 4
  std::vector<double> single_losses;
  if (topology.rank == 0) {
    const MLPH_Graph* whole = nullptr;
    check(workload->build_graph(session.workload(), 2 * kLocalBatch, session.seed(), &whole), "build_graph");
    MLPH_Model* raw = nullptr;
    check(backend->compile(session.backend(), whole, nullptr, &raw), "compile");
    Owned<MLPH_Model> single(raw, backend->model_destroy);
    single_losses = train(backend, single.get(), *whole, 0);
    reference = weights(backend, single.get(), shapes);
    double max_diff = 0, max_moved = 0, max_weight = 0;
    for (size_t p = 0; p < reference.size(); ++p)
      for (size_t i = 0; i < reference[p].size(); ++i) {
        max_diff = std::max(max_diff, std::abs(double{mine[p][i]} - reference[p][i]));
        max_moved = std::max(max_moved, std::abs(double{reference[p][i]} - initial[p][i]));
        max_weight = std::max(max_weight, std::abs(double{reference[p][i]}));
      }
    for (int s = 0; s < kSteps; ++s)
      std::printf("step %d: loss 2 ranks x batch %u = %.9f, 1 rank x batch %u = %.9f\n", s + 1, kLocalBatch,
                  losses[static_cast<size_t>(s)], 2 * kLocalBatch, single_losses[static_cast<size_t>(s)]);
    std::printf(
        "after %d steps (lr %g): max |w_2ranks - w_1rank| = %.3g; the weights moved up to %.3g from init; max |w| = "
        "%.3g\n",
        kSteps, kLearningRate, max_diff, max_moved, max_weight);
    // Only the order of float sums differs (two means of b vs one mean of 2b).
    const double tolerance = 1e-5 * std::max(1.0, max_weight);
    if (!(max_diff <= tolerance) || !(max_moved > 100 * tolerance)) {
      std::printf("FAIL: tolerance %.3g\n", tolerance);
      ++failures;
    }
    for (int s = 0; s < kSteps; ++s)
      if (!(std::abs(losses[static_cast<size_t>(s)] - single_losses[static_cast<size_t>(s)]) <=
            1e-5 * std::abs(single_losses[static_cast<size_t>(s)]))) {
        std::printf("FAIL: the losses of step %d differ\n", s + 1);
        ++failures;
      }
  }
  failures += check_accumulation(session, shapes, reference, single_losses);
  failures += check_group_batch_norm(session);
  failures += check_running_statistics_average(session);
  int total = failures;
  check(session.comms_api()->allreduce(session.comm(), &total, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM), "allreduce");
  return total == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_equivalence: %s\n", e.what());
    return 1;
  }
}
