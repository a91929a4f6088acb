// JSON values as mlperf_logging writes them (Python's json.dumps): what the MLPerf logger writes and
// what the log readers turn logged values back into.
#pragma once

#include <string>
#include <vector>

namespace mlph::core {

// A JSON value, already encoded. Build with the helpers below.
struct Json {
  std::string text = "null";
};
Json json(double v);  // Python repr: 3.0, 0.001, 1e-06, NaN, Infinity
Json json(long long v);
Json json(int v);
Json json(unsigned long long v);
Json json(unsigned long v);
Json json(bool v);
Json json(const char* v);
Json json(const std::string& v);
Json json_list(const std::vector<double>& v, bool integers);
Json json_raw(std::string encoded);  // trusted, already-valid JSON text

}  // namespace mlph::core
