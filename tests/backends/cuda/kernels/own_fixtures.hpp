// The cuda backend's kernels of issue 33 (depthwise convolution, fused batch-norm + ReLU, add + ReLU,
// and CosmoFlow's bias + leaky ReLU + max-pool) run on the CPU index by index as their launchers run
// them (device_order.hpp), against the reference backend (compiled, like this test, with
// -ffp-contract=off): the same bits where the body performs the reference's float operations in its
// order; sums in double within kSumTolerance.
//
// What the files of cuda_own_kernels_test (own_*_test.cpp) share: the depthwise cases and
// their channel-vector loop, the rows of [rows, C], bf16 storage's conversions and checks.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_order.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/channel.hpp"
#include "kernels/depthwise.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/fused.hpp"
#include "kernels/layout.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/pool_chain.hpp"
#include "ops.hpp"
#include "reference_side.hpp"

namespace mlph::cuda::test {

inline void expect_near(const std::vector<float>& actual, const std::vector<double>& expected, double scale,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_LE(std::fabs(actual[i] - expected[i]), scale * (1.0 + std::fabs(expected[i])))
        << what << " at " << i << ": " << actual[i] << " vs " << expected[i];
}

// A depthwise conv as the graph lowers it: 2-D (or 3-D) right-aligned, padding = dilation (DeepCAM's
// 'same' separable convs), odd sizes.
inline sdk::program::Window depthwise_window(int64_t batch, std::vector<int64_t> in, int64_t channels, int64_t kernel,
                                          int64_t stride, int64_t dilation, int64_t pad) {
  sdk::program::Window g;
  g.batch = batch;
  g.in_channels = g.out_channels = g.groups = channels;
  const size_t first = 3 - in.size();
  for (size_t e = first; e < 3; ++e) {
    g.in[e] = in[e - first];
    g.kernel[e] = kernel, g.stride[e] = stride, g.dilation[e] = dilation;
    g.pad_before[e] = g.pad_after[e] = pad;
    g.out[e] = g.expected_out(static_cast<int>(e));
  }
  return g;
}

struct DepthwiseCase {
  const char* what;
  sdk::program::Window g;
  bool bias;
};

inline std::vector<DepthwiseCase> depthwise_cases() {
  return {
      {"3x3 s1 d1, C 13", depthwise_window(2, {7, 9}, 13, 3, 1, 1, 1), false},
      {"3x3 s2 d1, C 12, bias", depthwise_window(2, {9, 7}, 12, 3, 2, 1, 1), true},
      {"3x3 s1 d2, C 20", depthwise_window(1, {11, 5}, 20, 3, 1, 2, 2), false},
      {"3x3 s2 d2, C 5", depthwise_window(3, {8, 9}, 5, 3, 2, 2, 2), true},
      {"3x3x3 s2 d1, C 6 (3-D)", depthwise_window(1, {5, 6, 7}, 6, 3, 2, 1, 1), false},
  };
}

// Each channel vector of a body over [positions, C / V].
template <int V, class Body>
void each_channel_vector(int64_t positions, int64_t channels, Body&& body) {
  test::each_row_channel(positions, channels / V, [&](int64_t p, int64_t v) { body(p, v * V); });
}

// [rows, C] with C not a multiple of 8 (and one that is a multiple of 4 for the 16-byte bodies).
inline constexpr int64_t kRows = 301;

// ---- bf16 storage (issue 33 item 4, kernel side): fp32 arithmetic, each result rounded once --------
// Held to the reference run on the bf16-rounded inputs, its float results rounded once to bf16.

inline std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16{float_to_bfloat16(v[i])};
  return out;
}
inline std::vector<float> to_floats(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}
inline void expect_same_bits(const std::vector<Bf16>& actual, const std::vector<float>& reference,
                             const std::string& what) {
  ASSERT_EQ(actual.size(), reference.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(actual[i].bits, float_to_bfloat16(reference[i]))
        << what << " at " << i << ": " << to_float(actual[i]) << " vs the reference's " << reference[i] << " rounded";
}

inline void expect_same_sums(const std::vector<double>& actual, const std::vector<double>& expected,
                             const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint64_t>(actual[i]), std::bit_cast<uint64_t>(expected[i])) << what << " at " << i;
}

// A bf16 activation and its widened copy (what the fp32 body reads).
struct Stored {
  std::vector<Bf16> half;
  std::vector<float> wide;
  Stored(size_t n, uint32_t seed, bool special = true)
      : half(to_bf16(special ? special_floats(n, seed) : random_floats(n, seed))), wide(to_floats(half)) {}
};

}  // namespace mlph::cuda::test

// What every file of the program names unqualified (with reference_side.hpp's).
namespace mlph::cuda {
namespace {

using test::expect_near;
using test::expect_same_bits;  // and the bf16 overload above
using test::depthwise_window;
using test::DepthwiseCase;
using test::depthwise_cases;
using test::each_channel_vector;
using test::kRows;
using test::to_bf16;
using test::to_floats;
using test::expect_same_sums;
using test::Stored;

}  // namespace
}  // namespace mlph::cuda
