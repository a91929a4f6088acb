#include "compliance.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace mlph::submission {
namespace {

using core::LogLine;

// Evaluating a test failed the way a Python TypeError/KeyError would: counts as a failure.
struct NotApplicable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The per-rule-file state the YAML's `s` dictionary holds.
class State {
 public:
  double get(const std::string& key) const {
    const auto it = values_.find(key);
    if (it == values_.end()) throw NotApplicable(fmt::format("no state '{}'", key));
    return it->second;
  }
  void set(const std::string& key, double v) { values_[key] = v; }

 private:
  std::map<std::string, double> values_;
};

double num(const YAML::Node& v) {
  if (v.IsScalar() && !core::is_json_string(v) && (v.Scalar() == "true" || v.Scalar() == "false"))
    return v.Scalar() == "true";
  const auto n = core::json_number_value(v);
  if (!n) throw NotApplicable("not a number");
  return *n;
}
bool is(const YAML::Node& v, std::initializer_list<const char*> names) {
  return core::is_json_string(v) && std::any_of(names.begin(), names.end(), [&](const char* n) { return v.Scalar() == n; });
}
bool non_empty(const YAML::Node& v) { return !(core::is_json_string(v) && v.Scalar().empty()); }
bool has(const LogLine& l, const char* name) { return l.has_metadata(name); }
size_t length(const YAML::Node& v) {
  if (v.IsSequence()) return v.size();
  if (core::is_json_string(v)) return v.Scalar().size();
  throw NotApplicable("no length");
}

enum class Req { kNone, kExactlyOne, kAtLeastOne, kAtLeastOneOr };

using Queue = std::deque<std::string>;
using Test = std::function<bool(const LogLine&, State&)>;
using Post = std::function<void(const LogLine&, State&, Queue&)>;

struct Check {
  std::string text;  // as the YAML writes it, quoted in the verdict
  Test test;
};

struct KeyRule {
  std::string name;
  Req req = Req::kNone;
  std::string alternative;  // for AT_LEAST_ONE_OR
  std::vector<Check> checks;
  Post post;
  std::optional<Check> at_least_one;
};

struct RuleFile {
  std::vector<KeyRule> rules;
  std::map<std::string, double> begin;
};

KeyRule key(std::string name, Req req, std::vector<Check> checks = {}, Post post = {}) {
  return {std::move(name), req, "", std::move(checks), std::move(post), std::nullopt};
}
KeyRule either(std::string name, std::string alternative, std::vector<Check> checks) {
  return {std::move(name), Req::kAtLeastOneOr, std::move(alternative), std::move(checks), {}, std::nullopt};
}
Check value_check(std::string text, std::function<bool(const YAML::Node&)> f) {
  return {std::move(text), [f](const LogLine& l, State&) { return f(l.value); }};
}
Check metadata_has(const char* name) {
  return {fmt::format("'{}' in v['metadata']", name), [name](const LogLine& l, State&) { return has(l, name); }};
}
Check state_is(const char* name, bool expected) {
  return {fmt::format("{}s['{}']", expected ? "" : "not ", name),
          [name, expected](const LogLine&, State& s) { return (s.get(name) != 0) == expected; }};
}
Post set_state(const char* name) {
  return [name](const LogLine&, State& s, Queue&) { s.set(name, 1); };
}
Check positive() { return value_check("v['value'] > 0", [](auto& v) { return num(v) > 0; }); }
Check non_negative() { return value_check("v['value'] >= 0", [](auto& v) { return num(v) >= 0; }); }
Check not_empty() { return value_check("v['value'] != ''", non_empty); }
KeyRule target(const char* name, const char* text, std::function<bool(double)> reached) {
  KeyRule r = key(name, Req::kAtLeastOne, {metadata_has("epoch_num")});
  r.at_least_one = value_check(text, [reached](auto& v) { return reached(num(v)); });
  return r;
}

const std::vector<std::string> kBenchmarks3 = {"deepcam", "cosmoflow", "oc20", "openfold"};
const std::vector<std::string> kBenchmarks2 = {"deepcam", "cosmoflow", "oc20"};

RuleFile common(const std::string& ruleset) {
  RuleFile f;
  f.begin = {{"init_started", 0}, {"init_stopped", 0}, {"run_started", 0}, {"run_stopped", 0},
             {"in_epoch", 0},     {"last_epoch", 0},   {"in_block", 0},    {"block_first_epoch", -1},
             {"first_init_start", 9e99}};
  const std::string prefix = "hpc_" + ruleset;
  f.rules = {
      key("submission_org", Req::kExactlyOne, {not_empty()}),
      key("submission_platform", Req::kExactlyOne, {not_empty()}),
      key("submission_division", Req::kExactlyOne,
          {value_check("v['value'] in ['closed', 'open']", [](auto& v) { return is(v, {"closed", "open"}); })},
          [prefix](const LogLine& l, State&, Queue& q) { q.push_back(fmt::format("{}/{}_common.yaml", prefix, l.value.Scalar())); }),
      key("submission_status", Req::kExactlyOne,
          {value_check("v['value'] in ['cloud', 'onprem', 'preview', 'research']",
                       [](auto& v) { return is(v, {"cloud", "onprem", "preview", "research"}); })}),
      key("cache_clear", Req::kAtLeastOne),
      key("init_start", Req::kAtLeastOne, {state_is("init_stopped", false), state_is("run_started", false)},
          [](const LogLine& l, State& s, Queue&) {
            s.set("init_started", 1);
            s.set("first_init_start", std::min(s.get("first_init_start"), l.time_ms));
          }),
      key("init_stop", Req::kExactlyOne,
          {state_is("init_started", true), state_is("run_started", false),
           {"ll.timestamp - s['first_init_start'] < (30*60*1e3)",
            [](const LogLine& l, State& s) { return l.time_ms - s.get("first_init_start") < 30 * 60 * 1e3; }}},
          set_state("init_stopped")),
      // Up to v2.0 the staging had to be timed: it must come after run_start.
      key("staging_start", Req::kNone, ruleset == "3.0.0" ? std::vector<Check>{} : std::vector<Check>{state_is("run_started", true)},
          set_state("staging_started")),
      key("staging_stop", Req::kNone, {state_is("staging_started", true)}),
      key("run_start", Req::kExactlyOne, {state_is("init_stopped", true)}, set_state("run_started")),
      key("run_stop", Req::kExactlyOne, {state_is("run_started", true), metadata_has("status")}, set_state("run_stopped")),
      either("block_start", "epoch_start",
             {state_is("run_started", true), metadata_has("epoch_count"), metadata_has("first_epoch_num"),
              {"v['metadata']['epoch_count'] > 0", [](const LogLine& l, State&) { return num(l.metadata["epoch_count"]) > 0; }}}),
      either("block_stop", "epoch_stop", {metadata_has("first_epoch_num")}),
      either("epoch_start", "block_start", {metadata_has("epoch_num")}),
      either("epoch_stop", "block_stop", {metadata_has("epoch_num")}),
      either("eval_start", "block_start", {metadata_has("epoch_num")}),
      either("eval_stop", "block_stop", {metadata_has("epoch_num")}),
      key("train_samples", Req::kExactlyOne, {not_empty()}),
      key("eval_samples", Req::kExactlyOne, {not_empty()}),
  };
  return f;
}

RuleFile division_common(const std::string& ruleset, const std::string& division) {
  const auto& benchmarks = ruleset == "3.0.0" ? kBenchmarks3 : kBenchmarks2;
  std::string list;
  for (const auto& b : benchmarks) list += (list.empty() ? "'" : ", '") + b + "'";
  const std::string prefix = "hpc_" + ruleset;
  RuleFile f;
  f.rules.push_back(key("submission_benchmark", Req::kExactlyOne,
                        {value_check(fmt::format("v['value'] in [{}]", list),
                                     [benchmarks](auto& v) {
                                       return core::is_json_string(v) &&
                                              std::find(benchmarks.begin(), benchmarks.end(), v.Scalar()) != benchmarks.end();
                                     })},
                        [prefix, division](const LogLine& l, State&, Queue& q) {
                          q.push_back(fmt::format("{}/{}_{}.yaml", prefix, division, l.value.Scalar()));
                        }));
  if (division == "closed") {
    f.rules.push_back(key("gradient_accumulation_steps", Req::kNone, {positive()}));
    f.rules.push_back(key("gradient_accumulation_frequency", Req::kNone, {positive()}));
    f.rules.push_back(key("number_of_nodes", Req::kExactlyOne, {positive()}));
    f.rules.push_back(key("accelerators_per_node", Req::kExactlyOne, {non_negative()}));
  }
  return f;
}

const auto kMae = [](double v) { return v <= 0.124 && v > 0; };
const auto kIou = [](double v) { return v >= 0.82 && v <= 1; };

RuleFile benchmark_rules(const std::string& ruleset, const std::string& name) {
  const std::string prefix = "hpc_" + ruleset;
  RuleFile f;
  if (name == "open_cosmoflow") f.rules = {target("eval_error", "v['value'] <= 0.124 and v['value'] > 0.", kMae)};
  if (name == "open_deepcam") f.rules = {target("eval_accuracy", "v['value'] >= 0.82 and v['value'] <= 1.", kIou)};
  if (name == "closed_cosmoflow")
    f.rules = {
        key("global_batch_size", Req::kExactlyOne, {positive()}),
        key("opt_name", Req::kExactlyOne, {value_check("v['value'] in ['sgd', 'SGD']", [](auto& v) { return is(v, {"sgd", "SGD"}); })}),
        key("opt_base_learning_rate", Req::kExactlyOne, {non_negative()}),
        key("opt_learning_rate_warmup_epochs", Req::kExactlyOne, {non_negative()}),
        key("opt_learning_rate_warmup_factor", Req::kExactlyOne, {non_negative()}),
        key("opt_learning_rate_decay_boundary_epochs", Req::kExactlyOne),
        key("opt_learning_rate_decay_factor", Req::kExactlyOne),
        key("dropout", Req::kNone, {value_check("v['value'] >= 0. and v['value'] < 1.", [](auto& v) { return num(v) >= 0 && num(v) < 1; })}),
        key("opt_weight_decay", Req::kNone, {non_negative()}),
        target("eval_error", "v['value'] <= 0.124 and v['value'] > 0.", kMae),
    };
  if (name == "closed_deepcam")
    f.rules = {
        key("gradient_accumulation_frequency", Req::kExactlyOne, {positive()}),
        key("seed", Req::kExactlyOne, {positive()}),
        key("global_batch_size", Req::kExactlyOne, {positive()}),
        key("batchnorm_group_size", Req::kExactlyOne, {positive()}),
        key("opt_name", Req::kExactlyOne,
            {value_check("v['value'] in ['Adam', 'AdamW', 'LAMB']", [](auto& v) { return is(v, {"Adam", "AdamW", "LAMB"}); })},
            [prefix](const LogLine& l, State&, Queue& q) {
              if (is(l.value, {"LAMB"})) q.push_back(prefix + "/closed_deepcam_lamb.yaml");
            }),
        key("opt_lr", Req::kExactlyOne, {positive()}),
        key("opt_betas", Req::kExactlyOne, {value_check("len(v['value']) == 2", [](auto& v) { return length(v) == 2; })}),
        key("opt_eps", Req::kExactlyOne,
            {value_check("math.isclose(v['value'], 1e-6)", [](auto& v) { return std::fabs(num(v) - 1e-6) <= 1e-9 * 1e-6; })}),
        key("scheduler_type", Req::kExactlyOne,
            {value_check("v['value'] in ['multistep', 'cosine_annealing']",
                         [](auto& v) { return is(v, {"multistep", "cosine_annealing"}); })},
            [prefix](const LogLine& l, State&, Queue& q) {
              std::string type = core::is_json_string(l.value) ? l.value.Scalar() : "";
              std::transform(type.begin(), type.end(), type.begin(), ::tolower);
              q.push_back(fmt::format("{}/closed_deepcam_{}.yaml", prefix, type));
            }),
        key("scheduler_lr_warmup_steps", Req::kExactlyOne, {non_negative()}),
        key("scheduler_lr_warmup_factor", Req::kExactlyOne, {value_check("v['value'] >= 1.", [](auto& v) { return num(v) >= 1; })}),
        key("train_samples", Req::kExactlyOne, {value_check("v['value'] == 121266", [](auto& v) { return num(v) == 121266; })}),
        key("eval_samples", Req::kExactlyOne, {value_check("v['value'] == 15158", [](auto& v) { return num(v) == 15158; })}),
        target("eval_accuracy", "v['value'] >= 0.82 and v['value'] <= 1.", kIou),
    };
  if (name == "closed_deepcam_lamb")
    f.rules = {
        key("opt_bias_correction", Req::kExactlyOne, {value_check("v['value']", [](auto& v) { return num(v) != 0; })}),
        key("opt_grad_averaging", Req::kExactlyOne, {value_check("v['value']", [](auto& v) { return num(v) != 0; })}),
        key("opt_max_grad_norm", Req::kExactlyOne, {value_check("v['value'] == 1.", [](auto& v) { return num(v) == 1; })}),
    };
  if (name == "closed_deepcam_multistep")
    f.rules = {
        key("scheduler_milestones", Req::kExactlyOne, {value_check("len(v['value']) >= 0", [](auto& v) { return length(v) >= 0; })}),
        key("scheduler_decay_rate", Req::kExactlyOne, {value_check("v['value'] <= 1.", [](auto& v) { return num(v) <= 1; })}),
    };
  if (name == "closed_deepcam_cosine_annealing")
    f.rules = {
        key("scheduler_t_max", Req::kExactlyOne, {value_check("v['value'] >= 1.", [](auto& v) { return num(v) >= 1; })}),
        key("scheduler_eta_min", Req::kExactlyOne, {value_check("v['value'] >= 0.", [](auto& v) { return num(v) >= 0; })}),
    };
  return f;
}

std::optional<RuleFile> rule_file(const std::string& path, const std::string& ruleset) {
  const std::string name = path.substr(path.find('/') + 1, path.size() - path.find('/') - 1 - 5);  // drop dir, .yaml
  if (name == "common") return common(ruleset);
  if (name == "closed_common" || name == "open_common") return division_common(ruleset, name.substr(0, name.find('_')));
  RuleFile f = benchmark_rules(ruleset, name);
  if (f.rules.empty()) return std::nullopt;
  return f;
}

bool same_values(const std::vector<const LogLine*>& lines) {
  return std::all_of(lines.begin(), lines.end(),
                     [&](const LogLine* l) { return core::json_text(l->value) == core::json_text(lines[0]->value); });
}

class Checker {
 public:
  Checker(const core::ParsedLog& log, std::string ruleset) : log_(log), ruleset_(std::move(ruleset)) {}

