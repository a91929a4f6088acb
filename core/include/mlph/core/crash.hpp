// Last words for a process that cannot go on. A corrupt file can crash or hang the library that
// decodes it (Debian 12's libhdf5 does both: tests/fuzz/libhdf5), and the core cannot fix that
// library; it can say which file it was, end the MLPerf log as "aborted" and exit non-zero instead
// of dying unnamed or hanging. Three parts:
//  - Activity: what each thread is doing ("training step 3 of epoch 1", "reading training batch 3
//    ... (samples 17, 4)"), published by the runner's phases and the data pipeline's reader, with the
//    file the thread last opened through storage (WatchedStorage notes it: the core learns the
//    file without asking the workload).
//  - CrashHandler: on SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT, one line on stderr naming the
//    crashing thread's activity and file, run_stop "aborted" in the open log (LogWatch), exit 1.
//    Async-signal-safe: fixed buffers and write(2) only; each publishing thread gets an alternate
//    signal stack, so a stack overflow is reported too.
//  - abandon_run: the same last words from ordinary code (a read past data.read_timeout_s), for a
//    run that must end without waiting for a thread that cannot be cancelled.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>

#include "mlph/core/mllog.hpp"
#include "mlph/storage.h"

namespace mlph::core {

// Publishes what the calling thread does while the object lives; nested scopes replace it and
// restore the outer text when they end. Each new activity forgets the file of the one before.
class Activity {
 public:
  explicit Activity(const std::string& what);
  ~Activity();
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;

 private:
  std::string outer_;  // the text this one replaced ("" at the outermost)
  bool published_;     // false when every slot was taken: nothing to restore
};

// The calling thread's id (gettid), as last_file_of takes it.
pid_t current_thread();
// The file thread `thread` last opened through WatchedStorage in its current activity ("" if none).
std::string last_file_of(pid_t thread);

// Installs the crash handlers for its lifetime (one per process); `program` opens every line.
class CrashHandler {
 public:
  explicit CrashHandler(const std::string& program);
  ~CrashHandler();
  CrashHandler(const CrashHandler&) = delete;
  CrashHandler& operator=(const CrashHandler&) = delete;
  // Under several ranks: "program: rank 1: ..." (the runner's own error lines say so too).
  static void set_rank(int rank, int size);
};

// While it lives, last words end `log` (when it has a file) with run_stop "aborted" and the reason,
// unless `stopped` (set by whoever writes run_stop) says run_stop is already there.
class LogWatch {
 public:
  LogWatch(const MlLogger& log, std::atomic<bool>& stopped);
  ~LogWatch();
  LogWatch(const LogWatch&) = delete;
  LogWatch& operator=(const LogWatch&) = delete;
};

// Ends the process now as a crash does, for `reason` ("training batch 3 of epoch 1 was not read
// within ..."): "program: error: reason" on stderr, run_stop aborted with it, exit 1. No destructor
// runs and no thread is waited for.
[[noreturn]] void abandon_run(const std::string& reason);

// A storage handle forwarding to `inner` that notes, for the calling thread's activity, each file
// read through it. Not movable: the handle points into the object.
class WatchedStorage {
 public:
  explicit WatchedStorage(const MLPH_StorageHandle& inner);
  WatchedStorage(const WatchedStorage&) = delete;
  WatchedStorage& operator=(const WatchedStorage&) = delete;
  const MLPH_StorageHandle* handle() const { return &handle_; }

 private:
  struct Forward;
  MLPH_StorageHandle inner_;
  MLPH_StorageApi api_{};
  MLPH_StorageHandle handle_{};
};

}  // namespace mlph::core
