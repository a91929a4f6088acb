// Spatial parallelism is exact: under mpirun, CosmoFlow (dropout 0) split over a grid of ranks per
// sample (parallel.spatial) takes the same training steps as one rank holding whole samples, from
// the same seed and weights: each sample group's batch of b, every rank fed its part of each sample
// (the runner's part_offsets), against one rank with the batches of all groups. Over 4 steps, each
// from the same weights: the losses (forward), the gradients the update used (backward, halos and
// gather included, averaged over the ranks) and the weights after the update. Every case is
// "edge:grid:backend", e.g. 64:2x1x1:onednn-cpu; the grid's ranks must divide the job's. Prints the
// figures; exits non-zero if any differ beyond the 2-rank data-parallel test's bounds (1e-5 relative
// loss, 1e-5 of the largest weight; gradients 1e-5 of the largest), if the ranks' weights are not
// bitwise identical, or if the weights did not move (a vacuous check).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "mlph/core/data_pipeline.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"

using namespace mlph;
using namespace mlph::core;
using sdk::spatial::Dims;

namespace {

constexpr uint32_t kBatch = 2;  // per sample group
constexpr int kSteps = 4;
constexpr double kLearningRate = 0.01;

struct Case {
  int edge;
  std::string grid, backend;
};

Case parse_case(const std::string& text) {
  const size_t a = text.find(':'), b = text.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos) throw std::runtime_error("bad case '" + text + "'");
  return {std::stoi(text.substr(0, a)), text.substr(a + 1, b - a - 1), text.substr(b + 1)};
}

std::unique_ptr<Session> session(const Case& c, const std::string& grid, uint32_t batch) {
  RunOptions options;
  options.workload = "cosmoflow";
  options.comms = "mpi";
  options.backend = c.backend;
  options.division = "open";
  options.seed = 4321;
  options.plugin_dirs = {MLPH_PLUGIN_DIR};
  options.sets = {"data.edge=" + std::to_string(c.edge), "model.dropout=0", "train.batch_size=" + std::to_string(batch),
                  "parallel.spatial=" + grid, "backend.threads=1"};
  return std::make_unique<Session>(options);
}

// Element j of input i of global sample s, the same on every rank: int16 counts for x, floats for y.
void fill_whole(const MLPH_Value& v, uint64_t input, uint64_t s, std::vector<std::byte>& out) {
  const int64_t per_sample = sdk::numel(v) / v.shape[0];
  out.resize(static_cast<size_t>(per_sample) * mlph_dtype_size(v.dtype));
  for (int64_t j = 0; j < per_sample; ++j) {
    const float u = mlph_uniform(99, input, s, static_cast<uint64_t>(j));
    if (v.dtype == MLPH_DTYPE_I16)
      reinterpret_cast<int16_t*>(out.data())[j] = static_cast<int16_t>(u * 40);
    else
      reinterpret_cast<float*>(out.data())[j] = 2 * u - 1;
  }
}

// The inputs of one step: samples [first, first + batch) of the step, each cut to `part` (empty: whole).
// `whole` holds the whole samples' shapes (the graph of one rank with whole samples).
std::vector<std::vector<std::byte>> step_inputs(const MLPH_Graph& graph, const MLPH_Graph& whole, int step,
                                                uint64_t first, const PartOffsets& part) {
  std::vector<std::vector<std::byte>> buffers;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& mine = graph.values[graph.inputs[i]];
    const MLPH_Value& full = whole.values[whole.inputs[i]];
    const size_t item = mlph_dtype_size(mine.dtype);
    Dims sample_shape(full.shape + 1, full.shape + full.ndim), part_shape(mine.shape + 1, mine.shape + mine.ndim);
    Dims at(sample_shape.size(), 0);
    for (size_t d = 0; d < at.size() && !part.empty(); ++d) at[d] = part[i * MLPH_MAX_DIMS + d + 1];
    std::vector<std::byte>& out = buffers.emplace_back(static_cast<size_t>(sdk::numel(mine)) * item);
    const size_t part_bytes = out.size() / static_cast<size_t>(mine.shape[0]);
    std::vector<std::byte> sample;
    for (int64_t s = 0; s < mine.shape[0]; ++s) {
      fill_whole(full, i, static_cast<uint64_t>(step) * 1000 + first + static_cast<uint64_t>(s), sample);
      std::byte* dst = out.data() + static_cast<size_t>(s) * part_bytes;
      if (mine.dtype == MLPH_DTYPE_I16)
        sdk::spatial::copy_box(reinterpret_cast<const int16_t*>(sample.data()), {sample_shape, at},
                               reinterpret_cast<int16_t*>(dst), {part_shape, Dims(part_shape.size(), 0)}, part_shape);
      else
        sdk::spatial::copy_box(reinterpret_cast<const float*>(sample.data()), {sample_shape, at},
                               reinterpret_cast<float*>(dst), {part_shape, Dims(part_shape.size(), 0)}, part_shape);
    }
  }
  return buffers;
}

