// Another run's hyperparameters, read from its MLPerf log or from a YAML of log keys: the keys a
// workload borrows, as JSON text. Text in, no plug-in needed (the fuzzing harness calls it as is).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "mlph/core/borrow.hpp"
#include "mlph/core/json.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "mlph/core/text_input.hpp"

namespace mlph::core {
namespace {

bool listed(const BenchmarkFacts& facts, const std::string& key) {
  return std::find(facts.hparam_log_keys.begin(), facts.hparam_log_keys.end(), key) != facts.hparam_log_keys.end();
}

Hparams from_log(const std::string& text, const std::string& source, const BenchmarkFacts& facts) {
  ParsedLog log;
  try {
    log = parse_mllog(text, source);
  } catch (const LogError& e) {
    throw BorrowError(e.what());
  }
  if (!log.errors.empty()) throw BorrowError(log.errors.front());
  if (const LogLine* b = log.find("submission_benchmark"); b && b->value.IsScalar() && b->value.Scalar() != facts.name)
    throw BorrowError(fmt::format("{}:{}: the log is a {} run, this is {}", source, b->line, escaped(b->value.Scalar()), facts.name));
  Hparams found;
  for (const LogLine& l : log.lines)
    if (listed(facts, l.key) && std::none_of(found.begin(), found.end(), [&](const auto& kv) { return kv.first == l.key; }))
      found.emplace_back(l.key, json_text(l.value));
  if (found.empty()) throw BorrowError(fmt::format("{}: no {} hyperparameters in the log", source, facts.name));
  return found;
}

Hparams from_yaml(const std::string& text, const std::string& source, const BenchmarkFacts& facts) {
  YAML::Node root;
  try {
    root = load_yaml(text, kMaxConfigNodes);
  } catch (const YamlError& e) {
    throw BorrowError(fmt::format("{}:{}: {}", source, e.line, e.reason));
  }
  if (!root.IsMap()) throw BorrowError(fmt::format("{}: expected a map of MLPerf log keys to values", source));
  Hparams found;
  for (const auto& kv : root) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : json_text(kv.first);
    const std::string where = fmt::format("{}:{}", source, kv.first.Mark().line + 1);
    if (key == "benchmark") {
      if (!kv.second.IsScalar() || kv.second.Scalar() != facts.name)
        throw BorrowError(fmt::format("{}: benchmark {} does not match this run's {}", where,
                                      kv.second.IsScalar() ? escaped(kv.second.Scalar()) : json_text(kv.second), facts.name));
      continue;
    }
    if (!listed(facts, key))
      throw BorrowError(fmt::format("{}: '{}' is not a {} hyperparameter log key", where, escaped(key), facts.name));
    // Plain YAML scalars become JSON text; quoted ones (and words) are strings.
    const YAML::Node& v = kv.second;
    const bool word = v.IsScalar() && (v.Tag() == "!" || !json_number_value(v));
    found.emplace_back(key, word ? json(v.Scalar()).text : json_text(v));
  }
  return found;
}

}  // namespace

Hparams parse_hparams(const std::string& text, const std::string& source, const BenchmarkFacts& facts) {
  return text.find(":::MLLOG ") != std::string::npos ? from_log(text, source, facts) : from_yaml(text, source, facts);
}

}  // namespace mlph::core
