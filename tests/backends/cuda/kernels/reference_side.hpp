// What the host-side kernel tests (cuda_kernel_math_test, cuda_own_kernels_test) hold the bodies against: the
// reference backend's thread pool, inputs with the special values, the tolerance of a reordered sum, the
// same-bits check.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "device_order.hpp"
#include "thread_pool.hpp"

namespace mlph::cuda::test {

// A double sum's reordering moves it by about 1e-16 relative; rounded to float, that is at most one ulp
// (6e-8) of the value, and a float computed from two such values (x * scale + shift) a few ulps of the
// larger term: 1e-6 of the magnitude (with 1 for values near 0, which cancellation makes small).
inline constexpr double kSumTolerance = 1e-6;

inline reference::ThreadPool& pool() {
  static reference::ThreadPool threads(2);
  return threads;
}

// Random floats with the special values every element-wise op must pass through: zeros of both signs,
// infinities, NaN, tiny and huge numbers.
inline std::vector<float> special_floats(size_t n, uint32_t seed) {
  std::vector<float> v = random_floats(n, seed, -4.0f, 4.0f);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            1e-40f, -1e-40f, 3e38f, -3e38f, 1.0f, -1.0f};
  for (size_t i = 0; i < std::size(specials) && i * 7 < n; ++i) v[i * 7] = specials[i];
  return v;
}

// Same bits, NaNs included (the bodies must produce the reference's NaN, not just a NaN).
inline void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected,
                             const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << what << " at " << i << ": " << actual[i] << " vs the reference's " << expected[i];
}

}  // namespace mlph::cuda::test

// What every file of both programs names unqualified.
namespace mlph::cuda {
namespace {

namespace ref = mlph::reference;
using test::each;
using test::each_row_channel;
using test::expect_same_bits;
using test::kSumTolerance;
using test::pool;
using test::random_floats;
using test::special_floats;

}  // namespace
}  // namespace mlph::cuda
