// Reading MLPerf logs back: the lines mlperf_logging's parser accepts (text before ":::MLLOG " is
// ignored, the rest is one JSON object with time_ms, key, value and metadata). Used by
// hyperparameter borrowing and by the submission tools (scoring, compliance, reports).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mlph::core {

// One line naming the file and line that could not be read.
class LogError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LogLine {
  size_t line = 0;  // 1-based line number in the file
  double time_ms = 0;
  std::string event_type, key;
  YAML::Node value;     // the JSON value (JSON is read as YAML flow syntax)
  YAML::Node metadata;  // a map; may lack keys
  std::string text;     // the line from ":::MLLOG " on

  bool has_metadata(const std::string& name) const { return metadata.IsMap() && metadata[name]; }
};

struct ParsedLog {
  std::filesystem::path file;
  std::vector<LogLine> lines;
  std::vector<std::string> errors;  // "file:line: why" for lines with the marker that do not parse

  // The first line with `key`, or nullptr.
  const LogLine* find(const std::string& key) const;
  std::vector<const LogLine*> all(const std::string& key) const;
};

// Reads every MLLOG line of `file` (latin-1 bytes kept as they are). Throws LogError only when
// the file cannot be read or is beyond the bounds of text_input.hpp (its size, its YAML nodes in
// all); unparsable lines (too long, not JSON, with YAML anchors or aliases) go to `errors`, the
// first 100 of them and a count of the rest.
ParsedLog read_mllog(const std::filesystem::path& file);
// The same for the log's text, read from `file`.
ParsedLog parse_mllog(std::string_view text, const std::filesystem::path& file);

// JSON value views. A JSON string is a quoted scalar (tag "!"), a number or bool a plain one.
bool is_json_string(const YAML::Node& v);
bool is_json_number(const YAML::Node& v);  // int or float, not bool/null/NaN text
std::optional<double> json_number_value(const YAML::Node& v);
// The value as compact JSON-ish text for messages and for config values: 0.5, "sgd", [16, 32].
std::string json_text(const YAML::Node& v);

}  // namespace mlph::core
