#include "mlph/core/config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "mlph/core/text_input.hpp"
#include "mlph/sdk/util/numbers.hpp"

namespace mlph::core {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<MLPH_ParamSpec>& schema) {
  std::string best;
  size_t best_distance = 4;  // farther than this is no help
  for (const MLPH_ParamSpec& spec : schema) {
    const size_t length = std::strlen(spec.key);
    if (std::max(length, key.size()) - std::min(length, key.size()) >= best_distance) continue;  // no closer
    size_t d = edit_distance(key, spec.key);
    if (d < best_distance) best_distance = d, best = spec.key;
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

const MLPH_ParamSpec* find_spec(const std::vector<MLPH_ParamSpec>& schema, const std::string& key) {
  for (const MLPH_ParamSpec& spec : schema)
    if (key == spec.key) return &spec;
  return nullptr;
}

bool is_passthrough(const std::string& key) {
  for (const std::string& prefix : passthrough_prefixes())
    if (key.rfind(prefix, 0) == 0 && key.size() > prefix.size()) return true;
  return false;
}

// YAML node -> canonical text: scalars as written, sequences as flow "[a, b]".
std::string to_text(const YAML::Node& node) {
  if (node.IsSequence()) {
    std::string out = "[";
    for (size_t i = 0; i < node.size(); ++i) {
      if (!node[i].IsScalar())
        throw ConfigError(fmt::format("line {}: lists may hold only scalars", node[i].Mark().line + 1));
      out += (i ? ", " : "") + node[i].Scalar();
    }
    return out + "]";
  }
  if (node.IsNull()) return "";
  return node.Scalar();
}

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& file,
             std::vector<std::pair<std::string, ConfigValue>>& out) {
  for (const auto& item : node) {
    const std::string key = prefix.empty() ? item.first.Scalar() : prefix + "." + item.first.Scalar();
    const std::string origin = fmt::format("{}:{}", file, item.first.Mark().line + 1);
    if (item.second.IsMap())
      flatten(item.second, key, file, out);
    else
      out.emplace_back(key, ConfigValue{to_text(item.second), origin});
  }
}

std::string read_file(const std::string& file) {
  try {
    return read_text_file(file, kMaxConfigBytes, "config file");
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
}

YAML::Node parse_text(const std::string& text, const std::string& file) {
  try {
    return load_yaml(text, kMaxConfigNodes);
  } catch (const YamlError& e) {
    throw ConfigError(fmt::format("{}:{}: {}", file, e.line, e.reason));
  }
}

std::string where(const std::string& key, const ConfigValue& v) {
  return fmt::format("{}: '{}' = {}", v.origin, key, v.text.empty() ? "(empty)" : escaped(v.text, 120));
}

void check_bounds(const MLPH_ParamSpec& spec, const std::string& key, const ConfigValue& v, double x) {
  const bool low = (spec.bounds & MLPH_BOUND_MIN) &&
                   ((spec.bounds & MLPH_BOUND_MIN_EXCLUSIVE) ? !(x > spec.min) : !(x >= spec.min));
  const bool high = (spec.bounds & MLPH_BOUND_MAX) &&
                    ((spec.bounds & MLPH_BOUND_MAX_EXCLUSIVE) ? !(x < spec.max) : !(x <= spec.max));
  if (!low && !high && !std::isnan(x)) return;
  std::string range;
  if (spec.bounds & MLPH_BOUND_MIN) range += fmt::format("{} {}", (spec.bounds & MLPH_BOUND_MIN_EXCLUSIVE) ? ">" : ">=", spec.min);
  if (spec.bounds & MLPH_BOUND_MAX)
    range += fmt::format("{}{} {}", range.empty() ? "" : " and ", (spec.bounds & MLPH_BOUND_MAX_EXCLUSIVE) ? "<" : "<=", spec.max);
  // A tunable's bounds are its closed-division rule; other keys' bounds are what the workload can run.
  const bool rule = spec.closed == MLPH_CLOSED_TUNABLE && spec.rule && *spec.rule;
  throw ConfigError(fmt::format("{} is out of range: must be {}{}", where(key, v), range,
                                rule ? fmt::format(" ({})", spec.rule) : ""));
}

// The value parsed as its type (a number for INT and FLOAT, each element for lists), then bounded.
void check_type(const MLPH_ParamSpec& spec, const std::string& key, const ConfigValue& v) {
  std::vector<double> numbers;
  try {
    switch (spec.type) {
      case MLPH_TYPE_INT: numbers = {static_cast<double>(as_int(key, v.text))}; break;
      case MLPH_TYPE_FLOAT: numbers = {as_number(key, v.text)}; break;
      case MLPH_TYPE_BOOL: as_bool(key, v.text); break;
      case MLPH_TYPE_STRING: break;
      case MLPH_TYPE_INT_LIST:
        for (const std::string& item : list_items(key, v.text)) numbers.push_back(static_cast<double>(as_int(key, item)));
        break;
      case MLPH_TYPE_FLOAT_LIST:
        for (const std::string& item : list_items(key, v.text)) numbers.push_back(as_number(key, item));
        break;
    }
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", v.origin, e.what()));
  }
  for (double x : numbers) check_bounds(spec, key, v, x);
}

// Two YAML texts mean the same value of this type.
bool same_value(const MLPH_ParamSpec& spec, const std::string& key, const std::string& a, const std::string& b) {
  switch (spec.type) {
    case MLPH_TYPE_INT:
    case MLPH_TYPE_FLOAT: return as_number(key, a) == as_number(key, b);
    case MLPH_TYPE_BOOL: return as_bool(key, a) == as_bool(key, b);
    case MLPH_TYPE_INT_LIST:
    case MLPH_TYPE_FLOAT_LIST: return as_number_list(key, a) == as_number_list(key, b);
    case MLPH_TYPE_STRING: return a == b;
  }
  return false;
}

}  // namespace

double as_number(const std::string& key, const std::string& text) {
  try {
    return sdk::parse_finite(text, key);
  } catch (const sdk::Error& e) {
    throw ConfigError(e.what());
  }
}

long long as_int(const std::string& key, const std::string& text) {
  try {
    return sdk::parse_integer<long long>(text, key);
  } catch (const sdk::Error& e) {
    throw ConfigError(e.what());
  }
}

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 16 ^ device()) % 2147483647ULL + 1;
}

