// Numbers as mlperf_logging writes them (Python's json.dumps / repr), for the core's MLPerf log
// and for hyperparameters a workload hands over as JSON text.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace mlph::sdk
