#include "thread_pool.hpp"

#include <algorithm>
#include <utility>

namespace mlph::reference {

ThreadPool::ThreadPool(unsigned threads) {
  for (unsigned i = 1; i < std::max(1u, threads); ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_chunk(const std::function<void(int64_t, int64_t)>& body, int64_t n, unsigned index,
                           unsigned parts) {
  const int64_t begin = n * index / parts, end = n * (index + 1) / parts;
  if (begin >= end) return;
  try {
    body(begin, end);
  } catch (...) {  // an exception must not escape a worker thread (std::terminate): hand it over
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t by_size = n / std::max<int64_t>(1, min_chunk);
  const auto parts = static_cast<unsigned>(std::clamp<int64_t>(by_size, 1, size()));
  if (parts == 1) {
    if (n > 0) body(0, n);
    return;
  }
  std::lock_guard turn(turn_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    parts_ = parts;
    pending_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(body, n, 0, parts);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::work(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* body = body_;
    const int64_t n = n_;
    const unsigned parts = parts_;
    lock.unlock();
    if (index < parts) run_chunk(*body, n, index, parts);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace mlph::reference
