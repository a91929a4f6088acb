#include "scoring.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <regex>
#include <set>

#include "mlph/core/text_input.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/util/numbers.hpp"

namespace mlph::submission {
namespace fs = std::filesystem;
namespace {

std::string scalar_text(const YAML::Node& v) { return v && v.IsScalar() ? v.Scalar() : ""; }

// A logged count (number_of_nodes, global_batch_size...) read as an integer; 0 when the log has none.
long long as_ll(const core::LogLine* l) {
  return l ? sdk::integer_value<long long>(scalar_text(l->value)).value_or(0) : 0;
}

// A JSON or YAML file of the submission (a system description, scaling.json), read within the bounds
// of core/text_input.hpp; std::runtime_error naming the file otherwise.
YAML::Node load_submission_file(const fs::path& file) {
  try {
    return core::load_yaml(core::read_text_file(file, core::kMaxConfigBytes, "submission file"), core::kMaxConfigNodes);
  } catch (const core::YamlError& e) {
    throw std::runtime_error(fmt::format("{}:{}: {}", file.string(), e.line, e.reason));
  }
}

// Seconds spent between each `start` line and the next `stop` line.
double intervals(const core::ParsedLog& log, const std::string& start, const std::string& stop) {
  double total = 0, opened = -1;
  for (const core::LogLine& l : log.lines) {
    if (l.key == start) opened = l.time_ms;
    if (l.key == stop && opened >= 0) total += (l.time_ms - opened) / 1000, opened = -1;
  }
  return total;
}

// Training time per epoch: epoch_start up to the epoch's eval_start (or epoch_stop).
double training_seconds(const core::ParsedLog& log) {
  double total = 0, opened = -1;
  for (const core::LogLine& l : log.lines) {
    if (l.key == "epoch_start") opened = l.time_ms;
    if ((l.key == "eval_start" || l.key == "epoch_stop") && opened >= 0) total += (l.time_ms - opened) / 1000, opened = -1;
  }
  return total;
}

std::vector<fs::path> result_files(const fs::path& dir) {
  static const std::regex pattern("result_.*\\.txt");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), pattern)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<fs::path> sub_directories(const fs::path& dir) {
  std::vector<fs::path> dirs;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char c : s) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string number_text(std::optional<double> v) { return v ? sdk::json_number(*v) : ""; }

// The summarizer's system columns, in its order.
std::vector<std::pair<std::string, std::string>> system_columns(const SystemResult& s) {
  auto d = s.desc;
  // The product of two integer fields as text; "" when one is none or it does not fit.
  const auto product = [](const std::string& a, const std::string& b) {
    const auto x = sdk::integer_value<long long>(a), y = sdk::integer_value<long long>(b);
    long long p = 0;
    return x && y && !__builtin_mul_overflow(*x, *y, &p) ? std::to_string(p) : std::string();
  };
  std::string notes;
  for (const char* k : {"hw_notes", "sw_notes"})
    if (!d[k].empty()) {
      if (!notes.empty()) notes += ';';
      notes += d[k];
    }
  return {
      {"division", d["division"]},
      {"availability", d["status"]},
      {"submitter", d["submitter"]},
      {"system", d["system_name"]},
      {"number_of_nodes", d["number_of_nodes"]},
      {"host_processor_model_name", d["host_processor_model_name"]},
      {"host_processors_count", product(d["host_processors_per_node"], d["number_of_nodes"])},
      {"accelerator_model_name", d["accelerator_model_name"]},
      {"accelerators_count", product(d["accelerators_per_node"], d["number_of_nodes"])},
      {"framework", d["framework"]},
      {"notes", notes},
      {"private_id", ""},
  };
}

std::string url_prefix(const std::string& ruleset) {
  std::string rest = ruleset.substr(3);
  for (size_t at; (at = rest.find(".0")) != std::string::npos;) rest.erase(at, 2);
  return "https://github.com/mlcommons/hpc_results_v" + ruleset.substr(0, 3) + rest;
}

const BenchmarkResult* find_benchmark(const SystemResult& s, const std::string& scaling, const std::string& name) {
  for (const BenchmarkResult& b : s.benchmarks)
    if (b.scaling == scaling && b.benchmark == name) return &b;
  return nullptr;
}

bool has_scaling(const SystemResult& s, const std::string& scaling) {
  return fs::is_directory(s.desc.count("__dir") ? fs::path(s.desc.at("__dir")) / scaling : fs::path());
}

// Rows of one table (strong or weak): header + one row per system that has that level.
std::vector<std::vector<std::string>> table_rows(const Submission& sub, bool weak) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header;
  for (const auto& [name, value] : system_columns(SystemResult{})) header.push_back(name);
  for (const std::string& b : allowed_benchmarks(sub.ruleset)) {
    if (weak)
      for (const char* m : {"number_of_models", "instance_scale", "time_to_train_all"}) header.push_back(b + ":" + m);
    else
      header.push_back(b);
  }
  header.insert(header.end(), {"details_url", "code_url"});
  rows.push_back(header);
  std::vector<std::vector<std::string>> body;
  for (const SystemResult& s : sub.systems) {
    if (!s.errors.empty() || !has_scaling(s, weak ? "weak" : "strong")) continue;
    std::vector<std::string> row;
    for (const auto& [name, value] : system_columns(s)) row.push_back(value);
    for (const std::string& name : allowed_benchmarks(sub.ruleset)) {
      const BenchmarkResult* b = find_benchmark(s, weak ? "weak" : "strong", name);
      if (!weak) {
        row.push_back(number_text(b ? b->score : std::nullopt));
        continue;
      }
      const bool scored = b && b->score;
      row.push_back(scored ? sdk::json_number(b->models) : "");
      row.push_back(scored ? sdk::json_number(static_cast<double>(b->instance_scale)) : "");
      row.push_back(number_text(scored ? b->score : std::nullopt));
    }
    row.push_back(fmt::format("{}/blob/main/{}/systems/{}.json", url_prefix(sub.ruleset), s.desc.at("submitter"), s.system));
    row.push_back(fmt::format("{}/blob/master/{}/benchmarks", url_prefix(sub.ruleset), s.desc.at("submitter")));
    body.push_back(std::move(row));
  }
  std::sort(body.begin(), body.end());  // the summarizer sorts by every column; rows differ in the first ones
  rows.insert(rows.end(), body.begin(), body.end());
  return rows;
}

}  // namespace

