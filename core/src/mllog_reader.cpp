#include "mlph/core/mllog_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "mlph/core/json.hpp"
#include "mlph/core/text_input.hpp"

namespace mlph::core {
namespace {

constexpr std::string_view kMarker = ":::MLLOG ";
constexpr size_t kMaxErrors = 100;  // a log of garbage lines is reported, not copied into memory

LogLine parse_line(std::string text, size_t line_number, size_t max_nodes, size_t& nodes) {
  const YAML::Node object = load_yaml(text.substr(kMarker.size()), max_nodes, &nodes);
  if (!object.IsMap()) throw std::runtime_error("not a JSON object");
  for (const char* field : {"time_ms", "key", "value", "metadata"})
    if (!object[field]) throw std::runtime_error(fmt::format("no \"{}\" field", field));
  LogLine l;
  l.line = line_number;
  const auto time = json_number_value(object["time_ms"]);
  if (!time || !std::isfinite(*time)) throw std::runtime_error("time_ms is not a finite number");
  l.time_ms = *time;
  l.key = object["key"].as<std::string>();
  l.event_type = object["event_type"] ? object["event_type"].as<std::string>() : "";
  l.value = object["value"];
  l.metadata = object["metadata"];
  l.text = std::move(text);
  return l;
}

}  // namespace

const LogLine* ParsedLog::find(const std::string& key) const {
  for (const LogLine& l : lines)
    if (l.key == key) return &l;
  return nullptr;
}

std::vector<const LogLine*> ParsedLog::all(const std::string& key) const {
  std::vector<const LogLine*> found;
  for (const LogLine& l : lines)
    if (l.key == key) found.push_back(&l);
  return found;
}

ParsedLog parse_mllog(std::string_view text, const std::filesystem::path& file) {
  ParsedLog log;
  log.file = file;
  size_t number = 0, nodes = 0, unreadable = 0;
  const auto refuse_line = [&](const std::string& why) {
    if (++unreadable <= kMaxErrors) log.errors.push_back(fmt::format("{}:{}: unreadable MLLOG line: {}", file.string(), number, why));
  };
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view raw = text.substr(start, end - start);
    start = end + 1;
    ++number;
    const size_t at = raw.rfind(kMarker);  // the parser strips everything before the last marker
    if (at == std::string_view::npos) continue;
    if (raw.size() > kMaxLogLineBytes) {
      refuse_line(fmt::format("{} bytes, more than the {} allowed for a line", raw.size(), kMaxLogLineBytes));
      continue;
    }
    std::string line(raw.substr(at));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    try {
      size_t line_nodes = 0;
      log.lines.push_back(parse_line(std::move(line), number, kMaxLogNodes - nodes, line_nodes));
      nodes += line_nodes;
    } catch (const YamlTooLarge&) {
      throw LogError(fmt::format("{}:{}: more than {} YAML nodes in the log's JSON: refused", file.string(), number,
                                 kMaxLogNodes));
    } catch (const YamlError& e) {
      refuse_line(e.reason);
    } catch (const std::exception& e) {
      refuse_line(e.what());
    }
  }
  if (unreadable > kMaxErrors) log.errors.push_back(fmt::format("{}: {} more unreadable MLLOG lines", file.string(), unreadable - kMaxErrors));
  return log;
}

ParsedLog read_mllog(const std::filesystem::path& file) {
  try {
    return parse_mllog(read_text_file(file, kMaxLogBytes, "MLPerf log"), file);
  } catch (const InputError& e) {
    throw LogError(e.what());
  }
}

bool is_json_string(const YAML::Node& v) { return v.IsScalar() && v.Tag() == "!"; }

std::optional<double> json_number_value(const YAML::Node& v) {
  if (!v.IsScalar() || v.Tag() == "!") return std::nullopt;
  const std::string& s = v.Scalar();
  if (s == "true" || s == "false" || s == "null" || s.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

bool is_json_number(const YAML::Node& v) { return json_number_value(v).has_value(); }

std::string json_text(const YAML::Node& v) {
  if (!v || v.IsNull()) return "null";
  if (v.IsScalar()) {  // a number, true, false or null as written; anything else as a JSON string
    const std::string& s = v.Scalar();
    const bool literal = !is_json_string(v) && (s == "true" || s == "false" || s == "null" || is_json_number(v));
    return literal ? s : json(s).text;
  }
  if (v.IsSequence()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_text(v[i]);
    return out + "]";
  }
  std::string out = "{";
  bool first = true;
  for (const auto& kv : v) {
    out += fmt::format("{}{}: {}", first ? "" : ", ", json(kv.first.Scalar()).text, json_text(kv.second));
    first = false;
  }
  return out + "}";
}

}  // namespace mlph::core
