// CosmoFlow and DeepCAM as the core sees them through their plug-ins (schema, typed settings,
// borrowing table), linked in directly: the config and MLPerf-log harnesses run each input
// through both.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "cosmoflow/borrow.hpp"
#include "cosmoflow/schema.hpp"
#include "cosmoflow/settings.hpp"
#include "deepcam/borrow.hpp"
#include "deepcam/schema.hpp"
#include "deepcam/settings.hpp"
#include "mlph/core/benchmark.hpp"
#include "mlph/core/config.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/workload/hparams.hpp"

namespace mlph::fuzz {

struct Workload {
  std::vector<MLPH_ParamSpec> schema;  // the core's keys and the workload's, as mlperf-run checks them
  void (*settings)(const sdk::Options& config);
  std::span<const sdk::HparamRule> rules;
  core::BenchmarkFacts facts;  // the benchmark's name and the log keys it borrows
};

inline const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = [] {
    const auto make = [](const char* name, const MLPH_ParamSpec* (*specs)(size_t*), void (*settings)(const sdk::Options&),
                         std::span<const sdk::HparamRule> rules) {
      Workload w{core::core_schema(), settings, rules, {}};
      size_t n = 0;
      const MLPH_ParamSpec* own = specs(&n);
      w.schema.insert(w.schema.end(), own, own + n);
      w.facts.stated = true;
      w.facts.name = name;
      for (const char* key : sdk::log_keys(rules)) w.facts.hparam_log_keys.emplace_back(key);
      return w;
    };
    return std::vector<Workload>{
        make("cosmoflow", cosmoflow::param_specs, [](const sdk::Options& c) { cosmoflow::parse_settings(c); },
             cosmoflow::hparam_rules()),
        make("deepcam", deepcam::param_specs, [](const sdk::Options& c) { deepcam::parse_settings(c); },
             deepcam::hparam_rules()),
    };
  }();
  return all;
}

// A validated config as the workload receives it (every key, and the rank count).
inline sdk::KeyValues workload_config(const core::Config& config, int64_t world_size) {
  sdk::KeyValues kv;
  for (const auto& [key, value] : config.values()) kv.add(key, value.text);
  kv.add("run.world_size", std::to_string(world_size));
  return kv;
}

}  // namespace mlph::fuzz
