// YAML configs (--config): the text through the core's Config (bounded reading of YAML, keys
// flattened, each value's type and bounds in both divisions) with the core's keys and each
// workload's; and a config that validates into that workload's typed settings, where a narrowing,
// an undefined shift or a division by zero from a config value would show under UBSan. A bad
// config must end in ConfigError (the core) or sdk::Error (the workload), nothing else.
#include "fuzz.hpp"
#include "workloads.hpp"

using namespace mlph;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const fuzz::Workload& w : fuzz::workloads()) {
    fuzz::refusing<core::ConfigError>([&] {
      const core::Config config = core::Config::load_text(w.schema, text, "fuzz.yaml", {});
      for (const bool closed : {true, false}) {
        try {
          config.validate(w.schema, closed);
        } catch (const core::ConfigError&) {
          continue;
        }
        for (const int64_t ranks : {1, 6}) {
          const sdk::KeyValues kv = fuzz::workload_config(config, ranks);
          fuzz::refusing<sdk::Error>([&] { w.settings(sdk::Options(kv.data(), kv.size())); });
        }
      }
    });
  }
  return 0;
}
