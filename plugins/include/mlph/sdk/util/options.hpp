// Key/value options as a C++ map, with the "unknown option is an error" rule built in.
#pragma once

#include <deque>
#include <concepts>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/common.h"
#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/numbers.hpp"

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
  // An integer of the setting's own type T (and within [min, max] when given): a value that is
  // not one, or does not fit, is an error naming the key and the range; `fallback` if absent.
  template <std::integral T>
  T get_int(const std::string& key, T fallback, T min = std::numeric_limits<T>::min(),
            T max = std::numeric_limits<T>::max()) const {
    return has(key) ? parse_integer<T>(get(key), key, min, max) : fallback;
  }
  // A switch: `fallback` if absent, else the value as bool_value (numbers.hpp) reads it; any other
  // value is MLPH_INVALID_ARGUMENT naming `owner` (who reads it: "reference backend"), key and value.
  bool get_bool(const std::string& key, bool fallback, const std::string& owner) const {
    if (!has(key)) return fallback;
    const std::string value = get(key);
    const std::optional<bool> on = bool_value(value);
    if (!on) fail(MLPH_INVALID_ARGUMENT, owner + ": option '" + key + "' is '" + value + "'; expected 0, 1, false or true");
    return *on;
  }
  // A finite number; a value that is not one is an error naming the key.
  double get_number(const std::string& key) const { return parse_finite(get(key), key); }
  // A list of finite numbers written as YAML flow ("[1, 2]") or separated by commas or spaces.
  std::vector<double> get_numbers(const std::string& key) const {
    std::vector<double> out;
    for (const std::string& item : list_items(key)) out.push_back(parse_finite(item, key));
    return out;
  }
  // A list of integers of type T, each as get_int checks it.
  template <std::integral T>
  std::vector<T> get_ints(const std::string& key) const {
    std::vector<T> out;
    for (const std::string& item : list_items(key)) out.push_back(parse_integer<T>(item, key));
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
  // These options less `keys`: what a plug-in that wraps another passes on to it.
  Options without(std::initializer_list<std::string_view> keys) const {
    Options rest = *this;
    for (std::string_view key : keys) rest.values_.erase(std::string(key));
    return rest;
  }

 private:
  std::vector<std::string> list_items(const std::string& key) const {
    std::string text = get(key);
    for (char& ch : text)
      if (ch == '[' || ch == ']' || ch == ',') ch = ' ';
    std::istringstream in(text);
    std::vector<std::string> items;
    for (std::string item; in >> item;) items.push_back(item);
    return items;
  }

  std::map<std::string, std::string> values_;
};

// Owned key/value strings and the MLPH_KeyValue array that points into them: options to pass to a
// plug-in, or the hyperparameters a workload logs. The array stays valid as entries are added and
// when the list is moved (a deque never relocates its elements); copies are refused, since a copied
// array would point into the original.
class KeyValues {
 public:
  KeyValues() = default;
  explicit KeyValues(const std::vector<std::pair<std::string, std::string>>& pairs) {
    for (const auto& [key, value] : pairs) add(key, value);
  }
  KeyValues(KeyValues&&) = default;
  KeyValues& operator=(KeyValues&&) = default;
  KeyValues(const KeyValues&) = delete;
  KeyValues& operator=(const KeyValues&) = delete;

  void add(std::string key, std::string value) {
    const std::string& k = strings_.emplace_back(std::move(key));
    const std::string& v = strings_.emplace_back(std::move(value));
    view_.push_back({k.c_str(), v.c_str()});
  }
  const MLPH_KeyValue* data() const { return view_.data(); }
  size_t size() const { return view_.size(); }

 private:
  std::deque<std::string> strings_;
  std::vector<MLPH_KeyValue> view_;
};

}  // namespace mlph::sdk