bool as_bool(const std::string& key, const std::string& text) {
  if (const std::optional<bool> value = sdk::bool_value(text)) return *value;
  throw ConfigError(fmt::format("'{}': '{}' is not true or false", key, escaped(text, 120)));
}

std::vector<std::string> list_items(const std::string& key, const std::string& text) {
  YAML::Node node;
  try {
    node = load_yaml(text, kMaxConfigNodes);
  } catch (const YamlError& e) {
    throw ConfigError(fmt::format("'{}': {}", key, e.reason.starts_with("invalid YAML") ? "'" + escaped(text, 120) + "' is not a list" : e.reason));
  }
  if (node.IsNull()) return {};
  if (!node.IsSequence()) throw ConfigError(fmt::format("'{}': '{}' is not a list such as [16, 32]", key, escaped(text, 120)));
  std::vector<std::string> items;
  for (const auto& item : node) {
    if (!item.IsScalar()) throw ConfigError(fmt::format("'{}': '{}' is not a list of numbers", key, escaped(text, 120)));
    items.push_back(item.Scalar());
  }
  return items;
}

std::vector<double> as_number_list(const std::string& key, const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : list_items(key, text)) out.push_back(as_number(key, item));
  return out;
}

std::vector<MLPH_ParamSpec> core_schema() {
  const auto free = [](const char* key, MLPH_ParamType type, const char* value, const char* help) {
    return MLPH_ParamSpec{key, type, value, help, MLPH_CLOSED_FREE, 0, 0, 0, ""};
  };
  return {
      free("plugins.backend", MLPH_TYPE_STRING, "reference", "compute backend plug-in"),
      free("plugins.comms", MLPH_TYPE_STRING, "local", "comms plug-in"),
      free("plugins.storage", MLPH_TYPE_STRING, "posix", "storage plug-in"),
      free("mlperf.org", MLPH_TYPE_STRING, "mlperf-hpc", "submission_org"),
      free("mlperf.platform", MLPH_TYPE_STRING, "", "submission_platform (default: the host name)"),
      free("mlperf.status", MLPH_TYPE_STRING, "onprem", "submission_status: cloud, onprem, preview or research"),
      free("mlperf.division", MLPH_TYPE_STRING, "closed", "closed or open"),
      {"mlperf.accelerators_per_node", MLPH_TYPE_INT, "0", "accelerators_per_node (0 for CPU runs)", MLPH_CLOSED_FREE,
       MLPH_BOUND_MIN, 0, 0, ""},
      {"run.seed", MLPH_TYPE_INT, "0", "seed of weights and data order; 0 draws a fresh one", MLPH_CLOSED_FREE,
       MLPH_BOUND_MIN, 0, 0, ""},
      free("run.staging", MLPH_TYPE_STRING, "timed",
           "timed: stage data after run_start (hpc 1.0/2.0 rules, the reference); untimed: before it (allowed from hpc 3.0)"),
      free("parallel.spatial", MLPH_TYPE_STRING, "1",
           "ranks per sample along each spatial dim, e.g. 2x1x1 (D, H, W): each rank holds its block of every sample, "
           "halos exchanged before each convolution; the ranks count in sample groups of that many; 1: none"),
      {"run.stop_grace_s", MLPH_TYPE_FLOAT, "20",
       "with --checkpoint-dir, or under srun: seconds after SIGTERM or SIGINT the run may take to end its step (and "
       "save a checkpoint) before it is ended where it is (under Slurm's KillWait, 30 s by default; SIGUSR1 waits for "
       "the step however long)", MLPH_CLOSED_FREE,
       MLPH_BOUND_MIN | MLPH_BOUND_MAX, 0, 3600, "at most an hour"},
      {"data.read_timeout_s", MLPH_TYPE_FLOAT, "600",
       "seconds a batch may take to read before the run is ended as stuck (a reader hung on a file)", MLPH_CLOSED_FREE,
       MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE | MLPH_BOUND_MAX, 0, 86400, "at most a day"},
      {"data.readers", MLPH_TYPE_INT, "0",
       "reader threads, each decoding a sample at a time, as many batches ahead of the step as they need; 0: half "
       "the CPUs the process may run on (its affinity), 1 to 8", MLPH_CLOSED_FREE, MLPH_BOUND_MIN | MLPH_BOUND_MAX, 0,
       8, "0 (auto) to 8"},
  };
}

