// Numbers as mlperf_logging writes them (Python's json.dumps / repr), for the core's MLPerf log
// and for hyperparameters a workload hands over as JSON text.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlph::sdk {

// Shortest text that reads back as `v`, with ".0" on integral values: 3.0, 0.001, 1e-06, NaN.
inline std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  std::string s = buffer;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace mlph::sdk
