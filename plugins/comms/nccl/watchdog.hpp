// The deadline of comms/nccl's device collectives: host code only (no CUDA, no NCCL), so its logic is
// tested with fake completions and a fake clock.
//
// Every collective enqueued on a stream is followed by a marker (a CUDA event) and handed to the
// watchdog. A thread polls the oldest marker: a collective's clock starts when it is enqueued, or when
// the one before it completed if that was later (collectives on one communicator run in order), and
// one not complete within timeout_s fails the communicator: the watchdog asks the other ranks how far
// they got (Hooks::missing), records the failure, then aborts the NCCL communicator (Hooks::abort) so
// that the streams waiting on it drain. An asynchronous NCCL error (Hooks::async_error: a peer that
// died, a network error) fails it the same way. Once failed, every later call throws the failure.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mlph/common.h"

namespace mlph::comms::nccl {

using Clock = std::chrono::steady_clock;

// Whether the stream has run a collective (a CUDA event's query); throws sdk::Error on a device error.
class Completion {
 public:
  virtual ~Completion() = default;
  virtual bool done() = 0;
};

// One enqueued collective. `sequence` counts the communicator's device collectives (1, 2, ...): the same
// on every rank, since every rank makes them in the same order.
struct Work {
  uint64_t sequence = 0;
  std::string operation;  // "allreduce", "halo exchange", ...
  size_t bytes = 0;
  std::unique_ptr<Completion> completion;
  Clock::time_point enqueued{};
};

// What the watchdog does outside itself. Every member may be left empty.
struct Hooks {
  std::function<Clock::time_point()> now = Clock::now;
  std::function<void()> thread_start;                       // on the watchdog's thread (cudaSetDevice)
  std::function<std::optional<std::string>()> async_error;  // NCCL's asynchronous error, if any
  std::function<void()> abort;                              // aborts the NCCL communicator
  // Why collective #sequence is stuck, from the other ranks' answers (see describe_missing); empty when
  // there are no other ranks to ask.
  std::function<std::string(uint64_t sequence)> missing;
  // Answers the other ranks' questions with this rank's progress (the last collective enqueued).
  std::function<void(uint64_t progress)> answer;
};

// The text of a timeout's cause from each rank's answer (its last enqueued collective; nullopt: none
// came), naming ranks by `rank_name`.
std::string describe_missing(uint64_t sequence, const std::vector<std::optional<int64_t>>& answers,
                             const std::function<std::string(int)>& rank_name);

class Watchdog {
 public:
  // `where` starts every message ("comms/nccl: rank 0 of 2"). With `threaded` false nothing polls but
  // the caller (tests: poll() with a fake clock).
  Watchdog(std::string where, double timeout_s, Hooks hooks, bool threaded = true);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Follows an enqueued collective. Throws the failure when the communicator has failed.
  void watch(Work work);
  // Throws the failure (MLPH_DEADLINE_EXCEEDED, MLPH_UNAVAILABLE) when the communicator has failed.
  void check() const;
  bool failed() const;
  // Records a failure found elsewhere (enqueueing); false if there was one already. Does not abort:
  // the caller does, as it holds the communicator.
  bool fail(MLPH_Code code, const std::string& message);
  // One round of the thread's work: answer questions, look for an asynchronous error, retire completed
  // collectives, and fail on the oldest one's deadline.
  void poll();
  size_t pending() const;
  // Stops the thread; pending collectives are dropped (their markers released).
  void stop();

 private:
  void run();
  void time_out(uint64_t sequence, const std::string& operation, size_t bytes);
  void fail_and_abort(MLPH_Code code, const std::string& message);
  std::string describe(const Work& w) const;

  const std::string where_;
  const std::chrono::duration<double> timeout_;
  const Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  Clock::time_point last_completed_{};
  uint64_t progress_ = 0;  // the last sequence watched
  std::optional<std::pair<MLPH_Code, std::string>> failure_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlph::comms::nccl
