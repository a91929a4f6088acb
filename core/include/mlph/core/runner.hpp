// The timed run: loads the plug-ins, checks the configuration, and drives init -> run_start ->
// epochs (train, evaluate) -> run_stop exactly as the MLPerf HPC rules time it.
#pragma once

#include "mlph/core/run_options.hpp"

namespace mlph::core {

// Returns the process exit code: 0 when the run reached its target (or data generation finished),
// 1 when a started run failed or did not converge (its log ends with run_stop "aborted"),
// 2 for bad usage, configuration or plug-ins (reported before any log is written),
// 3 when a signal stopped it and the checkpoint to go on from is saved (its log ends "aborted").
int run(const RunOptions& options);

}  // namespace mlph::core
