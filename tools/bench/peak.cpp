#include "peak.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mlph::bench {
namespace {

constexpr int kLanes = 16;   // one 512-bit vector of floats; narrower targets split it, same count
constexpr int kChains = 12;  // enough independent FMAs to cover latency x ports on current cores
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

// Returns a value derived from the result so the compiler cannot drop the loop.
float fma_chains(long iterations) {
  Vec acc[kChains];
  const Vec scale = Vec{} + 0.999999f, shift = Vec{} + 1e-7f;
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + static_cast<float>(c);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * scale + shift;
  float sum = 0;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0];
  return sum;
}

#if defined(__x86_64__)
// Built for AVX512_BF16 whatever the compiler targets; called only where the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(long iterations) {
  __m512 acc[kChains];
  // bf16 bit patterns: 2^-20 and 1, so the sums grow by 2^-19 per call and stay finite.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x35800000 >> 16));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f800000 >> 16));
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  float sum = 0;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0];
  return sum;
}
#endif

// GFLOP/s of `chains(iterations)` on `threads` threads, each call doing `flop_per_iteration`.
double trial(unsigned threads, long iterations, double flop_per_iteration, float (*chains)(long)) {
  std::vector<std::thread> workers;
  std::vector<float> sink(threads);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[t] = chains(iterations); });
  for (auto& w : workers) w.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float keep = sink[0];
  (void)keep;
  return flop_per_iteration * static_cast<double>(iterations) * threads / s / 1e9;
}

double best_of_trials(unsigned threads, double flop_per_iteration, float (*chains)(long)) {
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, trial(std::max(threads, 1u), 20'000'000, flop_per_iteration, chains));
  return best;
}

}  // namespace

double measure_fp32_peak(unsigned threads) { return best_of_trials(threads, 2.0 * kLanes * kChains, fma_chains); }

double measure_bf16_peak(unsigned threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) return best_of_trials(threads, 4.0 * kLanes * kChains, bf16_dot_chains);
#endif
  (void)threads;
  return 0;
}

}  // namespace mlph::bench
