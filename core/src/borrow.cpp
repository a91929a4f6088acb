#include "mlph/core/borrow.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "mlph/core/config.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/json.hpp"

namespace mlph::core {
namespace {

// The hyperparameters being mapped, with what the converters need besides them.
struct HparamSet {
  Hparams values;
  long long world_size = 1;

  const std::string* find(const std::string& key) const {
    for (const auto& [k, v] : values)
      if (k == key) return &v;
    return nullptr;
  }
  YAML::Node node(const std::string& key) const {
    const std::string* text = find(key);
    return text ? YAML::Load(*text) : YAML::Node();
  }
  double number(const std::string& key) const {
    const auto v = json_number_value(node(key));
    if (!v) throw BorrowError("must be a number");
    return *v;
  }
  // A key another one depends on.
  double required(const std::string& key, const std::string& by) const {
    if (!find(key)) throw BorrowError(fmt::format("needs {} as well", key));
    try {
      return number(key);
    } catch (const BorrowError& e) {
      throw BorrowError(fmt::format("{} (needed by {})", e.what(), by));
    }
  }
};

using Converter = std::string (*)(const HparamSet&, const std::string& log_key);

// One row of the mapping: a log key, the config key it sets (nullptr: nothing to set, the value
// is only checked), and how the value converts. A log key may have several rows.
struct HparamRule {
  const char* benchmark;
  const char* log_key;
  const char* config_key;
  Converter convert;
};

std::string as_is(const HparamSet& h, const std::string& key) { return json_text(h.node(key)); }
// A JSON string as the plain word a string config key holds.
std::string as_word(const HparamSet& h, const std::string& key) {
  const YAML::Node v = h.node(key);
  if (!is_json_string(v)) throw BorrowError("must be a string");
  return v.Scalar();
}

std::string per_rank_batch(const HparamSet& h, const std::string& key) {
  const double global = h.number(key);
  if (global <= 0 || global != std::floor(global)) throw BorrowError("must be a positive integer");
  const auto g = static_cast<long long>(global);
  if (g % h.world_size != 0)
    throw BorrowError(fmt::format("does not split over {} ranks (the per-rank batch must be a whole number)",
                                  h.world_size));
  return std::to_string(g / h.world_size);
}

// CosmoFlow logs the scaled (peak) rate and the scale: base_lr = peak / factor, reached from the
// warm-up start with linear scaling over base_batch_size = GBS / factor.
double cosmoflow_scale(const HparamSet& h) {
  return h.find("opt_learning_rate_warmup_factor") ? h.number("opt_learning_rate_warmup_factor") : 1.0;
}
std::string cosmoflow_base_lr(const HparamSet& h, const std::string& key) {
  const double scale = cosmoflow_scale(h);
  if (scale <= 0) throw BorrowError("opt_learning_rate_warmup_factor must be > 0 to recover the base rate");
  return sdk::json_number(h.number(key) / scale);
}
std::string cosmoflow_base_batch(const HparamSet& h, const std::string& key) {
  const double global = h.required("global_batch_size", key);
  const double base = global / cosmoflow_scale(h);
  if (base < 1 || std::fabs(base - std::round(base)) > 1e-9)
    throw BorrowError(fmt::format("global_batch_size {} / opt_learning_rate_warmup_factor {} is not a whole batch size",
                                  global, cosmoflow_scale(h)));
  return std::to_string(std::llround(base));
}
std::string linear(const HparamSet&, const std::string&) { return "linear"; }

std::string cosmoflow_decay_factors(const HparamSet& h, const std::string& key) {
  const YAML::Node v = h.node(key);
  if (v.IsSequence()) return json_text(v);
  const YAML::Node boundaries = h.node("opt_learning_rate_decay_boundary_epochs");
  if (boundaries.IsSequence() && boundaries.size() > 1)
    throw BorrowError(fmt::format(
        "one factor for {} boundaries: the reference logs only the largest factor, so the others are unknown; "
        "give the per-boundary factors as a list in a YAML",
        boundaries.size()));
  return fmt::format("[{}]", json_text(v));
}

std::string sgd_only(const HparamSet& h, const std::string& key) {
  const YAML::Node v = h.node(key);
  std::string name = is_json_string(v) ? v.Scalar() : "";
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  if (name != "sgd") throw BorrowError("MLPerf HPC rules: the CosmoFlow optimizer (opt_name) is sgd");
  return "";
}

std::string non_negative(const HparamSet& h, const std::string& key) {
  if (h.number(key) < 0) throw BorrowError("MLPerf HPC rules: must be >= 0");
  return "";
}

// Log keys of the closed-division tunables (REFERENCE §4.2) and the config keys of this project's
// workloads. A workload adds its rows here: its schema stays the single source of the rules,
// applied to the mapped config keys by Config::validate.
const HparamRule kRules[] = {
    {"cosmoflow", "global_batch_size", "train.batch_size", per_rank_batch},
    {"cosmoflow", "opt_name", nullptr, sgd_only},
    {"cosmoflow", "sgd_opt_momentum", "optimizer.momentum", as_is},
    {"cosmoflow", "opt_base_learning_rate", "optimizer.base_lr", cosmoflow_base_lr},
    {"cosmoflow", "opt_base_learning_rate", "optimizer.base_batch_size", cosmoflow_base_batch},
    {"cosmoflow", "opt_base_learning_rate", "optimizer.scaling", linear},
    {"cosmoflow", "opt_learning_rate_warmup_factor", nullptr, non_negative},
    {"cosmoflow", "opt_learning_rate_warmup_epochs", "optimizer.warmup_epochs", as_is},
    {"cosmoflow", "opt_learning_rate_decay_boundary_epochs", "optimizer.decay_boundaries", as_is},
    {"cosmoflow", "opt_learning_rate_decay_factor", "optimizer.decay_factors", cosmoflow_decay_factors},
    {"cosmoflow", "dropout", "model.dropout", as_is},
    {"cosmoflow", "opt_weight_decay", "optimizer.weight_decay", as_is},
    // DeepCAM logs the per-step hyperparameters as its config takes them (REFERENCE §2.8); the
    // schema holds the rules (opt_eps and opt_max_grad_norm fixed, opt_name Adam/AdamW/LAMB...).
    {"deepcam", "global_batch_size", "train.batch_size", per_rank_batch},
    {"deepcam", "batchnorm_group_size", "train.batchnorm_group_size", as_is},
    {"deepcam", "gradient_accumulation_frequency", "train.gradient_accumulation_frequency", as_is},
    {"deepcam", "opt_name", "optimizer.name", as_word},
    {"deepcam", "opt_lr", "optimizer.lr", as_is},
    {"deepcam", "opt_betas", "optimizer.betas", as_is},
    {"deepcam", "opt_eps", "optimizer.eps", as_is},
    {"deepcam", "opt_weight_decay", "optimizer.weight_decay", as_is},
    {"deepcam", "opt_max_grad_norm", "optimizer.max_grad_norm", as_is},
    {"deepcam", "scheduler_type", "scheduler.type", as_word},
    {"deepcam", "scheduler_milestones", "scheduler.milestones", as_is},
    {"deepcam", "scheduler_decay_rate", "scheduler.decay_rate", as_is},
    {"deepcam", "scheduler_t_max", "scheduler.t_max", as_is},
    {"deepcam", "scheduler_eta_min", "scheduler.eta_min", as_is},
    {"deepcam", "scheduler_lr_warmup_steps", "scheduler.lr_warmup_steps", as_is},
    {"deepcam", "scheduler_lr_warmup_factor", "scheduler.lr_warmup_factor", as_is},
};

bool known_key(const std::string& benchmark, const std::string& key) {
  return std::any_of(std::begin(kRules), std::end(kRules),
                     [&](const HparamRule& r) { return benchmark == r.benchmark && key == r.log_key; });
}

bool looks_like_mllog(const std::filesystem::path& source) {
  std::ifstream in(source);
  for (std::string line; std::getline(in, line);)
    if (line.find(":::MLLOG ") != std::string::npos) return true;
  return false;
}

Hparams from_log(const std::filesystem::path& source, const std::string& benchmark) {
  const ParsedLog log = read_mllog(source);
  if (!log.errors.empty()) throw BorrowError(log.errors.front());
  if (const LogLine* b = log.find("submission_benchmark"); b && b->value.IsScalar() && b->value.Scalar() != benchmark)
    throw BorrowError(fmt::format("{}:{}: the log is a {} run, this is {}", source.string(), b->line,
                                  b->value.Scalar(), benchmark));
  Hparams found;
  for (const LogLine& l : log.lines)
    if (known_key(benchmark, l.key) &&
        std::none_of(found.begin(), found.end(), [&](const auto& kv) { return kv.first == l.key; }))
      found.emplace_back(l.key, json_text(l.value));
  if (found.empty())
    throw BorrowError(fmt::format("{}: no {} hyperparameters in the log", source.string(), benchmark));
  return found;
}

Hparams from_yaml(const std::filesystem::path& source, const std::string& benchmark) {
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
      if (kv.second.Scalar() != benchmark)
        throw BorrowError(fmt::format("{}: benchmark {} does not match this run's {}", where, kv.second.Scalar(), benchmark));
      continue;
    }
    if (!known_key(benchmark, key))
      throw BorrowError(fmt::format("{}: '{}' is not a {} hyperparameter log key", where, key, benchmark));
    // Plain YAML scalars become JSON text; quoted ones (and words) are strings.
    const YAML::Node& v = kv.second;
    const bool text = v.IsScalar() && (v.Tag() == "!" || !json_number_value(v));
    found.emplace_back(key, text ? fmt::format("\"{}\"", v.Scalar()) : json_text(v));
  }
  return found;
}

}  // namespace

