// The MLCommons submission tree a campaign writes:
//   <output>/<org>/results/<system>/{strong|weak}/<benchmark>/result_<i>.txt
//   <output>/<org>/systems/<system>.json                       (filled from this machine and the logs)
//   <output>/<org>/benchmarks/<benchmark>/implementations/mlperf-hpc/   (code reference, config)
//   <output>/console/<system>/weak/<benchmark>/run_<i>.log     (each throughput instance's output)
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mlph::core {

struct ResultsTree {
  ResultsTree(const std::filesystem::path& output, const std::string& org, const std::string& system,
              const std::string& benchmark, bool weak);

  std::filesystem::path org_dir, results, systems, implementation, console;
  std::string system;

  std::filesystem::path result(int i) const;  // results/result_<i>.txt
  std::filesystem::path system_json() const;  // systems/<system>.json
  bool holds_results() const;                 // result_* files are there already
};

// README.md with the version and run 0's command line, and a copy of the config file.
void write_code_reference(const std::filesystem::path& dir, const std::string& version,
                          const std::vector<std::string>& command, int runs, const std::string& config_file);

// System-description fields, in order: name, value.
using SystemFields = std::vector<std::pair<std::string, std::string>>;

// The fields of a YAML map (--system-info); ConfigError naming the file (and line) otherwise. Read
// before the first run, so that a bad file costs no run.
SystemFields read_system_info(const std::filesystem::path& file);

// The system description: the fields the package checker requires, from `log_file` (the campaign's
// first log) and this machine, then whatever `system_info` says.
void write_system_json(const std::filesystem::path& file, const std::filesystem::path& log_file,
                       const std::string& org, const std::string& system, const std::string& version,
                       const SystemFields& system_info);

}  // namespace mlph::core
