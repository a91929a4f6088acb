#include "thread_pool.hpp"

#include <algorithm>

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

namespace {
void run_chunk(const std::function<void(int64_t, int64_t)>& body, int64_t n, unsigned index, unsigned parts) {
  const int64_t begin = n * index / parts, end = n * (index + 1) / parts;
  if (begin < end) body(begin, end);
}
}  // namespace

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    pending_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(body, n, 0, size());
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
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
    lock.unlock();
    run_chunk(*body, n, index, size());
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace mlph::reference
