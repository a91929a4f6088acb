#include "mlph/core/json.hpp"

#include <fmt/format.h>

#include "mlph/core/text_input.hpp"
#include "mlph/sdk/util/json.hpp"

namespace mlph::core {

Json json(double v) { return {sdk::json_number(v)}; }
Json json(long long v) { return {fmt::format("{}", v)}; }
Json json(int v) { return {fmt::format("{}", v)}; }
Json json(unsigned long long v) { return {fmt::format("{}", v)}; }
Json json(unsigned long v) { return {fmt::format("{}", v)}; }
Json json(bool v) { return {v ? "true" : "false"}; }
Json json(const char* v) { return json(std::string(v)); }
Json json(const std::string& v) {
  std::string out = "\"";
  out += escaped(v);
  out += '"';
  return {out};
}
Json json_list(const std::vector<double>& v, bool integers) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? ", " : "") + (integers ? fmt::format("{}", static_cast<long long>(v[i])) : json(v[i]).text);
  return {out + "]"};
}
Json json_raw(std::string encoded) { return {std::move(encoded)}; }

}  // namespace mlph::core
