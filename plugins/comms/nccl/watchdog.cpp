// comms/nccl's watchdog: see watchdog.hpp.
#include "watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "mlph/sdk/util/error.hpp"

namespace mlph::comms::nccl {
namespace {

// How often the thread looks: often while collectives are in flight, rarely when idle (it still
// answers the other ranks' questions and looks for asynchronous errors then).
constexpr auto kBusyPoll = std::chrono::milliseconds(2);
constexpr auto kIdlePoll = std::chrono::milliseconds(20);

std::string seconds(std::chrono::duration<double> d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", d.count());
  return text;
}

void join(std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; }

}  // namespace

std::string describe_missing(uint64_t sequence, const std::vector<std::optional<int64_t>>& answers,
                             const std::function<std::string(int)>& rank_name) {
  std::string behind, silent;
  for (size_t r = 0; r < answers.size(); ++r) {
    const auto& answer = answers[r];
    if (!answer)
      join(silent, rank_name(static_cast<int>(r)));
    else if (*answer < static_cast<int64_t>(sequence))
      join(behind, rank_name(static_cast<int>(r)) + " (at #" + std::to_string(*answer) + ")");
  }
  if (behind.empty() && silent.empty()) return "every rank reached it; NCCL or the network is stuck";
  std::string text;
  if (!behind.empty()) text = "rank(s) " + behind + " did not reach it";
  if (!silent.empty())
    text += (text.empty() ? "" : "; ") + std::string("rank(s) ") + silent +
            " did not answer (dead, or the whole process hung)";
  return text;
}

Watchdog::Watchdog(std::string where, double timeout_s, Hooks hooks, bool threaded)
    : where_(std::move(where)), timeout_(timeout_s), hooks_(std::move(hooks)) {
  if (threaded) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  queue_.clear();
}

void Watchdog::watch(Work work) {
  std::lock_guard lock(mutex_);
  if (failure_) throw sdk::Error(failure_->first, failure_->second);
  progress_ = std::max(progress_, work.sequence);
  queue_.push_back(std::move(work));
  wake_.notify_all();
}

void Watchdog::check() const {
  std::lock_guard lock(mutex_);
  if (failure_) throw sdk::Error(failure_->first, failure_->second);
}

bool Watchdog::failed() const {
  std::lock_guard lock(mutex_);
  return failure_.has_value();
}

size_t Watchdog::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

bool Watchdog::fail(MLPH_Code code, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (failure_) return false;
  failure_.emplace(code, message);
  queue_.clear();
  return true;
}

void Watchdog::run() {
  if (hooks_.thread_start) hooks_.thread_start();
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, queue_.empty() ? kIdlePoll : kBusyPoll);
    if (stop_) break;
    lock.unlock();
    poll();
    lock.lock();
  }
}

std::string Watchdog::describe(const Work& w) const {
  return "device " + w.operation + " #" + std::to_string(w.sequence) + " (" + std::to_string(w.bytes) + " bytes)";
}

void Watchdog::poll() {
  uint64_t progress = 0;
  {
    std::lock_guard lock(mutex_);
    progress = progress_;
  }
  if (hooks_.answer) hooks_.answer(progress);  // also after a failure: the others may still ask
  if (failed()) return;
  if (hooks_.async_error) {
    if (const auto error = hooks_.async_error()) {
      std::string during;
      {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) during = " during " + describe(queue_.front());
      }
      fail_and_abort(MLPH_UNAVAILABLE, where_ + ": NCCL failed" + during + ": " + *error);
      return;
    }
  }
  std::unique_lock lock(mutex_);
  while (!queue_.empty()) {
    Work& w = queue_.front();
    const auto now = hooks_.now();
    bool done = false;
    try {
      done = w.completion->done();
    } catch (const std::exception& e) {
      const std::string message = where_ + ": " + describe(w) + ": " + e.what();
      lock.unlock();
      fail_and_abort(MLPH_UNAVAILABLE, message);
      return;
    }
    if (done) {
      last_completed_ = now;
      queue_.pop_front();
      continue;
    }
    if (now - std::max(w.enqueued, last_completed_) <= timeout_) return;
    const uint64_t sequence = w.sequence;
    const std::string operation = w.operation;
    const size_t bytes = w.bytes;
    lock.unlock();
    time_out(sequence, operation, bytes);
    return;
  }
}

// Asks the others before aborting, so that they answer about the collective as it stands.
void Watchdog::time_out(uint64_t sequence, const std::string& operation, size_t bytes) {
  const std::string missing = hooks_.missing ? hooks_.missing(sequence) : std::string();
  fail_and_abort(MLPH_DEADLINE_EXCEEDED, where_ + ": device " + operation + " #" + std::to_string(sequence) + " (" +
                                             std::to_string(bytes) + " bytes) did not complete within " +
                                             seconds(timeout_) + " (comms.timeout_s)" +
                                             (missing.empty() ? "" : ": " + missing));
}

void Watchdog::fail_and_abort(MLPH_Code code, const std::string& message) {
  if (!fail(code, message + "; the NCCL communicator was aborted")) return;
  if (hooks_.abort) hooks_.abort();
}

}  // namespace mlph::comms::nccl
