// The reference kernels' thread pool: every index exactly once, small loops inline, exceptions
// from any chunk reach the caller, and callers on several threads take turns.
#include "thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mlph::reference {
namespace {

TEST(ReferenceThreadPool, CoversEveryIndexOnceInContiguousChunks) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> chunks{0};
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      EXPECT_LT(begin, end);
      ++chunks;
      for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << "n " << n << " index " << i;
    EXPECT_LE(chunks, std::min<int64_t>(n, 3)) << "n " << n;
  }
}

TEST(ReferenceThreadPool, SmallLoopsStayOnTheCallersThread) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  int chunks = 0;  // not atomic: a second thread touching it would be a data race (and a failure)
  pool.parallel_for(100, 64, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    ++chunks;
  });
  EXPECT_EQ(chunks, 1);
}

TEST(ReferenceThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(30,
                                 [](int64_t begin, int64_t) {
                                   if (begin > 0) throw std::runtime_error("from a worker");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};  // still usable afterwards
  pool.parallel_for(30, [&](int64_t begin, int64_t end) { sum += end - begin; });
  EXPECT_EQ(sum, 30);
}

TEST(ReferenceThreadPool, ConcurrentCallersTakeTurns) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int r = 0; r < 200; ++r) pool.parallel_for(64, [&](int64_t begin, int64_t end) { total += end - begin; });
  };
  std::thread other(work);
  work();
  other.join();
  EXPECT_EQ(total, 2 * 200 * 64);
}

}  // namespace
}  // namespace mlph::reference
