// The report at the end of a run: where the time went (staging, training, evaluation, the rest;
// the paper's Fig. 1) and the I/O bandwidth of staging and of reading, as log keys the MLPerf
// checker ignores and as lines on the terminal.
#pragma once

#include <optional>

#include "mlph/core/mllog.hpp"
#include "mlph/storage.h"

namespace mlph::core {

struct TimeBreakdown {
  double staging_s = 0, train_s = 0, eval_s = 0, checkpoint_s = 0;
};

// Adds the seconds of its scope to `total`.
class Stopwatch {
 public:
  explicit Stopwatch(double& total);
  ~Stopwatch();
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double& total_;
  double start_;
};

// Logs this rank's figures since `started` (the host clock): mlph_time_breakdown and mlph_io; rank 0
// also prints them.
void report_breakdown(MlLogger& log, double started, const TimeBreakdown& time, const MLPH_StorageHandle& storage,
                      const std::optional<MLPH_StageStats>& staged, bool rank0);

}  // namespace mlph::core
