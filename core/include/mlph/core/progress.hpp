// What a person watching the run sees: on a terminal one live line (epoch, step, samples/s, loss,
// ETA); otherwise plain lines, one per epoch and every few steps, that read well in a log file.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace mlph::core {

class Progress {
 public:
  // `first_epoch`: where a resumed run starts (the ETA counts only the epochs left).
  Progress(bool enabled, uint32_t max_epochs, uint64_t steps_per_epoch, uint64_t samples_per_step,
           uint32_t first_epoch = 0);
  void step(uint32_t epoch, uint64_t step, double loss);  // after each optimizer step
  void epoch_done(uint32_t epoch, const std::string& metric_key, double metric, double target, double seconds);
  void message(const std::string& text);  // a line of its own, not overwritten

 private:
  using Clock = std::chrono::steady_clock;
  void clear_live_line();
  bool enabled_, tty_;
  uint32_t max_epochs_, first_epoch_;
  uint64_t steps_per_epoch_, samples_per_step_;
  uint64_t steps_done_ = 0;
  Clock::time_point start_ = Clock::now(), last_print_{};
  bool live_line_ = false;
};

}  // namespace mlph::core
