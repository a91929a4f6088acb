#include "mlph/core/run_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mlph/core/host.hpp"

namespace mlph::core {

Stopwatch::Stopwatch(double& total) : total_(total), start_(host_api()->now_seconds()) {}
Stopwatch::~Stopwatch() { total_ += host_api()->now_seconds() - start_; }

void report_breakdown(MlLogger& log, double started, const TimeBreakdown& time, const MLPH_StorageHandle& storage,
                      const std::optional<MLPH_StageStats>& staged_stats, bool rank0) {
  const double total = std::max(host_api()->now_seconds() - started, 1e-9);
  const double other = std::max(total - time.staging_s - time.train_s - time.eval_s - time.checkpoint_s, 0.0);
  const auto share = [&](double s) { return json(std::round(1000.0 * s / total) / 1000.0).text; };
  log.event("mlph_time_breakdown",
            json_raw(fmt::format("{{\"total_s\": {}, \"staging_s\": {}, \"train_s\": {}, \"eval_s\": {}, \"checkpoint_s\": {}, "
                                 "\"other_s\": {}, \"staging_share\": {}, \"train_share\": {}, \"eval_share\": {}, "
                                 "\"checkpoint_share\": {}, \"other_share\": {}}}",
                                 json(total).text, json(time.staging_s).text, json(time.train_s).text,
                                 json(time.eval_s).text, json(time.checkpoint_s).text, json(other).text,
                                 share(time.staging_s), share(time.train_s), share(time.eval_s),
                                 share(time.checkpoint_s), share(other))));
  MLPH_IoStats io{sizeof(MLPH_IoStats), nullptr, 0, 0, 0.0};
  MLPH_Error* error = storage.api->stats(storage.storage, &io);
  if (error) host_api()->error_free(error);
  const MLPH_StageStats staged = staged_stats.value_or(MLPH_StageStats{});
  const auto rate = [](double bytes, double s) { return s > 0 ? bytes / s : 0.0; };
  log.event("mlph_io", json_raw(fmt::format(
                           "{{\"staged_bytes\": {}, \"staged_files\": {}, \"staging_read_bytes\": {}, \"staging_s\": {}, "
                           "\"staging_bytes_per_s\": {}, \"read_bytes\": {}, \"read_files\": {}, \"read_s\": {}, "
                           "\"read_bytes_per_s\": {}}}",
                           staged.bytes_written, staged.files, staged.bytes_read, json(staged.seconds).text,
                           json(rate(staged.bytes_written, staged.seconds)).text, io.bytes_read, io.files_read,
                           json(io.read_seconds).text, json(rate(io.bytes_read, io.read_seconds)).text)));
  if (!rank0) return;
  const auto pct = [&](double s) { return 100.0 * s / total; };
  const std::string checkpoints =
      time.checkpoint_s > 0 ? fmt::format(", checkpoints {:.1f} s ({:.1f}%)", time.checkpoint_s, pct(time.checkpoint_s)) : "";
  std::fprintf(stderr, "time: %.1f s: staging %.1f s (%.1f%%), training %.1f s (%.1f%%), evaluation %.1f s (%.1f%%)%s, other %.1f s (%.1f%%)\n",
               total, time.staging_s, pct(time.staging_s), time.train_s, pct(time.train_s), time.eval_s,
               pct(time.eval_s), checkpoints.c_str(), other, pct(other));
  if (staged_stats)
    std::fprintf(stderr, "staging (rank 0): %llu files, %.1f MiB written (%.1f MiB read) in %.2f s: %.1f MiB/s\n",
                 static_cast<unsigned long long>(staged.files), staged.bytes_written / 1048576.0, staged.bytes_read / 1048576.0,
                 staged.seconds, rate(staged.bytes_written, staged.seconds) / 1048576.0);
  std::fprintf(stderr, "reading (rank 0): %llu files, %.1f MiB in %.2f s of reads: %.1f MiB/s\n",
               static_cast<unsigned long long>(io.files_read), io.bytes_read / 1048576.0, io.read_seconds,
               rate(io.bytes_read, io.read_seconds) / 1048576.0);
}

}  // namespace mlph::core
