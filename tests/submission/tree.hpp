// Hand-built MLPerf HPC result logs and submission trees for the scoring and checking tests.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mlph::test {

struct FakeRun {
  long long seed = 1;
  double start_ms = 1.7e12;  // run_start
  double minutes = 10;       // run_stop - run_start
  bool converged = true;
  int nodes = 1, accelerators_per_node = 0;
  std::string skip_key;      // leave this key out
  std::string status;        // run_stop status; empty: success when converged, else aborted
};

// A closed-division CosmoFlow log in mlperf-run's format: three epochs, the last one under the
// target when `converged`.
inline void write_log(const std::filesystem::path& file, const FakeRun& r) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file);
  const long long run_start = static_cast<long long>(r.start_ms);
  const long long run_stop = run_start + static_cast<long long>(r.minutes * 60000);
  long long t = run_start - 2000;
  const auto line = [&](long long time, const char* type, const std::string& key, const std::string& value,
                        const std::string& metadata = "") {
    if (key == r.skip_key) return;
    out << fmt::format(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {}, \"event_type\": \"{}\", \"key\": \"{}\", "
                       "\"value\": {}, \"metadata\": {{\"file\": \"core/src/runner.cpp\", \"lineno\": {}{}}}}}\n",
                       time, type, key, value, 100 + key.size(), metadata);
  };
  const char* point = "POINT_IN_TIME";
  line(t, point, "cache_clear", "true");
  line(t, "INTERVAL_START", "init_start", "null");
  line(t, point, "seed", std::to_string(r.seed));
  line(t, point, "number_of_ranks", std::to_string(r.nodes));
  line(t, point, "number_of_nodes", std::to_string(r.nodes));
  line(t, point, "accelerators_per_node", std::to_string(r.accelerators_per_node));
  line(t, point, "submission_benchmark", "\"cosmoflow\"");
  line(t, point, "submission_org", "\"test-org\"");
  line(t, point, "submission_division", "\"closed\"");
  line(t, point, "submission_status", "\"onprem\"");
  line(t, point, "submission_platform", "\"test-system\"");
  line(run_start - 1, "INTERVAL_END", "init_stop", "null");
  line(run_start, "INTERVAL_START", "run_start", "null");
  line(run_start, point, "global_batch_size", "64");
  line(run_start, point, "train_samples", "256");
  line(run_start, point, "eval_samples", "64");
  line(run_start, point, "opt_weight_decay", "0.0");
  line(run_start, point, "dropout", "0.5");
  line(run_start, point, "opt_name", "\"sgd\"");
  line(run_start, point, "opt_base_learning_rate", "0.001");
  line(run_start, point, "opt_learning_rate_warmup_epochs", "4");
  line(run_start, point, "opt_learning_rate_warmup_factor", "1.0");
  line(run_start, point, "opt_learning_rate_decay_boundary_epochs", "[32, 64]");
  line(run_start, point, "opt_learning_rate_decay_factor", "0.25");
  const double errors[3] = {0.3, 0.2, r.converged ? 0.11 : 0.15};
  for (int e = 1; e <= 3; ++e) {
    const long long begin = run_start + (run_stop - run_start) * (e - 1) / 3, end = run_start + (run_stop - run_start) * e / 3;
    const std::string epoch = fmt::format(", \"epoch_num\": {}", e);
    line(begin, "INTERVAL_START", "epoch_start", "null", epoch);
    line(end - 10, "INTERVAL_START", "eval_start", "null", epoch);
    line(end, "INTERVAL_END", "eval_stop", "null", epoch);
    line(end, "INTERVAL_END", "epoch_stop", "null", epoch);
    line(end, point, "eval_error", fmt::format("{}", errors[e - 1]), epoch);
  }
  line(run_stop, "INTERVAL_END", "run_stop", "null",
       fmt::format(", \"status\": \"{}\"", !r.status.empty() ? r.status : r.converged ? "success" : "aborted"));
}

inline void write_system_json(const std::filesystem::path& org, const std::string& system) {
  std::filesystem::create_directories(org / "systems");
  std::ofstream out(org / "systems" / (system + ".json"));
  out << "{\n";
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"submitter", "\"test-org\""}, {"division", "\"closed\""}, {"status", "\"Available on-premise\""},
      {"system_name", "\"" + system + "\""}, {"number_of_nodes", "\"1\""}, {"host_processors_per_node", "\"2\""},
      {"host_processor_model_name", "\"Test CPU, 2.0 GHz\""}, {"host_processor_core_count", "\"16\""},
      {"accelerators_per_node", "\"0\""}, {"accelerator_model_name", "\"N/A\""}, {"framework", "\"mlperf-hpc 0.1.0\""},
      {"hw_notes", "\"\""}, {"sw_notes", "\"test tree\""}};
  for (size_t i = 0; i < fields.size(); ++i)
    out << "  \"" << fields[i].first << "\": " << fields[i].second << (i + 1 < fields.size() ? ",\n" : "\n");
  out << "}\n";
}

inline std::filesystem::path fresh_tree(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("mlph-submission-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace mlph::test
