// Key/value options as a C++ map, with the "unknown option is an error" rule built in.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mlph/common.h"
#include "mlph/sdk/error.hpp"

namespace mlph::sdk {

class Options {
 public:
  Options() = default;
  Options(const MLPH_KeyValue* kv, size_t n) {
    for (size_t i = 0; i < n; ++i) values_[kv[i].key] = kv[i].value ? kv[i].value : "";
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::string get(const std::string& key, const std::string& fallback = "") const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  long long get_int(const std::string& key, long long fallback) const {
    if (!has(key)) return fallback;
    try {
      size_t used = 0;
      long long v = std::stoll(get(key), &used);
      if (used == get(key).size()) return v;
    } catch (const std::exception&) {
    }
    fail(MLPH_INVALID_ARGUMENT, "option '" + key + "': '" + get(key) + "' is not an integer");
  }
  // A number; a value that is not one is an error naming the key.
  double get_number(const std::string& key) const {
    try {
      return std::stod(get(key));
    } catch (const std::exception&) {
      fail(MLPH_INVALID_ARGUMENT, "'" + key + "' = '" + get(key) + "' is not a number");
    }
  }
  // A list of numbers written as YAML flow ("[1, 2]") or separated by commas or spaces.
  std::vector<double> get_numbers(const std::string& key) const {
    std::string text = get(key);
    for (char& ch : text)
      if (ch == '[' || ch == ']' || ch == ',') ch = ' ';
    std::istringstream in(text);
    std::vector<double> out;
    for (double v; in >> v;) out.push_back(v);
    return out;
  }
  // Throws naming the first key not in `known`.
  void allow_only(const std::vector<std::string>& known, const std::string& owner) const {
    for (const auto& [key, value] : values_) {
      bool ok = false;
      for (const auto& k : known) ok = ok || k == key;
      if (!ok) fail(MLPH_INVALID_ARGUMENT, owner + ": unknown option '" + key + "'");
    }
  }
  const std::map<std::string, std::string>& all() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace mlph::sdk
