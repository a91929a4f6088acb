#include "mlph/core/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace mlph::core {

Progress::Progress(bool enabled, uint32_t max_epochs, uint64_t steps_per_epoch, uint64_t samples_per_step,
                   uint32_t first_epoch)
    : enabled_(enabled),
      tty_(isatty(fileno(stderr)) != 0),
      max_epochs_(max_epochs),
      first_epoch_(first_epoch),
      steps_per_epoch_(steps_per_epoch),
      samples_per_step_(samples_per_step) {}

namespace {
std::string duration(double seconds) {
  const long s = static_cast<long>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}
}  // namespace

void Progress::step(uint32_t epoch, uint64_t step, double loss) {
  ++steps_done_;
  if (!enabled_) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  // A terminal updates a few times a second; a file gets a line every ~10% of an epoch.
  const bool due = tty_ ? now - last_print_ > std::chrono::milliseconds(200)
                        : (step + 1) % std::max<uint64_t>(1, steps_per_epoch_ / 10) == 0;
  if (!due) return;
  last_print_ = now;
  const double rate = elapsed > 0 ? static_cast<double>(steps_done_ * samples_per_step_) / elapsed : 0.0;
  const uint64_t steps_left = static_cast<uint64_t>(max_epochs_ - first_epoch_) * steps_per_epoch_ - steps_done_;
  const double eta = rate > 0 ? static_cast<double>(steps_left * samples_per_step_) / rate : 0.0;
  const std::string line = fmt::format("epoch {}/{}  step {}/{}  {:.2f} samples/s  loss {:.4f}  ETA<= {}", epoch + 1,
                                       max_epochs_, step + 1, steps_per_epoch_, rate, loss, duration(eta));
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    live_line_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::epoch_done(uint32_t epoch, const std::string& metric_key, double metric, double target, double seconds) {
  message(fmt::format("epoch {}/{} done in {:.1f}s: {} {:.4f} (target {})", epoch + 1, max_epochs_, seconds,
                      metric_key, metric, target));
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  clear_live_line();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

void Progress::clear_live_line() {
  if (live_line_) std::fprintf(stderr, "\r\033[K");
  live_line_ = false;
}

}  // namespace mlph::core