  Verdict run() {
    for (const std::string& e : log_.errors) general_.push_back(e);
    if (!log_.errors.empty()) general_.push_back(fmt::format("{}: log lines had parsing errors", name()));
    if (log_.lines.empty()) general_.push_back(fmt::format("{}: no log lines", name()));
    // mlperf-run --resume: the clock ran only over the epochs after the checkpoint (MLPerf rules: a
    // timed result is one uninterrupted run).
    if (const LogLine* resumed = log_.find("mlph_resumed_from"))
      general_.push_back(fmt::format("{}:{}: mlph_resumed_from: a run resumed from a checkpoint is not a timed MLPerf "
                                     "result (its time to train covers only the epochs after it)",
                                     name(), resumed->line));
    Queue queue = {fmt::format("hpc_{}/common.yaml", ruleset_)};
    while (!queue.empty()) {
      const std::string file = queue.front();
      queue.pop_front();
      const auto rules = rule_file(file, ruleset_);
      if (!rules) {
        general_.push_back(fmt::format("{}: no rules for {} (the project knows cosmoflow and deepcam)", name(), file));
        continue;
      }
      apply(*rules, file, queue);
    }
    Verdict v;
    for (const auto& [k, messages] : by_key_) v.errors.insert(v.errors.end(), messages.begin(), messages.end());
    v.errors.insert(v.errors.end(), general_.begin(), general_.end());
    v.warnings = warnings_;
    v.valid = v.errors.empty();
    return v;
  }

