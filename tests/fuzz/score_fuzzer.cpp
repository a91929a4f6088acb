// An MLPerf log as mlperf-score reads it: through the core's log reader, then judged by the project's
// compliance rules of every ruleset and scored (times to train, seeds, counts, the metric per epoch)
// as `mlperf-score check` and `score` do with each result file. Bad input must end in LogError (beyond
// the reader's bounds); anything else must be a verdict. A time to train must come out finite and >= 0
// whenever the run counts: the score is a mean of them.
#include <cmath>
#include <cstdlib>
#include <string>

#include "compliance.hpp"
#include "fuzz.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "scoring.hpp"

using namespace mlph;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refusing<core::LogError>([&] {
    const core::ParsedLog log = core::parse_mllog(text, "result_0.txt");
    for (const std::string& ruleset : submission::rulesets()) {
      const submission::RunResult r = submission::score_log(log, ruleset);
      if (r.counts() && !(std::isfinite(r.minutes) && r.minutes >= 0)) std::abort();
    }
  });
  return 0;
}
