// Hyperparameter borrowing (MLPerf HPC rules allow a closed submission to use another
// submission's hyperparameters): read them from a result log or a YAML of log keys, map them to
// this workload's config keys through a table, and check every one against the closed rules.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/core/runner.hpp"
#include "mlph/workload.h"

namespace mlph::core {

// One line naming the source file, the log key and the rule it breaks.
class BorrowError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Hyperparameters by log key, as JSON text ("0.5", "[16, 32]", "\"sgd\"").
using Hparams = std::vector<std::pair<std::string, std::string>>;

// Reads the hyperparameters from `source`: an MLPerf result log (every key the mapping table
// knows for `benchmark`; others are ignored) or a YAML map of log keys (an unknown key is an
// error). A `benchmark` key in the YAML, or submission_benchmark in the log, must match.
Hparams read_hparams(const std::filesystem::path& source, const std::string& benchmark);

// Maps `hparams` to "config.key=value" overrides for `benchmark` and checks each against
// `schema` (the closed rules when `closed`). `world_size` splits global_batch_size per rank.
std::vector<std::string> map_hparams(const Hparams& hparams, const std::string& benchmark,
                                     const std::vector<MLPH_ParamSpec>& schema, bool closed, long long world_size,
                                     const std::string& source);

// The whole step for mlperf-run: loads the workload's schema, reads `source`, and returns the
// overrides (to go before the user's own --set, which win).
std::vector<std::string> borrow_hparams(const std::filesystem::path& source, const RunOptions& options);

// Ranks the run will have, from the launcher's environment (Open MPI, PMI, Slurm); 1 if none.
long long launcher_world_size();

}  // namespace mlph::core
