// A submission campaign: N runs of one benchmark with distinct seeds, each a fresh mlperf-run
// process (caches and plug-in state start clean, as separate jobs do), written as the MLCommons
// submission tree (results_tree.hpp). N defaults to the count the workload says its rules require.
// Strong scaling (time to solution) runs them one after another; weak scaling (throughput) runs
// M model instances at once, each with its own log. With `slurm`, a strong-scaling campaign is not run
// but written as a Slurm job array, one array task per run (slurm_array_path): one sbatch submits
// the whole result set, each task writing its result_<i>.txt into the same tree.
#pragma once

#include <filesystem>
#include <string>

#include "mlph/core/run_options.hpp"

namespace mlph::core {

// The most runs a campaign makes: a submission needs 10 (time to solution) or some hundreds of
// model instances (throughput); a job array of them stays inside Slurm's default MaxArraySize (1001).
inline constexpr int kMaxRuns = 1000;

// How a Slurm job launches one run's tasks, as bash text: srun with PMIx, a failed task ending the
// step, and each task's CPUs bound to cores unless MLPERF_SRUN_ARGS gives other srun options. The
// binding is every backend's default thread count (sdk/util/cpus.hpp), so the campaign's job array and
// tools/slurm/mlperf.sbatch must launch alike: the array writes this line, the script holds the same
// one (tests/integration/job_script_test.cpp runs both and compares srun's options).
inline constexpr const char* kSrunLaunch = "srun --mpi=pmix --kill-on-bad-exit=1 ${MLPERF_SRUN_ARGS:---cpu-bind=cores}";

struct CampaignOptions {
  int runs = 0;  // 0: the count the workload's rules require (MLPH_BenchmarkInfo.submission_runs)
  bool weak = false;
  std::string org;     // empty: the config's mlperf.org
  std::string system;  // empty: the host name
  std::filesystem::path system_info;  // YAML of system-description fields that override the detected ones
  std::string launcher;               // prefix of every run's command line, e.g. "mpirun -n 4"
  bool slurm = false;                 // write the job array instead of running (launcher default: kSrunLaunch)
  std::string borrow_hparams;         // passed on to every run
  std::filesystem::path executable;   // mlperf-run itself
  std::string version;                // mlperf-hpc version, for the system description
};

// Runs the campaign. Exit code: 0 every run converged; 1 some run failed or did not converge
// (the tree is still written; the scorer judges it); 2 bad usage or configuration.
int run_campaign(const RunOptions& run, const CampaignOptions& campaign);

// Where --runs --slurm writes its job array: <output>/slurm/<system>-<benchmark>.sbatch, beside the
// submission tree (not in it); the array tasks' Slurm output goes to <output>/slurm/logs/.
std::filesystem::path slurm_array_path(const std::filesystem::path& output, const std::string& system,
                                       const std::string& benchmark);

}  // namespace mlph::core
