// What many tests need and once was copied into each: seeded inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mlph::test {

// n floats uniform in [low, high) from std::mt19937(seed): inputs that repeat from run to run and
// machine to machine (the standard fixes mt19937's sequence; the distribution is libstdc++'s).
inline std::vector<float> random_floats(size_t n, uint32_t seed, float low = -1.0f, float high = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace mlph::test
