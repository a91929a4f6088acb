// Scoring an MLCommons HPC submission tree as the official result summarizer and package checker
// do: time to train per run from run_start/run_stop; time to solution (strong scaling) = olympic
// mean, a non-compliant run taking the slowest slot; throughput (weak scaling) = max(run_stop) -
// min(run_start) over the compliant model instances, with their count and instance scale.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compliance.hpp"

namespace mlph::submission {

struct EpochPoint {
  int epoch = 0;
  double metric = 0;
};

struct RunResult {
  std::filesystem::path file;
  Verdict verdict;              // the project's compliance rules
  bool timed = false;           // run_start and run_stop found
  double start_ms = 0, stop_ms = 0;
  double minutes = 0;           // (run_stop - run_start) / 60000
  std::string status;           // run_stop metadata.status
  std::optional<long long> seed;
  std::string seed_site;        // metadata file:lineno of the seed line
  long long instance_scale = -1;  // number_of_nodes * max(accelerators_per_node, 1)
  // For the report.
  long long global_batch_size = 0, train_samples = 0;
  double init_s = 0, staging_s = 0, train_s = 0, eval_s = 0;
  int epochs_to_converge = 0;   // epoch_num of the last metric before a successful run_stop; 0 if none
  std::vector<EpochPoint> metric;
  std::string metric_key;

  bool counts() const { return verdict.valid && timed; }  // what the summarizer keeps
};

struct BenchmarkResult {
  std::filesystem::path dir;
  std::string system, scaling, benchmark;  // scaling: strong or weak
  std::vector<RunResult> runs;
  std::vector<std::string> errors;    // verdicts that reject the directory, naming the file and the rule
  std::vector<std::string> notices;
  std::optional<double> score;        // minutes: olympic mean (strong) or time_to_train_all (weak)
  int models = 0;                     // weak: compliant instances
  long long instance_scale = 0;       // weak
  double scaling_factor = 1.0;        // scaling.json, applied to the strong score
};

// One benchmark directory (result_*.txt). `closed` turns on the seed checker, as for a closed
// submission; `required` is the run count the rules ask for.
BenchmarkResult score_directory(const std::filesystem::path& dir, const std::string& scaling,
                                const std::string& benchmark, const std::string& ruleset, bool closed, int required);

// Reads and scores one log (no directory rules).
RunResult read_run(const std::filesystem::path& file, const std::string& ruleset);
// The same for a log already read.
RunResult score_log(const core::ParsedLog& log, const std::string& ruleset);

// Strong-scaling mean as the summarizer computes it from the kept times and the number dropped;
// nullopt when more than one run was dropped or nothing is left.
std::optional<double> olympic_mean(std::vector<double> minutes, int dropped);

struct SystemResult {
  std::string system;
  std::map<std::string, std::string> desc;  // the system JSON's scalar fields, as text
  std::vector<std::string> errors;          // a missing or broken JSON
  std::vector<BenchmarkResult> benchmarks;
};

struct Submission {
  std::filesystem::path org_dir;
  std::string ruleset;
  std::vector<SystemResult> systems;
};

// Every <org>/results/<system>/{strong,weak}/<benchmark> of the tree.
Submission score_submission(const std::filesystem::path& org_dir, const std::string& ruleset);

// The result summarizer's CSV (strong rows, then weak rows with their own header), byte for byte.
std::string summary_csv(const Submission& s);
// The same rows as a readable table.
std::string summary_table(const Submission& s);

// The benchmarks of an hpc ruleset in the summarizer's column order; required runs per benchmark.
const std::vector<std::string>& allowed_benchmarks(const std::string& ruleset);
int required_runs(const std::string& benchmark);

}  // namespace mlph::submission