const std::vector<std::string>& allowed_benchmarks(const std::string& ruleset) {
  static const std::vector<std::string> v1 = {"cosmoflow", "deepcam", "oc20"};
  static const std::vector<std::string> v3 = {"cosmoflow", "deepcam", "oc20", "openfold"};
  return ruleset == "3.0.0" ? v3 : v1;
}

int required_runs(const std::string& benchmark) {
  return benchmark == "deepcam" || benchmark == "oc20" ? 5 : 10;
}

std::optional<double> olympic_mean(std::vector<double> minutes, int dropped) {
  if (dropped > 1) return std::nullopt;
  std::sort(minutes.begin(), minutes.end());
  // scores[1 : n - (1 - dropped)]: a dropped run already took the slowest slot.
  const size_t first = 1, last = minutes.size() - std::min<size_t>(minutes.size(), 1 - dropped);
  if (last <= first) return std::nullopt;
  return std::accumulate(minutes.begin() + first, minutes.begin() + last, 0.0) / (last - first);
}

RunResult read_run(const fs::path& file, const std::string& ruleset) { return score_log(core::read_mllog(file), ruleset); }

RunResult score_log(const core::ParsedLog& log, const std::string& ruleset) {
  RunResult r;
  const fs::path& file = log.file;
  r.file = file;
  r.verdict = check_log(log, ruleset);
  const core::LogLine* start = log.find("run_start");
  const core::LogLine* stop = log.find("run_stop");
  if (start && stop) {
    r.start_ms = start->time_ms, r.stop_ms = stop->time_ms;
    r.minutes = (r.stop_ms - r.start_ms) / 60 / 1000;
    r.status = scalar_text(stop->metadata["status"]);
    // A time to train is a finite span forward in time: anything else would score NaN, or better than any run.
    r.timed = std::isfinite(r.minutes) && r.start_ms >= 0 && r.stop_ms >= r.start_ms;
    if (!r.timed) {
      r.verdict.valid = false;
      r.verdict.errors.push_back(fmt::format("{}:{}: run_stop at time_ms {} is no time after run_start's {} (line {})",
                                             file.string(), stop->line, stop->time_ms, start->time_ms, start->line));
    }
  } else {
    r.verdict.valid = false;
    r.verdict.errors.push_back(fmt::format("{}: run_{} not recorded", file.string(), start ? "stop" : "start"));
  }
  if (const core::LogLine* seed = log.find("seed")) {
    if (const auto v = core::json_number_value(seed->value)) r.seed = static_cast<long long>(*v);
    r.seed_site = fmt::format("{}:{}", scalar_text(seed->metadata["file"]), scalar_text(seed->metadata["lineno"]));
  }
  const core::LogLine* nodes = log.find("number_of_nodes");
  const core::LogLine* accelerators = log.find("accelerators_per_node");
  if (nodes && accelerators) r.instance_scale = as_ll(nodes) * std::max(as_ll(accelerators), 1LL);
  r.global_batch_size = as_ll(log.find("global_batch_size"));
  r.train_samples = as_ll(log.find("train_samples"));
  r.init_s = intervals(log, "init_start", "init_stop");
  r.staging_s = intervals(log, "staging_start", "staging_stop");
  r.train_s = training_seconds(log);
  r.eval_s = intervals(log, "eval_start", "eval_stop");
  r.metric_key = log.find("eval_accuracy") ? "eval_accuracy" : "eval_error";
  for (const core::LogLine* l : log.all(r.metric_key))
    if (const auto v = core::json_number_value(l->value))
      r.metric.push_back({sdk::integer_value<int>(scalar_text(l->metadata["epoch_num"])).value_or(0), *v});
  if (r.status == "success" && !r.metric.empty()) r.epochs_to_converge = r.metric.back().epoch;
  return r;
}

