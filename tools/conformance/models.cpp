#include "models.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/tensor.hpp"

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
          fmt::format("whole model, {}, {} training steps", fmt::join(check.sets, " "), settings.steps),
          settings.tolerance);
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
    std::vector<HostTensor> inputs = random_inputs(*graph, settings.seed);
    compare(reference, candidate, *graph, inputs, learning_rates, 0, row);
  } catch (const std::exception& e) {  // the workload's own failure: the check could not run
    row.verdict = Verdict::fail;
    row.reason = check.workload + ": " + e.what();
  }
  return row;
}

}  // namespace mlph::conformance
