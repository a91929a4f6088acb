// The workload a run names, and what its plug-in says about its benchmark before any instance
// exists (ABI 1.3: MLPH_BenchmarkInfo, borrow_hparams). The core knows no benchmark by name: what it
// needs to know of one comes from here or from the workload's `describe`.
#pragma once

#include <string>
#include <vector>

#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/run_options.hpp"

namespace mlph::core {

// The workload of a run: --workload, else the config file's `workload:` key. ConfigError when
// neither names one, with `context` (e.g. "--runs") in front.
std::string workload_name(const RunOptions& options, const std::string& context = "");
// That workload's plug-in, from the run's plug-in search path.
LoadedPlugin load_workload(const RunOptions& options, const std::string& context = "");

struct BenchmarkFacts {
  bool stated = false;       // by the workload (benchmark_info); else what follows are defaults
  std::string name;          // submission_benchmark; the plug-in's name for workloads older than 1.3
  int submission_runs = 0;   // result files a submission needs; 0: the workload does not say
  std::vector<std::string> hparam_log_keys;  // what borrow reads
  decltype(MLPH_WorkloadApi::borrow_hparams) borrow = nullptr;  // NULL: the workload cannot borrow
};

BenchmarkFacts benchmark_facts(const LoadedPlugin& workload);

}  // namespace mlph::core
