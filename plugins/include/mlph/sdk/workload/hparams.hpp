// Hyperparameter borrowing for workloads (ABI 1.3): a table maps another run's logged
// hyperparameters (MLPerf log key -> JSON text) to this workload's config keys, one row per
// assignment. The core reads the log, hands over the keys the table names, and checks what comes
// back against the workload's schema and closed rules; the workload only converts.
//
//   const sdk::HparamRule kRules[] = {
//       {"global_batch_size", "train.batch_size", sdk::per_rank_batch},
//       {"opt_lr", "optimizer.lr", sdk::as_is},
//       {"opt_name", nullptr, sgd_only},  // checked only
//   };
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/util/numbers.hpp"
#include "mlph/workload.h"

namespace mlph::sdk {

// Another run's hyperparameters as the core hands them over, and the rank count of this run.
// Accessors throw sdk::Error with the reason only; borrow() puts the log key and value in front.
class LoggedHparams {
 public:
  LoggedHparams(const MLPH_KeyValue* logged, size_t n, int64_t world_size) : world_size_(world_size) {
    for (size_t i = 0; i < n; ++i) values_.emplace_back(logged[i].key, logged[i].value ? logged[i].value : "null");
  }

  int64_t world_size() const { return world_size_; }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // The JSON text of `key` (which must be logged).
  const std::string& text(const std::string& key) const {
    const std::string* v = find(key);
    if (!v) fail(MLPH_INVALID_ARGUMENT, "not logged");
    return *v;
  }
  double number(const std::string& key) const {
    const auto v = json_number_value(text(key));
    if (!v) fail(MLPH_INVALID_ARGUMENT, "must be a number");
    return *v;
  }
  // A JSON string as the plain word a string config key holds.
  std::string word(const std::string& key) const {
    auto v = json_string_value(text(key));
    if (!v) fail(MLPH_INVALID_ARGUMENT, "must be a string");
    return std::move(*v);
  }
  // A number that the conversion of `by` needs as well.
  double required(const std::string& key, const std::string& by) const {
    if (!has(key)) fail(MLPH_INVALID_ARGUMENT, "needs " + key + " as well");
    try {
      return number(key);
    } catch (const Error& e) {
      fail(MLPH_INVALID_ARGUMENT, std::string(e.what()) + " (needed by " + by + ")");
    }
  }

 private:
  const std::string* find(const std::string& key) const {
    for (const auto& [k, v] : values_)
      if (k == key) return &v;
    return nullptr;
  }
  std::vector<std::pair<std::string, std::string>> values_;
  int64_t world_size_;
};

// How one logged value converts: the config value (YAML text), or a throw with the reason.
using HparamConverter = std::string (*)(const LoggedHparams& logged, const std::string& log_key);

// One row of a workload's borrowing table: a log key, the config key it sets (nullptr: the value is
// only checked), and the conversion. A log key may have several rows.
struct HparamRule {
  const char* log_key;
  const char* config_key;
  HparamConverter convert;
};

// ---- conversions more than one workload uses ------------------------------------------------

// The value as logged: numbers and lists are YAML as they are.
inline std::string as_is(const LoggedHparams& h, const std::string& key) { return h.text(key); }
// A JSON string as the word a string key holds.
inline std::string as_word(const LoggedHparams& h, const std::string& key) { return h.word(key); }
// A global batch size as the per-rank train.batch_size of this run. An integer, read as one: a
// logged 1e300 is refused, not cast.
inline std::string per_rank_batch(const LoggedHparams& h, const std::string& key) {
  const std::optional<int64_t> global = integer_value<int64_t>(h.text(key));
  if (!global || *global <= 0) fail(MLPH_INVALID_ARGUMENT, "must be a positive integer");
  if (h.world_size() < 1 || *global % h.world_size() != 0)
    fail(MLPH_INVALID_ARGUMENT, "does not split over " + std::to_string(h.world_size()) +
                                    " ranks (the per-rank batch must be a whole number)");
  return std::to_string(*global / h.world_size());
}

// Applies `rules` in order to the logged values they name: `assign(log_key, config_key, value)` for
// each row with a config key. A conversion's error becomes "<log key> = <value>: <why>".
inline void borrow(std::span<const HparamRule> rules, const LoggedHparams& logged,
                   const std::function<void(const char*, const char*, const std::string&)>& assign) {
  for (const HparamRule& rule : rules) {
    if (!logged.has(rule.log_key)) continue;
    std::string value;
    try {
      value = rule.convert(logged, rule.log_key);
    } catch (const std::exception& e) {
      fail(MLPH_INVALID_ARGUMENT, std::string(rule.log_key) + " = " + logged.text(rule.log_key) + ": " + e.what());
    }
    if (rule.config_key) assign(rule.log_key, rule.config_key, value);
  }
}

// The distinct log keys of `rules`, in order: MLPH_BenchmarkInfo.hparam_log_keys.
inline std::vector<const char*> log_keys(std::span<const HparamRule> rules) {
  std::vector<const char*> keys;
  for (const HparamRule& rule : rules) {
    bool seen = false;
    for (const char* k : keys) seen = seen || std::string_view(k) == rule.log_key;
    if (!seen) keys.push_back(rule.log_key);
  }
  return keys;
}

}  // namespace mlph::sdk