// A compiled model and what it trains on: the samples of each step from `first` on, cut to `part`.
class Trainee {
 public:
  Trainee(const MLPH_BackendApi* api, MLPH_Model* model, const MLPH_Graph& graph, const MLPH_Graph& whole,
          uint64_t first, PartOffsets part)
      : api_(api), model_(model), graph_(graph), whole_(whole), first_(first), part_(std::move(part)) {}

  double step(int step) {
    std::vector<std::vector<std::byte>> buffers = step_inputs(graph_, whole_, step, first_, part_);
    std::vector<MLPH_Tensor> inputs;
    for (size_t i = 0; i < graph_.n_inputs; ++i) {
      const MLPH_Value& v = graph_.values[graph_.inputs[i]];
      inputs.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, buffers[i].data()));
    }
    const MLPH_StepArgs args = sdk::step_args(kLearningRate, static_cast<uint64_t>(step));
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    check(api_->train_step(model_, inputs.data(), inputs.size(), &args, &result), "train_step");
    return result.loss;
  }

  // Every parameter's weights, or the gradients the last update used.
  std::vector<std::vector<float>> read(bool gradients) const {
    std::vector<std::vector<float>> all;
    for (size_t p = 0; p < graph_.n_params; ++p) {
      MLPH_Tensor view = tensor(p, all.emplace_back());
      check(gradients ? api_->read_gradient(model_, p, &view) : api_->read_parameter(model_, p, &view), "reading");
    }
    return all;
  }

  void write(std::vector<std::vector<float>> weights) {
    for (size_t p = 0; p < graph_.n_params; ++p) {
      MLPH_Tensor view = tensor(p, weights[p]);
      check(api_->write_parameter(model_, p, &view), "write_parameter");
    }
  }

 private:
  MLPH_Tensor tensor(size_t p, std::vector<float>& data) const {
    const MLPH_Value& v = graph_.values[graph_.params[p].value];
    data.resize(static_cast<size_t>(sdk::numel(v)));
    return sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, data.data());
  }

  const MLPH_BackendApi* api_;
  MLPH_Model* model_;
  const MLPH_Graph &graph_, &whole_;
  uint64_t first_;
  PartOffsets part_;
};

double max_abs(const std::vector<std::vector<float>>& all) {
  double m = 0;
  for (const auto& v : all)
    for (float x : v) m = std::max(m, std::abs(double{x}));
  return m;
}

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double m = 0;
  for (size_t p = 0; p < a.size(); ++p)
    for (size_t i = 0; i < a[p].size(); ++i) m = std::max(m, std::abs(double{a[p][i]} - b[p][i]));
  return m;
}

// Rank 0's weights on every rank.
void broadcast(Session& s, std::vector<std::vector<float>>& weights) {
  for (auto& w : weights)
    check(s.comms_api()->broadcast(s.comm(), w.data(), w.size() * sizeof(float), 0), "broadcast");
}