std::optional<std::string> Config::peek(const std::string& file, const std::string& key) {
  if (file.empty()) return std::nullopt;
  YAML::Node node = parse_text(read_file(file), file);
  for (size_t start = 0; start <= key.size();) {
    const size_t dot = std::min(key.find('.', start), key.size());
    if (!node.IsMap()) return std::nullopt;
    const YAML::Node child = std::as_const(node)[key.substr(start, dot - start)];  // const: looks, adds nothing
    if (!child) return std::nullopt;
    node.reset(child);  // (assigning would overwrite the parent's value)
    start = dot + 1;
  }
  return node.IsScalar() ? std::optional(node.Scalar()) : std::nullopt;
}

std::optional<std::string> Config::peek_workload(const std::string& file) { return peek(file, "workload"); }

Config Config::load(const std::vector<MLPH_ParamSpec>& schema, const std::string& file,
                    const std::vector<std::string>& sets) {
  return load_text(schema, file.empty() ? "" : read_file(file), file, sets);
}

Config Config::load_text(const std::vector<MLPH_ParamSpec>& schema, const std::string& text, const std::string& file,
                         const std::vector<std::string>& sets) {
  Config config;
  for (const MLPH_ParamSpec& spec : schema) config.values_[spec.key] = {spec.default_value, "default"};

  std::vector<std::pair<std::string, ConfigValue>> layered;
  const YAML::Node root = parse_text(text, file);
  if (!root.IsNull() && !root.IsMap()) throw ConfigError(fmt::format("{}:1: expected a mapping of keys", file));
  if (root.IsMap()) flatten(root, "", file, layered);
  for (const std::string& assignment : sets) {
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(fmt::format("--set '{}': expected key=value", escaped(assignment, 120)));
    layered.emplace_back(assignment.substr(0, eq), ConfigValue{assignment.substr(eq + 1), "--set"});
  }
  for (auto& [key, value] : layered) {
    if (key == "workload") continue;  // chooses the plug-in, read by peek_workload
    if (find_spec(schema, key)) {
      config.values_[key] = value;
    } else if (is_passthrough(key)) {
      config.passthrough_[key] = value;
    } else {
      throw ConfigError(fmt::format("{}: unknown key '{}'{}", value.origin, escaped(key, 120), suggestion(key, schema)));
    }
  }
  return config;
}

const ConfigValue& Config::entry(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw ConfigError(fmt::format("internal: no config key '{}'", key));
  return it->second;
}
const std::string& Config::get(const std::string& key) const { return entry(key).text; }

void Config::validate(const std::vector<MLPH_ParamSpec>& schema, bool closed_division) const {
  for (const MLPH_ParamSpec& spec : schema) {
    const ConfigValue& v = entry(spec.key);
    check_type(spec, spec.key, v);
    if (closed_division && spec.closed == MLPH_CLOSED_FIXED && !same_value(spec, spec.key, v.text, spec.default_value))
      throw ConfigError(fmt::format("{}: not allowed in the closed division, which fixes it at {}{}", where(spec.key, v),
                                    spec.default_value, spec.rule && *spec.rule ? fmt::format(" ({})", spec.rule) : ""));
  }
}

}  // namespace mlph::core
