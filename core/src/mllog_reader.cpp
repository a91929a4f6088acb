#include "mlph/core/mllog_reader.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>

namespace mlph::core {
namespace {

constexpr std::string_view kMarker = ":::MLLOG ";

LogLine parse_line(std::string text, size_t line_number) {
  const YAML::Node object = YAML::Load(text.substr(kMarker.size()));
  if (!object.IsMap()) throw std::runtime_error("not a JSON object");
  for (const char* field : {"time_ms", "key", "value", "metadata"})
    if (!object[field]) throw std::runtime_error(fmt::format("no \"{}\" field", field));
  LogLine l;
  l.line = line_number;
  const auto time = json_number_value(object["time_ms"]);
  if (!time) throw std::runtime_error("time_ms is not a number");
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

ParsedLog read_mllog(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw LogError(fmt::format("{}: cannot open the log", file.string()));
  ParsedLog log;
  log.file = file;
  size_t number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const size_t at = raw.rfind(kMarker);  // the parser strips everything before the last marker
    if (at == std::string::npos) continue;
    std::string text = raw.substr(at);
    while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.pop_back();
    try {
      log.lines.push_back(parse_line(std::move(text), number));
    } catch (const std::exception& e) {
      log.errors.push_back(fmt::format("{}:{}: unreadable MLLOG line: {}", file.string(), number, e.what()));
    }
  }
  return log;
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
  if (v.IsScalar()) return is_json_string(v) ? fmt::format("\"{}\"", v.Scalar()) : v.Scalar();
  if (v.IsSequence()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_text(v[i]);
    return out + "]";
  }
  std::string out = "{";
  bool first = true;
  for (const auto& kv : v) {
    out += fmt::format("{}\"{}\": {}", first ? "" : ", ", kv.first.Scalar(), json_text(kv.second));
    first = false;
  }
  return out + "}";
}

}  // namespace mlph::core