BenchmarkResult score_directory(const fs::path& dir, const std::string& scaling, const std::string& benchmark,
                                const std::string& ruleset, bool closed, int required) {
  BenchmarkResult b;
  b.dir = dir, b.scaling = scaling, b.benchmark = benchmark;
  b.system = dir.parent_path().parent_path().filename().string();
  const std::vector<fs::path> files = result_files(dir);
  for (const fs::path& f : files) b.runs.push_back(read_run(f, ruleset));
  const std::string where = dir.string();

  // Package checker: how many result files.
  if (scaling == "strong" && static_cast<int>(files.size()) != required)
    b.errors.push_back(fmt::format("{}: {} result_*.txt files, a strong-scaling {} result needs exactly {}", where,
                                   files.size(), benchmark, required));
  if (scaling == "weak" && static_cast<int>(files.size()) < required)
    b.errors.push_back(fmt::format("{}: {} result_*.txt files, a weak-scaling {} result needs at least {}", where,
                                   files.size(), benchmark, required));
  for (const auto& e : fs::directory_iterator(dir))
    if (std::find(files.begin(), files.end(), e.path()) == files.end() && e.path().filename() != "package_checker_params" &&
        e.path().filename() != "scaling.json")
      b.notices.push_back(fmt::format("{}: not a result_*.txt file (the package checker warns about it)", e.path().string()));

  // One non-compliant (e.g. non-converged) run is tolerated under olympic scoring.
  std::vector<std::string> dropped;
  for (const RunResult& r : b.runs)
    if (!r.counts()) dropped.push_back(r.file.filename().string());
  if (dropped.size() == 1) b.notices.push_back(fmt::format("{}: {} does not comply (not converged?): it takes the slowest slot", where, dropped[0]));
  if (dropped.size() > 1)
    b.errors.push_back(fmt::format("{}: {} files do not comply ({}); olympic scoring tolerates one", where, dropped.size(),
                                   fmt::join(dropped, ", ")));

  // RCP checker (closed division): only a run_stop with status success counts as converged.
  std::vector<std::string> unsuccessful;
  for (const RunResult& r : b.runs)
    if (r.status != "success") unsuccessful.push_back(r.file.filename().string());
  if (closed && unsuccessful.size() > 1)
    b.errors.push_back(fmt::format("{}: {} runs do not end in run_stop status success ({}); the RCP checker allows one",
                                   where, unsuccessful.size(), fmt::join(unsuccessful, ", ")));

  // Seed checker (closed division): a logged seed per run, never the same seed from the same line twice.
  if (closed) {
    std::map<std::string, std::string> first_with;
    for (const RunResult& r : b.runs) {
      if (!r.seed) {
        b.errors.push_back(fmt::format("{}: logs no seed (seed checker)", r.file.string()));
        continue;
      }
      const std::string id = fmt::format("{}@{}", *r.seed, r.seed_site);
      const auto [it, fresh] = first_with.emplace(id, r.file.filename().string());
      if (!fresh)
        b.errors.push_back(fmt::format("{}: seed {} on {} is already logged by {} (seed checker: seeds must differ per run)",
                                       r.file.string(), *r.seed, r.seed_site, it->second));
    }
  }

  if (fs::exists(dir / "scaling.json")) {
    const YAML::Node factor = load_submission_file(dir / "scaling.json")["scaling_factor"];
    const std::optional<double> value = factor && factor.IsScalar() ? core::json_number_value(factor) : std::nullopt;
    if (value && std::isfinite(*value) && *value > 0)
      b.scaling_factor = *value;
    else
      b.errors.push_back(fmt::format("{}: \"scaling_factor\" {} is not a positive finite number",
                                     (dir / "scaling.json").string(),
                                     factor && factor.IsScalar() ? core::escaped(factor.Scalar(), 40) : "(missing)"));
  }

  if (scaling == "strong") {
    std::vector<double> minutes;
    for (const RunResult& r : b.runs)
      if (r.counts()) minutes.push_back(r.minutes);
    b.score = olympic_mean(minutes, static_cast<int>(dropped.size()));
    if (b.score) *b.score *= b.scaling_factor;
    return b;
  }
  double first_start = 1e300, last_stop = -1e300;
  bool mixed_scales = false;
  for (const RunResult& r : b.runs) {
    if (!r.counts()) continue;
    if (b.models > 0 && r.instance_scale != b.instance_scale && (mixed_scales = true))
      b.errors.push_back(fmt::format("{}: instance scale {} differs from {} of the other runs (number_of_nodes x "
                                     "accelerators_per_node must be the same for every weak-scaling model)",
                                     r.file.string(), r.instance_scale, b.instance_scale));
    if (b.models == 0) b.instance_scale = r.instance_scale;
    ++b.models;
    first_start = std::min(first_start, r.start_ms);
    last_stop = std::max(last_stop, r.stop_ms);
  }
  if (b.models >= required && !mixed_scales) b.score = (last_stop - first_start) / 60 / 1000;
  else if (b.models < required)
    b.errors.push_back(fmt::format("{}: {} converged model instances, throughput needs at least {}", where, b.models, required));
  return b;
}

