#include "models.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::conformance {
namespace fs = std::filesystem;

namespace {

bool installed(const std::string& workload, const std::vector<fs::path>& search_path) {
  const std::string file = core::plugin_file_name(MLPH_KIND_WORKLOAD, workload);
  std::error_code ec;
  for (const fs::path& dir : search_path)
    if (fs::is_regular_file(dir / file, ec)) return true;
  return false;
}

// Random inputs shaped like the graph's: int16 counts, int32 class labels in [0, 3), floats in [-1, 1).
std::vector<HostTensor> random_inputs(const MLPH_Graph& graph, uint64_t seed) {
  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    HostTensor& t = inputs.emplace_back(HostTensor::like(graph.values[graph.inputs[i]]));
    for (size_t k = 0; k < t.numel(); ++k) {
      const float u = mlph_uniform(seed, 0xc0f, i, k);
      if (t.dtype == MLPH_DTYPE_I16) t.as<int16_t>()[k] = static_cast<int16_t>(u * 40);
      else if (t.dtype == MLPH_DTYPE_I32) t.as<int32_t>()[k] = static_cast<int32_t>(u * 3);
      else if (t.dtype == MLPH_DTYPE_F32) t.as<float>()[k] = 2 * u - 1;
      else throw std::runtime_error("graph input '" + t.name + "' has a dtype the conformance check cannot fill");
    }
  }
  return inputs;
}

// Why a whole model is not held to a fixed tolerance per tensor. A deep net's first-step gradients
// can be ill-conditioned: re-associating its sums moves some of them far more than roundoff. DeepCAM
// at 32x32 (BN over 8 values per channel at the 2x2 deepest maps, ~100 ReLUs whose decisions flip
// on 1e-6 changes) shows 1e-2 gradient errors, and 1 on 'block20.skipbn.bias', whose exact value
// is 0 (a BN bias before only linear ops and another BN), for onednn-cpu against ITSELF run with 3
// threads instead of 2; the reference's thread count hides this, as it only splits its weight
// gradients. So the check measures each tensor's sensitivity on the reference itself: it trains a
// copy whose trainable parameters start a relative kPerturbation away (random signs, about the
// forward differences that re-association produces here: 1.6e-6 on DeepCAM's loss), and a tensor
// may differ from the reference by kNoiseFactor times that perturbation's effect when this exceeds
// the tolerance. Well-conditioned tensors (the losses, most of CosmoFlow) keep the fixed tolerance,
// and an error of order 1 (a wrong layout, a missing term) still fails everywhere but on tensors
// that carry no information. The workload's optimizer is replaced by SGD with momentum: the
// Adam family's step is about lr * sign(g) elementwise, which turns the noise of near-zero
// gradient elements into full-size updates; those optimizers have their own per-op checks.
constexpr double kPerturbation = 0x1p-20;  // ~1e-6

// A copy of a graph, with its own parameters and optimizer.
struct GraphCopy {
  MLPH_Graph graph{};
  std::vector<MLPH_Parameter> params;
  std::vector<std::vector<float>> inits;
};

const double kMomentum = 0.9;
const MLPH_Attr kSgdAttrs[] = {{"momentum", &kMomentum, 1, nullptr}};

GraphCopy with_sgd(const MLPH_Graph& graph) {
  GraphCopy c;
  c.graph = graph;
  c.graph.optimizer = {"sgd_keras", kSgdAttrs, 1};
  return c;
}

// `graph` (with SGD) whose trainable parameters start a relative `kPerturbation` away.
GraphCopy perturbed(const MLPH_Graph& graph, uint64_t seed) {
  GraphCopy c = with_sgd(graph);
  c.params.assign(graph.params, graph.params + graph.n_params);
  c.inits.resize(graph.n_params);
  for (size_t p = 0; p < graph.n_params; ++p) {
    if (!(graph.params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
    const MLPH_Value& v = graph.values[graph.params[p].value];
    std::vector<float>& init = c.inits[p];
    init.assign(graph.params[p].init, graph.params[p].init + sdk::numel(v));
    for (size_t i = 0; i < init.size(); ++i)
      init[i] *= static_cast<float>(1 + (mlph_uniform(seed, 0x9e7, p, i) < 0.5 ? -kPerturbation : kPerturbation));
    c.params[p].init = init.data();
  }
  c.graph.params = c.params.data();
  return c;
}

}  // namespace

const std::vector<ModelCheck>& model_checks() {
  static const std::vector<ModelCheck> checks = {
      {"cosmoflow", {"data.edge=32", "train.batch_size=2"}},
      {"deepcam", {"data.height=32", "data.width=32", "train.batch_size=2"}},
  };
  return checks;
}

std::optional<Row> check_model(const ModelCheck& check, const ModelSettings& settings, const LoadedBackend& reference,
                               const LoadedBackend& candidate, std::string& note) {
  if (!installed(check.workload, core::default_search_path(settings.plugin_dirs))) {
    note = fmt::format("{}: skipped: no {} on the plug-in search path", check.workload,
                       core::plugin_file_name(MLPH_KIND_WORKLOAD, check.workload));
    return std::nullopt;
  }
  Row row(check.workload,
          fmt::format("whole model, {}, {} training steps", fmt::join(check.sets, " "), settings.steps), 0.0);
  row.rerun += fmt::format(" --model-steps {}", settings.steps);
  try {
    core::RunOptions options;
    options.workload = check.workload;
    options.backend = reference.name;
    options.sets = check.sets;
    options.division = "open";
    options.seed = settings.seed;
    options.plugin_dirs = settings.plugin_dirs;
    core::Session session(options);
    const MLPH_Graph* graph = nullptr;
    core::check(session.workload_api()->build_graph(session.workload(), session.info().local_batch_size,
                                                    settings.seed, &graph),
                "build_graph");
    std::vector<double> learning_rates;
    for (int s = 0; s < settings.steps; ++s)
      core::check(session.workload_api()->learning_rate(session.workload(), 0, static_cast<uint64_t>(s),
                                                        &learning_rates.emplace_back()),
                  "learning_rate");
    row.tolerance = tolerance_for(*settings.precision, *graph).model;
    std::vector<HostTensor> inputs = random_inputs(*graph, settings.seed);
    const GraphCopy sgd = with_sgd(*graph), shifted = perturbed(*graph, settings.seed);
    if (!compiles(candidate, sgd.graph, row)) return row;  // spares the reference's runs
    const Observed noise = observe(reference, shifted.graph, inputs, learning_rates, 0);
    compare(reference, candidate, sgd.graph, inputs, learning_rates, 0, row, &noise);
  } catch (const std::exception& e) {  // the workload's own failure: the check could not run
    row.verdict = Verdict::fail;
    row.reason = check.workload + ": " + e.what();
  }
  return row;
}

}  // namespace mlph::conformance
