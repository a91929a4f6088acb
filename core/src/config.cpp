#include "mlph/core/config.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

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

YAML::Node parse_file(const std::string& file) {
  if (!std::filesystem::is_regular_file(file)) throw ConfigError(fmt::format("{}: config file not found", file));
  try {
    return YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}: invalid YAML: {}", file, e.mark.line + 1, e.msg));
  }
}

std::string where(const std::string& key, const ConfigValue& v) {
  return fmt::format("{}: '{}' = {}", v.origin, key, v.text.empty() ? "(empty)" : v.text);
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
  throw ConfigError(fmt::format("{} is out of range: must be {}{}", where(key, v), range,
                                spec.rule && *spec.rule ? fmt::format(" ({})", spec.rule) : ""));
}

void check_type(const MLPH_ParamSpec& spec, const std::string& key, const ConfigValue& v) {
  switch (spec.type) {
    case MLPH_TYPE_INT: check_bounds(spec, key, v, static_cast<double>(as_int(key, v.text))); break;
    case MLPH_TYPE_FLOAT: check_bounds(spec, key, v, as_number(key, v.text)); break;
    case MLPH_TYPE_BOOL: as_bool(key, v.text); break;
    case MLPH_TYPE_STRING: break;
    case MLPH_TYPE_INT_LIST:
    case MLPH_TYPE_FLOAT_LIST:
      for (double x : as_number_list(key, v.text)) {
        if (spec.type == MLPH_TYPE_INT_LIST && x != std::floor(x))
          throw ConfigError(fmt::format("{}: every element must be an integer", where(key, v)));
        check_bounds(spec, key, v, x);
      }
      break;
  }
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
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("'{}': '{}' is not a number", key, text));
}

long long as_int(const std::string& key, const std::string& text) {
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("'{}': '{}' is not an integer", key, text));
}

bool as_bool(const std::string& key, const std::string& text) {
  if (text == "true" || text == "True" || text == "yes" || text == "1") return true;
  if (text == "false" || text == "False" || text == "no" || text == "0") return false;
  throw ConfigError(fmt::format("'{}': '{}' is not true or false", key, text));
}

std::vector<double> as_number_list(const std::string& key, const std::string& text) {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception&) {
    throw ConfigError(fmt::format("'{}': '{}' is not a list", key, text));
  }
  if (node.IsNull()) return {};
  if (!node.IsSequence()) throw ConfigError(fmt::format("'{}': '{}' is not a list such as [16, 32]", key, text));
  std::vector<double> out;
  for (const auto& item : node) out.push_back(as_number(key, item.Scalar()));
  return out;
}

std::optional<std::string> Config::peek_workload(const std::string& file) {
  if (file.empty()) return std::nullopt;
  YAML::Node root = parse_file(file);
  if (root.IsMap() && root["workload"] && root["workload"].IsScalar()) return root["workload"].Scalar();
  return std::nullopt;
}

Config Config::load(const std::vector<MLPH_ParamSpec>& schema, const std::string& file,
                    const std::vector<std::string>& sets) {
  Config config;
  for (const MLPH_ParamSpec& spec : schema) config.values_[spec.key] = {spec.default_value, "default"};

  std::vector<std::pair<std::string, ConfigValue>> layered;
  if (!file.empty()) {
    YAML::Node root = parse_file(file);
    if (!root.IsNull() && !root.IsMap()) throw ConfigError(fmt::format("{}:1: expected a mapping of keys", file));
    if (root.IsMap()) flatten(root, "", file, layered);
  }
  for (const std::string& assignment : sets) {
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(fmt::format("--set '{}': expected key=value", assignment));
    layered.emplace_back(assignment.substr(0, eq), ConfigValue{assignment.substr(eq + 1), "--set"});
  }
  for (auto& [key, value] : layered) {
    if (key == "workload") continue;  // chooses the plug-in, read by peek_workload
    if (find_spec(schema, key)) {
      config.values_[key] = value;
    } else if (is_passthrough(key)) {
      config.passthrough_[key] = value;
    } else {
      throw ConfigError(fmt::format("{}: unknown key '{}'{}", value.origin, key, suggestion(key, schema)));
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
