// MLPerf logs and YAML of log keys (--borrow-hparams, mlperf-score): the text through the core's
// log reader (bounded lines and nodes; JSON values read as YAML) with every value as JSON text;
// then as another run's hyperparameters for each workload: read (a log or a YAML of log keys),
// converted by the workload's borrowing table for 1, 3 and 512 ranks, and each assignment checked
// by the config as mlperf-run does. Bad input must end in LogError or BorrowError (the core's
// reading), sdk::Error (a conversion) or ConfigError (a rule), nothing else.
#include "fuzz.hpp"
#include "mlph/core/borrow.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "workloads.hpp"

using namespace mlph;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refusing<core::LogError>([&] {
    const core::ParsedLog log = core::parse_mllog(text, "fuzz.txt");
    for (const core::LogLine& l : log.lines) {
      core::json_text(l.value);
      core::json_text(l.metadata);
    }
  });
  for (const fuzz::Workload& w : fuzz::workloads()) {
    fuzz::refusing<core::BorrowError>([&] {
      const sdk::KeyValues logged(core::parse_hparams(text, "fuzz.txt", w.facts));
      for (const int64_t ranks : {1, 3, 512}) {
        fuzz::refusing<sdk::Error>([&] {
          sdk::borrow(w.rules, sdk::LoggedHparams(logged.data(), logged.size(), ranks),
                      [&](const char*, const char* config_key, const std::string& value) {
                        fuzz::refusing<core::ConfigError>([&] {
                          core::Config::load(w.schema, "", {std::string(config_key) + "=" + value}).validate(w.schema, true);
                        });
                      });
        });
      }
    });
  }
  return 0;
}
