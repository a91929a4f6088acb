// Hyperparameter borrowing (MLPerf HPC rules allow a closed submission to use another
// submission's hyperparameters): read them from a result log or a YAML of log keys, have the
// workload map them to its config keys (its borrowing table, ABI 1.3), and check every one against
// the workload's schema and closed rules. The core knows no benchmark's keys or formulas.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/core/benchmark.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/run_options.hpp"

namespace mlph::core {

// One line naming the source file, the log key and the rule it breaks.
class BorrowError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Hyperparameters by log key, as JSON text ("0.5", "[16, 32]", "\"sgd\"").
using Hparams = std::vector<std::pair<std::string, std::string>>;

// Reads the hyperparameters of `source` that `workload` borrows: from an MLPerf result log (every
// key the workload lists; others are ignored) or a YAML map of log keys (an unknown key is an
// error). A `benchmark` key in the YAML, or submission_benchmark in the log, must be the workload's.
Hparams read_hparams(const std::filesystem::path& source, const LoadedPlugin& workload);
// The same from the text of `source`, for the benchmark `facts` describe (name, log keys). A text with
// an ":::MLLOG " line is a log, any other a YAML; both are read within the bounds of text_input.hpp.
Hparams parse_hparams(const std::string& text, const std::string& source, const BenchmarkFacts& facts);

// Maps `hparams` to "config.key=value" overrides through the workload and checks each against its
// schema (the closed rules when `closed`). `world_size`: the ranks that share the global batch.
std::vector<std::string> map_hparams(const Hparams& hparams, const LoadedPlugin& workload, bool closed,
                                     long long world_size, const std::string& source);

// The whole step for mlperf-run: loads the workload, reads `source`, and returns the overrides
// (to go before the user's own --set, which win).
std::vector<std::string> borrow_hparams(const std::filesystem::path& source, const RunOptions& options);

// Ranks the run will have, from the launcher's environment (Open MPI, PMI, Slurm); 1 if none.
long long launcher_world_size();

}  // namespace mlph::core
