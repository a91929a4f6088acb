// A fixed set of worker threads for the reference kernels: parallel_for splits [0, n) into
// contiguous chunks, one per thread, and returns when all are done.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mlph::reference {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls body(begin, end) on disjoint contiguous chunks covering [0, n), at most one chunk per
  // thread and none shorter than `min_chunk` (so tiny loops stay on the caller's thread). The caller's
  // thread takes the first chunk. If a body throws, the first exception is rethrown here once every
  // chunk has finished. Calls from several threads (two models of one backend) take turns; a body
  // must not call parallel_for itself.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body);
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) { parallel_for(n, 1, body); }

 private:
  void work(unsigned index);
  void run_chunk(const std::function<void(int64_t, int64_t)>& body, int64_t n, unsigned index, unsigned parts);
  std::vector<std::thread> workers_;
  std::mutex turn_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  unsigned parts_ = 1;
  uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;  // the first exception a chunk threw, guarded by mutex_
};

}  // namespace mlph::reference
