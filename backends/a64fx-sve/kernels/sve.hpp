// What every kernel file shares: SVE predicates over a range, and OpenMP loops whose split depends
// only on the thread count (so results are repeatable for a fixed count).
#pragma once

#include <arm_sve.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels.hpp"

namespace mlph::a64fx {

inline int thread_count(Threads t) { return t.count > 0 ? t.count : omp_get_max_threads(); }

// Lanes [i, n) of a vector starting at i: the predicate of a vector-length-agnostic loop.
inline svbool_t lanes_from(int64_t i, int64_t n) { return svwhilelt_b32(i, n); }

// body(item) for item in [0, items), statically split over the threads.
template <class F>
void parallel_items(Threads t, int64_t items, F&& body) {
  const int threads = static_cast<int>(std::min<int64_t>(thread_count(t), std::max<int64_t>(items, 1)));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t item = 0; item < items; ++item) body(item);
}

// body(begin, end) over `parts` contiguous chunks of [0, n), no chunk shorter than `min_chunk` unless
// n is: the chunks depend on n, min_chunk and the thread count only. Returns the number of parts.
inline int64_t part_count(Threads t, int64_t n, int64_t min_chunk) {
  return std::max<int64_t>(1, std::min<int64_t>(thread_count(t), n / std::max<int64_t>(min_chunk, 1)));
}
template <class F>
void parallel_chunks(Threads t, int64_t n, int64_t min_chunk, F&& body) {
  const int64_t parts = part_count(t, n, min_chunk);
  parallel_items(t, parts, [&](int64_t p) { body(n * p / parts, n * (p + 1) / parts, p); });
}

// Elements per chunk below which waking other threads costs more than the loop.
constexpr int64_t kMinChunk = int64_t{1} << 14;

// f(predicate, i) over [0, n) one vector at a time, split over the threads.
template <class F>
void vector_loop(Threads t, int64_t n, F&& f) {
  parallel_chunks(t, n, kMinChunk, [&](int64_t begin, int64_t end, int64_t) {
    const int64_t step = static_cast<int64_t>(svcntw());
    for (int64_t i = begin; i < end; i += step) f(lanes_from(i, end), i);
  });
}

}  // namespace mlph::a64fx
