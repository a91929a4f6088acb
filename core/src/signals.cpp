#include "mlph/core/signals.hpp"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>

namespace mlph::core {
namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_interrupt(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);
}

constexpr std::chrono::milliseconds kPatience{500};  // after SIGTERM, before the last words
constexpr std::chrono::seconds kOrderlyEnd{10};       // for a run that stopped at a step boundary

}  // namespace

bool interrupted() { return g_stop_signal != 0; }
int stop_signal() { return g_stop_signal; }

std::string stop_reason(int signal) {
  switch (signal) {
    case SIGUSR1: return "SIGUSR1 (Slurm's warning before the time limit, or a preemption notice)";
    case SIGTERM: return "SIGTERM (the time limit, a preemption or requeue, scancel, or a launcher ending the job)";
    case SIGINT: return "SIGINT (interrupted)";
    default: return "signal " + std::to_string(signal);
  }
}

SignalWatcher::SignalWatcher() {
  sigemptyset(&signals_);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals_, s);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);  // every thread started later inherits the mask
  thread_ = std::thread([this] { watch(); });
}

SignalWatcher::~SignalWatcher() {
  done_ = true;
  thread_.join();
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) std::signal(s, on_interrupt);
  pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
}

void SignalWatcher::set_last_words(std::function<void(int, bool)> last_words) {
  std::lock_guard lock(mutex_);
  last_words_ = std::move(last_words);
  early_words_said_ = false;
}

void SignalWatcher::set_stop_grace(double seconds, bool early) {
  grace_s_ = seconds;
  early_ = early;
}
void SignalWatcher::stopping() { stopping_ = true; }
void SignalWatcher::set_exit_status(int status) { exit_status_ = status; }

void SignalWatcher::say_last_words(int signal, bool final) {
  std::lock_guard lock(mutex_);
  if (!last_words_ || (!final && early_words_said_)) return;
  early_words_said_ = true;
  last_words_(signal, final);
}

void SignalWatcher::watch() {
  const timespec tick{0, 20'000'000};
  std::optional<Clock::time_point> terminated;  // when SIGTERM or SIGINT first came
  int signal = 0;
  while (!done_) {
    const int received = sigtimedwait(&signals_, nullptr, &tick);
    if (received > 0) {
      on_interrupt(received);
      if (received != SIGUSR1 && !terminated) terminated = Clock::now(), signal = received;
    }
    if (!terminated || done_) continue;
    const auto waited = Clock::now() - *terminated;
    const auto grace = std::chrono::duration<double>(grace_s_.load());
    if (waited < kPatience || (stopping_ && (waited < grace || waited < kOrderlyEnd))) continue;
    if (waited < grace) {  // not at a step boundary yet: the log may say why now, the run may still save
      if (early_) say_last_words(signal, false);
      continue;
    }
    say_last_words(signal, true);
    std::fflush(nullptr);
    std::_Exit(exit_status_);
  }
}

}  // namespace mlph::core
