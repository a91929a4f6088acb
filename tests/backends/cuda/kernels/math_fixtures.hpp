// The cuda backend's kernel bodies (backends/cuda/kernels/*.hpp) run on the CPU, index by index as the
// launchers run them (device_order.hpp), against the reference backend's functions on random inputs.
// Where a body performs the reference's float operations in the reference's order (element-wise ops,
// dropout masks, selections, optimizer updates, per-row losses), its output must have the same bits.
// Where a sum's order differs (the device's sums are cut into parts, the reference's run in a row)
// both sum in double, so the float results differ by at most an ulp or two: those are compared within
// kSumTolerance (relative) and say so.
//
// What the files of cuda_kernel_math_test (math_*_test.cpp, one or two kernel families each) share.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device_order.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/channel.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/layout.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/pool.hpp"
#include "kernels/precision.hpp"
#include "ops.hpp"
#include "plan/precision.hpp"
#include "reference_side.hpp"

namespace mlph::cuda::test {

inline void expect_near(double actual, double expected, const char* what, size_t i = 0) {
  ASSERT_LE(std::fabs(actual - expected), kSumTolerance * (1.0 + std::fabs(expected)))
      << what << " at " << i << ": " << actual << " vs the reference's " << expected;
}
inline void expect_near(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) expect_near(actual[i], expected[i], what, i);
}

inline constexpr int64_t kN = 3001;

}  // namespace mlph::cuda::test

// What every file of the program names unqualified (with reference_side.hpp's).
namespace mlph::cuda {
namespace {

using test::expect_near;
using test::kN;

}  // namespace
}  // namespace mlph::cuda