int run_case(const Case& c) {
  auto split = session(c, c.grid, kBatch);
  const int32_t groups = split->sample_groups();
  const uint32_t whole_batch = kBatch * static_cast<uint32_t>(groups);
  auto whole = session(c, "1", whole_batch);
  const int32_t rank = split->topology().rank;
  const MLPH_Graph *graph = nullptr, *whole_graph = nullptr;
  check(split->workload_api()->build_graph(split->workload(), kBatch, split->seed(), &graph), "build_graph");
  check(whole->workload_api()->build_graph(whole->workload(), whole_batch, whole->seed(), &whole_graph), "build_graph");
  size_t halos = 0;
  for (size_t n = 0; n < graph->n_nodes; ++n) halos += std::string(graph->nodes[n].op) == "halo_exchange";
  auto model = split->compile(*graph);
  Trainee spatial(split->backend_api(), model.get(), *graph, *whole_graph,
                  static_cast<uint64_t>(split->sample_group()) * kBatch,
                  part_offsets(*graph, split->spatial_dims(), split->spatial_grid(),
                               sdk::spatial::coordinates(split->spatial_grid(), split->rank_in_sample())));
  Owned<MLPH_Model> single(nullptr, nullptr);  // rank 0: one rank with the groups' whole samples
  if (rank == 0) {
    MLPH_Model* raw = nullptr;
    check(whole->backend_api()->compile(whole->backend(), whole_graph, nullptr, &raw), "compile");
    single = Owned<MLPH_Model>(raw, whole->backend_api()->model_destroy);
  }
  Trainee reference(whole->backend_api(), single.get(), *whole_graph, *whole_graph, 0, {});

  // Every step starts both from the same weights (rank 0's whole-sample model's), so that what is
  // compared is the step: a max-pool window whose two largest inputs lie within rounding of each
  // other sends its gradient elsewhere once the weights differ in the last bits, and over steps that
  // grows as much in plain data parallelism (64^3: 5e-4 after 4 steps at this learning rate).
  std::vector<std::vector<float>> weights = spatial.read(false), initial;
  if (rank == 0) weights = initial = reference.read(false);
  double loss_diff = 0, gradient_diff = 0, loss = 0, reference_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    broadcast(*split, weights);
    spatial.write(weights);
    if (rank == 0) reference_loss = reference.step(step);
    loss = spatial.step(step);
    check(split->comms_api()->allreduce(split->comm(), &loss, 1, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE), "allreduce");
    if (rank != 0) continue;
    const std::vector<std::vector<float>> expected = reference.read(true);
    loss_diff = std::max(loss_diff, std::abs(loss - reference_loss) / std::abs(reference_loss));
    gradient_diff = std::max(gradient_diff, max_diff(spatial.read(true), expected) / max_abs(expected));
    weights = reference.read(false);
  }
  // After the last update (from the same weights): every rank's alike, and the reference's.
  const std::vector<std::vector<float>> mine = spatial.read(false);
  std::vector<std::vector<float>> rank0s = mine;
  broadcast(*split, rank0s);
  int failures = rank0s == mine ? 0 : 1;
  if (failures) std::printf("rank %d: the weights differ from rank 0's\n", rank);
  if (rank == 0) {
    const double largest = std::max(1.0, max_abs(weights)), tolerance = 1e-5 * largest;
    const double weight_diff = max_diff(mine, weights), moved = max_diff(weights, initial);
    const bool ok = halos > 0 && loss_diff <= 1e-5 && gradient_diff <= 1e-5 && weight_diff <= tolerance &&
                    moved > 100 * tolerance;
    std::printf("%d^3 grid %s (%zu halo exchanges, %d ranks, %d sample group%s of %u) on %s vs 1 rank x batch %u, "
                "%d steps from the same weights: loss %.9f vs %.9f, max relative diff %.3g; gradients max |diff| / "
                "max |g| %.3g; weights after the update max |diff| %.3g (they moved up to %.3g): %s\n",
                c.edge, c.grid.c_str(), halos, split->topology().size, groups, groups == 1 ? "" : "s", kBatch,
                c.backend.c_str(), whole_batch, kSteps, loss, reference_loss, loss_diff, gradient_diff, weight_diff,
                moved, ok ? "equal" : "FAIL");
    std::fflush(stdout);
    failures += ok ? 0 : 1;
  }
  int total = failures;
  check(split->comms_api()->allreduce(split->comm(), &total, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM), "allreduce");
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpirun -np N spatial_equivalence EDGE:GRID:BACKEND...\n");
    return 2;
  }
  try {
    // The first comms/mpi object initializes MPI and finalizes it when it goes: one for the whole run.
    const auto keeper = session(parse_case(argv[1]), "1", kBatch);
    int failures = 0;
    for (int i = 1; i < argc; ++i) failures += run_case(parse_case(argv[i]));
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spatial_equivalence: %s\n", e.what());
    return 1;
  }
}
