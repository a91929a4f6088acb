#include "mlph/core/borrow.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "mlph/core/benchmark.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "mlph/sdk/options.hpp"

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

bool listed(const BenchmarkFacts& facts, const std::string& key) {
  return std::find(facts.hparam_log_keys.begin(), facts.hparam_log_keys.end(), key) != facts.hparam_log_keys.end();
}

bool looks_like_mllog(const std::filesystem::path& source) {
  std::ifstream in(source);
  for (std::string line; std::getline(in, line);)
    if (line.find(":::MLLOG ") != std::string::npos) return true;
  return false;
}

Hparams from_log(const std::filesystem::path& source, const BenchmarkFacts& facts) {
  const ParsedLog log = read_mllog(source);
  if (!log.errors.empty()) throw BorrowError(log.errors.front());
  if (const LogLine* b = log.find("submission_benchmark"); b && b->value.IsScalar() && b->value.Scalar() != facts.name)
    throw BorrowError(fmt::format("{}:{}: the log is a {} run, this is {}", source.string(), b->line,
                                  b->value.Scalar(), facts.name));
  Hparams found;
  for (const LogLine& l : log.lines)
    if (listed(facts, l.key) &&
        std::none_of(found.begin(), found.end(), [&](const auto& kv) { return kv.first == l.key; }))
      found.emplace_back(l.key, json_text(l.value));
  if (found.empty())
    throw BorrowError(fmt::format("{}: no {} hyperparameters in the log", source.string(), facts.name));
  return found;
}

Hparams from_yaml(const std::filesystem::path& source, const BenchmarkFacts& facts) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(source.string());
  } catch (const YAML::Exception& e) {
    throw BorrowError(fmt::format("{}: {}", source.string(), e.what()));
  }
  if (!root.IsMap()) throw BorrowError(fmt::format("{}: expected a map of MLPerf log keys to values", source.string()));
  Hparams found;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    const std::string where = fmt::format("{}:{}", source.string(), kv.first.Mark().line + 1);
    if (key == "benchmark") {
      if (kv.second.Scalar() != facts.name)
        throw BorrowError(fmt::format("{}: benchmark {} does not match this run's {}", where, kv.second.Scalar(), facts.name));
      continue;
    }
    if (!listed(facts, key))
      throw BorrowError(fmt::format("{}: '{}' is not a {} hyperparameter log key", where, key, facts.name));
    // Plain YAML scalars become JSON text; quoted ones (and words) are strings.
    const YAML::Node& v = kv.second;
    const bool text = v.IsScalar() && (v.Tag() == "!" || !json_number_value(v));
    found.emplace_back(key, text ? fmt::format("\"{}\"", v.Scalar()) : json_text(v));
  }
  return found;
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
  if (!std::filesystem::is_regular_file(source))
    throw BorrowError(fmt::format("{}: no such file", source.string()));
  return looks_like_mllog(source) ? from_log(source, facts) : from_yaml(source, facts);
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
    if (const char* v = std::getenv(name); v && std::atoll(v) > 0) return std::atoll(v);
  return 1;
}

std::vector<std::string> borrow_hparams(const std::filesystem::path& source, const RunOptions& options) {
  const LoadedPlugin workload = load_workload(options, "--borrow-hparams");
  return map_hparams(read_hparams(source, workload), workload, options.division != "open", launcher_world_size(),
                     source.string());
}

}  // namespace mlph::core
