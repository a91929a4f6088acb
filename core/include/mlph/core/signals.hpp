// Signals during a run. SIGUSR1 asks it to stop soon (Slurm's warning before the time limit,
// `--signal=USR1@N`, or a site's preemption notice); SIGTERM and SIGINT to stop now (the time limit
// itself, scancel, a requeue or preemption, Ctrl-C, a launcher ending the job because a rank died).
// Either way the training loop stops at the next step boundary, every rank at the same one, and a
// run with --checkpoint-dir saves where it stands first (runner.cpp). A rank blocked where no step
// boundary comes (a collective whose peer died) still ends its log before the launcher kills it.
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mlph::core {

// Whether SIGUSR1, SIGINT or SIGTERM arrived during the run; the training loop checks it at every step.
bool interrupted();
// The first of them to arrive (0: none).
int stop_signal();
// What the signal means for a run, for its log: "SIGUSR1 (Slurm's warning before the time limit, or a
// preemption notice)".
std::string stop_reason(int signal);

// A thread takes the signals. SIGUSR1 only sets the flag: the run stops at its next step boundary,
// however long the step takes. SIGTERM and SIGINT set it too, and bound the wait, for a rank blocked
// in a collective whose peer died never reaches a step boundary. When one rank dies, mpirun sends
// SIGTERM to the others and SIGKILL a second later: so if the run has not ended, or stopped at a
// step boundary, half a second after SIGTERM, the watcher has the last words said (run_stop
// "aborted" in the log). Without a stop checkpoint to wait for it exits then; with one
// (set_stop_grace) it gives the run the grace to reach the boundary and save, then exits with the
// status the run set. srun waits Slurm's KillWait (30 s by default) before SIGKILL: under it the
// log's words wait for the grace too. (Repeated signals change nothing: under Slurm a task may get
// SIGTERM both from its step and through srun.)
class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Called once, from the watcher thread, when it gives up on the run: the log's last words, the
  // staged copies removed. `final` is false at the half second when the run may still save (the
  // log only), true just before the process exits.
  void set_last_words(std::function<void(int signal, bool final)> last_words);
  // Seconds after SIGTERM or SIGINT the run may take to reach a step boundary and save its stop
  // checkpoint; 0 (the default): it saves none, the watcher ends it after half a second. `early`:
  // the log's words come after half a second all the same (the launcher may kill a second after
  // SIGTERM), else only once the grace is over (srun's KillWait).
  void set_stop_grace(double seconds, bool early);
  // The run has stopped at a step boundary, every rank agreeing: it saves and ends in order, for
  // which the watcher waits (the grace, at least 10 s).
  void stopping();
  // The status the process exits with should the watcher end it (1 until the run says otherwise).
  void set_exit_status(int status);

 private:
  using Clock = std::chrono::steady_clock;
  void watch();
  void say_last_words(int signal, bool final);

  sigset_t signals_{};
  std::atomic<bool> done_{false}, stopping_{false}, early_{true};
  std::atomic<int> exit_status_{1};
  std::atomic<double> grace_s_{0};
  std::mutex mutex_;
  std::function<void(int, bool)> last_words_;
  bool early_words_said_ = false;
  std::thread thread_;
};

}  // namespace mlph::core