Submission score_submission(const fs::path& org_dir, const std::string& ruleset) {
  Submission sub;
  sub.org_dir = org_dir, sub.ruleset = ruleset;
  if (!fs::is_directory(org_dir / "results") || !fs::is_directory(org_dir / "systems"))
    throw std::runtime_error(fmt::format("{}: not a submission (needs results/ and systems/)", org_dir.string()));
  for (const fs::path& system_dir : sub_directories(org_dir / "results")) {
    SystemResult s;
    s.system = system_dir.filename().string();
    const fs::path json = org_dir / "systems" / (s.system + ".json");
    try {
      const YAML::Node desc = load_submission_file(json);
      for (const auto& kv : desc)
        if (kv.second.IsScalar()) s.desc[kv.first.Scalar()] = kv.second.Scalar();
      for (const char* field : {"division", "status", "submitter", "system_name", "host_processor_model_name",
                                "number_of_nodes", "host_processor_core_count", "host_processors_per_node",
                                "accelerator_model_name", "accelerators_per_node", "framework", "hw_notes", "sw_notes"})
        if (!desc[field]) s.errors.push_back(fmt::format("{}: \"{}\" field missing", json.string(), field));
    } catch (const std::exception& e) {
      s.errors.push_back(fs::exists(json) ? e.what() : fmt::format("{}: missing", json.string()));
    }
    s.desc["__dir"] = system_dir.string();
    const bool closed = s.desc["division"] == "closed";
    for (const char* scaling : {"strong", "weak"})
      for (const fs::path& bench_dir : sub_directories(system_dir / scaling)) {
        const std::string name = bench_dir.filename().string();
        const auto& allowed = allowed_benchmarks(ruleset);
        if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) continue;  // skipped, as upstream
        s.benchmarks.push_back(score_directory(bench_dir, scaling, name, ruleset, closed, required_runs(name)));
      }
    sub.systems.push_back(std::move(s));
  }
  return sub;
}

std::string summary_csv(const Submission& sub) {
  std::string out;
  for (bool weak : {false, true}) {
    const auto rows = table_rows(sub, weak);
    if (weak && rows.size() == 1) break;  // no weak rows: the summarizer appends nothing
    for (const auto& row : rows) {
      for (size_t i = 0; i < row.size(); ++i) {
        if (i) out += ',';
        out += csv_field(row[i]);
      }
      out += "\n";
    }
  }
  return out;
}

std::string summary_table(const Submission& sub) {
  std::string out;
  for (bool weak : {false, true}) {
    const auto rows = table_rows(sub, weak);
    if (rows.size() == 1) continue;
    out += weak ? "Weak Scaling Scores (Throughput, minutes):\n" : "Strong Scaling Scores (Time To Solution, minutes):\n";
    for (size_t r = 1; r < rows.size(); ++r)
      for (size_t c = 0; c < rows[0].size(); ++c)
        if (!rows[r][c].empty() && rows[0][c] != "private_id")
          out += fmt::format("  {:<34} {}\n", rows[0][c], rows[r][c]);
  }
  return out;
}

}  // namespace mlph::submission
