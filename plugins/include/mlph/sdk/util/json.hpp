// Numbers as mlperf_logging writes them (Python's json.dumps / repr), for the core's MLPerf log
// and for hyperparameters a workload hands over as JSON text; and views of such text (the
// hyperparameters a workload borrows arrive that way).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlph::sdk {

// Shortest text that reads back as `v`, with ".0" on integral values: 3.0, 0.001, 1e-06, NaN.
inline std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buffer[40];
  int digits = 1;  // the fewest significant digits that read back as v
  for (; digits < 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*e", digits - 1, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  std::snprintf(buffer, sizeof buffer, "%.*e", digits - 1, v);
  // Like repr: positional for decimal exponents -4..15 (10.0, not 1e+01), else d.ddde+XX.
  const int exponent = std::atoi(std::strchr(buffer, 'e') + 1);
  if (exponent >= -4 && exponent < 16) std::snprintf(buffer, sizeof buffer, "%.*f", std::max(digits - 1 - exponent, 0), v);
  std::string s = buffer;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// ---- reading JSON text: compact values as the core passes them ("0.5", "[16, 32]", "\"sgd\"") ----

// A JSON number (integer or float; NaN and Infinity as mlperf_logging writes them), not a string,
// bool or null.
inline std::optional<double> json_number_value(std::string_view text) {
  const std::string s(text);
  if (s.empty() || s.front() == '"' || s == "true" || s == "false" || s == "null") return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// The contents of a JSON string (the quotes removed; escapes are kept as written).
inline std::optional<std::string> json_string_value(std::string_view text) {
  if (text.size() < 2 || text.front() != '"' || text.back() != '"') return std::nullopt;
  return std::string(text.substr(1, text.size() - 2));
}

// The items of a flat JSON list, each as text: "[20, 22]" gives {"20", "22"}; not a list: nullopt.
inline std::optional<std::vector<std::string>> json_list_items(std::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  std::vector<std::string> items;
  const std::string_view inner = text.substr(1, text.size() - 2);
  if (inner.find_first_not_of(' ') == std::string_view::npos) return items;
  for (size_t start = 0;;) {
    const size_t comma = inner.find(',', start);
    std::string_view item = inner.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    item.remove_prefix(std::min(item.find_first_not_of(' '), item.size()));
    item.remove_suffix(item.size() - std::min(item.find_last_not_of(' ') + 1, item.size()));
    items.emplace_back(item);
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

}  // namespace mlph::sdk