 private:
  std::string name() const { return log_.file.string(); }

  void apply(const RuleFile& file, const std::string& file_name, Queue& queue) {
    State state;
    for (const auto& [k, v] : file.begin) state.set(k, v);
    std::map<std::string, const KeyRule*> rules;
    for (const KeyRule& r : file.rules) {
      rules[r.name] = &r;
      by_key_.erase(r.name);  // this file's rule for the key replaces an earlier file's verdict
    }
    std::map<std::string, std::vector<const LogLine*>> seen;
    std::map<std::string, int> at_least_one_passed;
    std::set<std::string> submission_done;
    for (const LogLine& l : log_.lines) {
      const auto it = rules.find(l.key);
      if (it == rules.end()) continue;  // keys a rule file does not name are allowed
      const KeyRule& rule = *it->second;
      seen[l.key].push_back(&l);
      if (!submission_done.count(l.key)) {  // submission_* keys: only their first occurrence is checked
        for (const Check& c : rule.checks) {
          bool passed = false;
          try {
            passed = c.test(l, state);
          } catch (const NotApplicable&) {
          }
          if (!passed) fail(l.key, fmt::format("{}:{}: {}: failed check: {} [{}]", name(), l.line, l.key, c.text, file_name));
        }
        if (rule.post) {
          try {
            rule.post(l, state, queue);
          } catch (const std::exception&) {
            fail(l.key, fmt::format("{}:{}: {}: cannot apply the rule [{}]", name(), l.line, l.key, file_name));
          }
        }
      }
      if (rule.at_least_one) {
        at_least_one_passed.emplace(l.key, 0);
        try {
          at_least_one_passed[l.key] += rule.at_least_one->test(l, state);
        } catch (const NotApplicable&) {
        }
      }
      if (l.key.rfind("submission_", 0) == 0) submission_done.insert(l.key);
    }
    for (const auto& [k, passed] : at_least_one_passed)
      if (passed == 0)
        general_.push_back(fmt::format("{}: {}: no value passes: {} (the quality target) [{}]", name(), k,
                                       rules[k]->at_least_one->text, file_name));
    std::set<std::pair<std::string, std::string>> missing_pairs;
    for (const KeyRule& r : file.rules) {
      const auto& lines = seen[r.name];
      if (r.req == Req::kExactlyOne && lines.size() != 1) {
        if (!lines.empty() && same_values(lines))
          warnings_.push_back(fmt::format("{}: {} logged {} times with the same value", name(), r.name, lines.size()));
        else
          fail(r.name, fmt::format("{}: required EXACTLY_ONE occurrence of '{}' but found {} [{}]", name(), r.name,
                                   lines.size(), file_name));
      }
      if (r.req == Req::kAtLeastOne && lines.empty())
        fail(r.name, fmt::format("{}: required AT_LEAST_ONE occurrence of '{}' but found 0 [{}]", name(), r.name, file_name));
      if (r.req == Req::kAtLeastOneOr && lines.empty() && seen[r.alternative].empty() &&
          missing_pairs.insert(std::minmax(r.name, r.alternative)).second)
        general_.push_back(fmt::format("{}: required AT_LEAST_ONE occurrence of '{}' or '{}' [{}]", name(), r.name,
                                       r.alternative, file_name));
    }
  }

  void fail(const std::string& key, std::string message) { by_key_[key].push_back(std::move(message)); }

  const core::ParsedLog& log_;
  std::string ruleset_;
  std::map<std::string, std::vector<std::string>> by_key_;
  std::vector<std::string> general_, warnings_;
};

}  // namespace

const std::vector<std::string>& rulesets() {
  static const std::vector<std::string> names = {"1.0.0", "2.0.0", "3.0.0"};
  return names;
}

Verdict check_log(const core::ParsedLog& log, const std::string& ruleset) {
  if (std::find(rulesets().begin(), rulesets().end(), ruleset) == rulesets().end())
    throw std::invalid_argument(fmt::format("unknown hpc ruleset {} (1.0.0, 2.0.0 or 3.0.0)", ruleset));
  return Checker(log, ruleset).run();
}

}  // namespace mlph::submission
