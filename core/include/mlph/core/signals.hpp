// Interrupts (SIGINT, SIGTERM) during a run: the loops stop at the next step, and a rank blocked
// where no step comes (a collective whose peer died) still ends its log before the launcher kills it.
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <mutex>
#include <thread>

namespace mlph::core {

// Whether SIGINT or SIGTERM arrived during the run; the loops check it at every step.
bool interrupted();

// SIGINT/SIGTERM stop the loops at the next step ("interrupted"). A rank blocked in a collective
// never gets there: when one rank dies, mpirun sends SIGTERM to the others and SIGKILL a second
// later. So a thread takes the signals, and if the run has not ended half a second after one, it
// has the last words said (run_stop "aborted" in the log) and exits.
class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  void set_last_words(std::function<void(int signal)> last_words);

 private:
  void watch();

  sigset_t signals_{};
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::function<void(int)> last_words_;
  std::thread thread_;
};

}  // namespace mlph::core
