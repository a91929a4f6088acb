#include "mlph/core/signals.hpp"

#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace mlph::core {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

}  // namespace

bool interrupted() { return g_interrupted; }

SignalWatcher::SignalWatcher() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);  // every thread started later inherits the mask
  thread_ = std::thread([this] { watch(); });
}

SignalWatcher::~SignalWatcher() {
  done_ = true;
  thread_.join();
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  pthread_sigmask(SIG_UNBLOCK, &signals_, nullptr);
}

void SignalWatcher::set_last_words(std::function<void(int signal)> last_words) {
  std::lock_guard lock(mutex_);
  last_words_ = std::move(last_words);
}

void SignalWatcher::watch() {
  const timespec tick{0, 100'000'000};
  while (!done_) {
    const int signal = sigtimedwait(&signals_, nullptr, &tick);
    if (signal < 0) continue;
    g_interrupted = true;
    for (int i = 0; i < 25 && !done_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (done_) return;
    std::lock_guard lock(mutex_);
    if (last_words_) last_words_(signal);
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

}  // namespace mlph::core
