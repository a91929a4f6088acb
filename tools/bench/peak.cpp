#include "peak.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

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

double trial(unsigned threads, long iterations) {
  std::vector<std::thread> workers;
  std::vector<float> sink(threads);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[t] = fma_chains(iterations); });
  for (auto& w : workers) w.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float keep = sink[0];
  (void)keep;
  return 2.0 * kLanes * kChains * static_cast<double>(iterations) * threads / s / 1e9;
}

}  // namespace

double measure_fp32_peak(unsigned threads) {
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, trial(std::max(threads, 1u), 20'000'000));
  return best;
}

}  // namespace mlph::bench