Hparams read_hparams(const std::filesystem::path& source, const std::string& benchmark) {
  if (!std::filesystem::is_regular_file(source))
    throw BorrowError(fmt::format("{}: no such file", source.string()));
  return looks_like_mllog(source) ? from_log(source, benchmark) : from_yaml(source, benchmark);
}

std::vector<std::string> map_hparams(const Hparams& hparams, const std::string& benchmark,
                                     const std::vector<MLPH_ParamSpec>& schema, bool closed, long long world_size,
                                     const std::string& source) {
  const HparamSet set{hparams, world_size};
  std::vector<std::string> sets;
  for (const HparamRule& rule : kRules) {
    if (benchmark != rule.benchmark || !set.find(rule.log_key)) continue;
    const std::string what = fmt::format("{}: {} = {}", source, rule.log_key, *set.find(rule.log_key));
    std::string value;
    try {
      value = rule.convert(set, rule.log_key);
    } catch (const std::exception& e) {
      throw BorrowError(fmt::format("{}: {}", what, e.what()));
    }
    if (!rule.config_key) continue;
    const std::string assignment = fmt::format("{}={}", rule.config_key, value);
    try {  // the workload's own rules, one key at a time so the error names this log key
      Config::load(schema, "", {assignment}).validate(schema, closed);
    } catch (const ConfigError& e) {
      throw BorrowError(fmt::format("{} (as {}): {}", what, assignment, e.what()));
    }
    sets.push_back(assignment);
  }
  return sets;
}

long long launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(name); v && std::atoll(v) > 0) return std::atoll(v);
  return 1;
}

std::vector<std::string> borrow_hparams(const std::filesystem::path& source, const RunOptions& options) {
  std::string workload = options.workload;
  if (workload.empty()) workload = Config::peek_workload(options.config_file).value_or("");
  if (workload.empty()) throw ConfigError("--borrow-hparams: no workload: give --workload NAME or `workload:` in the config");
  const LoadedPlugin plugin = PluginLoader(default_search_path(options.plugin_dirs)).load(MLPH_KIND_WORKLOAD, workload);
  size_t n = 0;
  const MLPH_ParamSpec* specs = plugin.api<MLPH_WorkloadApi>()->params(&n);
  const std::vector<MLPH_ParamSpec> schema(specs, specs + n);
  // The benchmark name is the workload's name for the workloads of this project.
  return map_hparams(read_hparams(source, workload), workload, schema, options.division != "open",
                     launcher_world_size(), source.string());
}

}  // namespace mlph::core
