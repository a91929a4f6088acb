#include "mlph/core/borrow.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "mlph/core/benchmark.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/text_input.hpp"
#include "mlph/sdk/util/numbers.hpp"
#include "mlph/sdk/util/options.hpp"

namespace mlph::core {
namespace {

// The workload's borrowing facts; a workload without a borrowing table is refused in one line.
BenchmarkFacts borrowing_facts(const LoadedPlugin& workload) {
  BenchmarkFacts facts = benchmark_facts(workload);
  if (!facts.borrow)
    throw BorrowError(fmt::format("--borrow-hparams: workload {} (ABI {}.{}) cannot borrow hyperparameters: it has no "
                                  "borrowing table",
                                  workload.descriptor->name, workload.descriptor->abi_major,
                                  workload.descriptor->abi_minor));
  return facts;
}

// Receives the workload's assignments and checks each at once against the schema, one key at a time
// so that the error names the log key it came from. Nothing may throw back through the plug-in: the
// first error is kept, and later assignments are ignored.
struct Assignments {
  const Hparams& hparams;
  const std::vector<MLPH_ParamSpec>& schema;
  bool closed;
  std::string source;
  std::vector<std::string> sets;
  std::optional<std::string> error;

  void add(const char* log_key, const char* config_key, const char* value) noexcept {
    if (error) return;
    try {
      const auto logged = std::find_if(hparams.begin(), hparams.end(), [&](const auto& kv) { return kv.first == log_key; });
      const std::string what = fmt::format("{}: {} = {}", source, log_key, logged == hparams.end() ? "?" : logged->second);
      const std::string assignment = fmt::format("{}={}", config_key, value);
      try {
        Config::load(schema, "", {assignment}).validate(schema, closed);
      } catch (const ConfigError& e) {
        error = fmt::format("{} (as {}): {}", what, assignment, e.what());
        return;
      }
      sets.push_back(assignment);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
};

}  // namespace

Hparams read_hparams(const std::filesystem::path& source, const LoadedPlugin& workload) {
  const BenchmarkFacts facts = borrowing_facts(workload);
  try {
    return parse_hparams(read_text_file(source, kMaxLogBytes, "hyperparameter file"), source.string(), facts);
  } catch (const InputError& e) {
    throw BorrowError(e.what());
  }
}

std::vector<std::string> map_hparams(const Hparams& hparams, const LoadedPlugin& workload, bool closed,
                                     long long world_size, const std::string& source) {
  const BenchmarkFacts facts = borrowing_facts(workload);
  size_t n = 0;
  const MLPH_ParamSpec* specs = workload.api<MLPH_WorkloadApi>()->params(&n);
  const std::vector<MLPH_ParamSpec> schema(specs, specs + n);
  const sdk::KeyValues logged(hparams);
  Assignments assignments{hparams, schema, closed, source, {}, std::nullopt};
  const auto assign = [](void* ctx, const char* log_key, const char* config_key, const char* value) {
    static_cast<Assignments*>(ctx)->add(log_key, config_key, value);
  };
  MLPH_Error* error = facts.borrow(host_api(), logged.data(), logged.size(), world_size, assign, &assignments);
  if (assignments.error) {  // it came first: the workload went on past it
    error_free(error);
    throw BorrowError(*assignments.error);
  }
  try {
    check(error);
  } catch (const PluginError& e) {
    throw BorrowError(fmt::format("{}: {}", source, e.what()));
  }
  return assignments.sets;
}

long long launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(name))
      if (const auto n = sdk::integer_value<long long>(v); n && *n > 0) return *n;
  return 1;
}

std::vector<std::string> borrow_hparams(const std::filesystem::path& source, const RunOptions& options) {
  const LoadedPlugin workload = load_workload(options, "--borrow-hparams");
  return map_hparams(read_hparams(source, workload), workload, options.division != "open", launcher_world_size(),
                     source.string());
}

}  // namespace mlph::core
