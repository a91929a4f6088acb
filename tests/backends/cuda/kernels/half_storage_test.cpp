// Our kernel bodies over activations stored in a half type (issue 33 item 4 and its last items): each
// body templated on the stored type H (Bf16 or F16) is held to its fp32 body run on the H-rounded
// inputs, every stored result rounded once to H: the same fp32 arithmetic, so the same bits. Odd sizes,
// channels not a multiple of 8, the 16-byte (V = 8) bodies beside the scalar ones, gradients that
// accumulate and first writers. The fp16 rounding itself (float_to_half) is checked in kernel_math_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "device_order.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/channel.hpp"
#include "kernels/depthwise.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/fused.hpp"
#include "kernels/pool.hpp"
#include "kernels/pool_chain.hpp"
#include "kernels/precision.hpp"
#include "reference_side.hpp"

namespace mlph::cuda {
namespace {

using test::random_floats;
using test::special_floats;

constexpr int64_t kRows = 301;

// The inputs with fp16's own edges too: past its largest finite value (65504: 65520 and up overflow to
// Inf), its smallest subnormal (2^-24) and below it (rounds to 0), a tie to even.
std::vector<float> half_edges(size_t n, uint32_t seed) {
  std::vector<float> v = special_floats(n, seed);
  const float edges[] = {65504.0f, 65519.0f, 65520.0f, -70000.0f, 5.9604645e-8f, 2.0e-8f, 1.00048828125f, 3.0e-5f};
  for (size_t i = 0; i < std::size(edges) && i * 11 + 3 < n; ++i) v[i * 11 + 3] = edges[i];
  return v;
}

template <class H>
struct Stored {
  std::vector<H> half;
  std::vector<float> wide;  // what the fp32 body reads: the half values widened (exact)
  Stored(size_t n, uint32_t seed, bool special = true) {
    const std::vector<float> v = special ? half_edges(n, seed) : random_floats(n, seed);
    for (float f : v) half.push_back(from_float<H>(f));
    for (H h : half) wide.push_back(to_float(h));
  }
};

template <class H>
const char* name_of() {
  return std::is_same_v<H, F16> ? "fp16" : "bf16";
}

// Each stored half is the fp32 result rounded once.
template <class H>
void expect_rounded_once(const std::vector<H>& actual, const std::vector<float>& wide, const std::string& what) {
  ASSERT_EQ(actual.size(), wide.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(actual[i].bits, from_float<H>(wide[i]).bits)
        << name_of<H>() << " " << what << " at " << i << ": " << to_float(actual[i]) << " vs " << wide[i] << " rounded";
}

template <class H>
class HalfStorage : public ::testing::Test {};
using HalfTypes = ::testing::Types<Bf16, F16>;
TYPED_TEST_SUITE(HalfStorage, HalfTypes);

// The half types are told apart: fp16 keeps 10 bits of mantissa where bf16 keeps 7, and overflows at 65520.
TEST(HalfStorageTypes, Fp16AndBf16RoundAsTheirOwnFormats) {
  EXPECT_EQ(from_float<F16>(1.0f + 1.0f / 1024).bits, 0x3c01u);  // exact in fp16, 1 in bf16
  EXPECT_EQ(to_float(from_float<Bf16>(1.0f + 1.0f / 1024)), 1.0f);
  EXPECT_EQ(from_float<F16>(65504.0f).bits, 0x7bffu);
  EXPECT_EQ(from_float<F16>(65520.0f).bits, 0x7c00u);  // Inf: a scaled gradient that overflows fp16
  EXPECT_EQ(to_float(from_float<Bf16>(65520.0f)), 65536.0f);
  EXPECT_EQ(from_float<F16>(1.00048828125f).bits, 0x3c00u);  // 1 + 2^-11: the tie goes to even
  EXPECT_EQ(to_float(F16{0x0001u}), 5.9604645e-8f);        // 2^-24, fp16's smallest subnormal
}

// relu, add, accumulate (added and first-written): the V = 8 body (16 bytes) and the scalar tail over an
// odd n, against the fp32 bodies.
template <class H, int V>
void eltwise_matches(size_t n) {
  const Stored<H> x(n, 11), b(n, 12), dy(n, 13), dx(n, 14, false);
  std::vector<H> y(n), sum(n), d_relu = dx.half, d_acc = dx.half, d_first(n, H{0x5555u});
  std::vector<float> ey(n), esum(n), erelu = dx.wide, eacc = dx.wide, efirst(n, 0.0f);
  const auto vectors = static_cast<int64_t>(n) / V;
  for (int64_t v = 0; v < vectors; ++v) {
    relu_forward_vec_at<V>(v * V, x.half.data(), y.data());
    add_forward_vec_at<V>(v * V, x.half.data(), b.half.data(), sum.data());
    relu_backward_vec_at<V>(v * V, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_vec_at<V>(v * V, dy.half.data(), d_acc.data());
    accumulate_vec_at<V>(v * V, dy.half.data(), d_first.data(), false);
  }
  for (int64_t i = vectors * V; i < static_cast<int64_t>(n); ++i) {
    relu_forward_at(i, x.half.data(), y.data());
    add_forward_at(i, x.half.data(), b.half.data(), sum.data());
    relu_backward_at(i, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_at(i, dy.half.data(), d_acc.data());
    accumulate_at(i, dy.half.data(), d_first.data(), false);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    relu_forward_at(i, x.wide.data(), ey.data());
    add_forward_at(i, x.wide.data(), b.wide.data(), esum.data());
    relu_backward_at(i, x.wide.data(), dy.wide.data(), erelu.data());
    accumulate_at(i, dy.wide.data(), eacc.data());
    accumulate_at(i, dy.wide.data(), efirst.data());  // into zeros: what the first writer writes
  }
  const std::string what = "n " + std::to_string(n) + ", V " + std::to_string(V);
  expect_rounded_once(y, ey, what + " relu");
  expect_rounded_once(sum, esum, what + " add");
  expect_rounded_once(d_relu, erelu, what + " relu backward");
  expect_rounded_once(d_acc, eacc, what + " accumulate");
  expect_rounded_once(d_first, efirst, what + " first writer");
}

// One element-wise op: forward f(i, x, y), backward g(i, src, dy, dx, accumulate) (src: what the body
// reads, x or y), their V bodies fv, gv over the whole vectors and the scalar ones on the tail, in H;
// against the scalar fp32 bodies on the widened values: added into dx, and first-written (garbage
// before it; in fp32 the bits of adding into zeros, -0 included).
template <class H, int V, class F, class FV, class G, class GV>
void unary_matches(size_t n, const std::string& name, F f, FV fv, G g, GV gv) {
  const Stored<H> x(n, 21), dy(n, 22), dx(n, 23, false);
  std::vector<H> y(n), d = dx.half, d_first(n, H{0x5555u});
  std::vector<float> ey(n), ed = dx.wide, efirst(n, 0.0f), wide_first(n, -3.0f);
  const auto count = static_cast<int64_t>(n), vectors = count / V;
  for (int64_t v = 0; v < vectors; ++v) {
    fv(v * V, x.half.data(), y.data());
    gv(v * V, x.half.data(), dy.half.data(), d.data(), true);
    gv(v * V, x.half.data(), dy.half.data(), d_first.data(), false);
  }
  for (int64_t i = vectors * V; i < count; ++i) {
    f(i, x.half.data(), y.data());
    g(i, x.half.data(), dy.half.data(), d.data(), true);
    g(i, x.half.data(), dy.half.data(), d_first.data(), false);
  }
  for (int64_t i = 0; i < count; ++i) {
    f(i, x.wide.data(), ey.data());
    g(i, x.wide.data(), dy.wide.data(), ed.data(), true);
    g(i, x.wide.data(), dy.wide.data(), efirst.data(), true);
    g(i, x.wide.data(), dy.wide.data(), wide_first.data(), false);
  }
  const std::string what = name + ", n " + std::to_string(n) + ", V " + std::to_string(V);
  expect_rounded_once(y, ey, what + " forward");
  expect_rounded_once(d, ed, what + " backward");
  expect_rounded_once(d_first, efirst, what + " backward's first writer");
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(wide_first[i]), std::bit_cast<uint32_t>(efirst[i])) << what << " fp32 first writer at " << i;
}

// leaky ReLU, tanh, scale and dropout (issue 33: CosmoFlow's and DeepCAM's last fp32 element-wise ops).
constexpr float alpha = 0.3f, factor = -1.75f;  // leaky ReLU's slope, scale's factor
template <class H, int V>
void activations_match(size_t n) {
  unary_matches<H, V>(
      n, "leaky_relu", [](int64_t i, auto* x, auto* y) { leaky_relu_forward_at(i, alpha, x, y); },
      [](int64_t i, auto* x, auto* y) { leaky_relu_forward_vec_at<V>(i, alpha, x, y); },
      [](int64_t i, auto* x, auto* dy, auto* dx, bool a) { leaky_relu_backward_at(i, alpha, x, dy, dx, a); },
      [](int64_t i, auto* x, auto* dy, auto* dx, bool a) { leaky_relu_backward_vec_at<V>(i, alpha, x, dy, dx, a); });
  unary_matches<H, V>(
      n, "tanh", [](int64_t i, auto* x, auto* y) { tanh_forward_at(i, x, y); },
      [](int64_t i, auto* x, auto* y) { tanh_forward_vec_at<V>(i, x, y); },
      [](int64_t i, auto* y, auto* dy, auto* dx, bool a) { tanh_backward_at(i, y, dy, dx, a); },
      [](int64_t i, auto* y, auto* dy, auto* dx, bool a) { tanh_backward_vec_at<V>(i, y, dy, dx, a); });
  unary_matches<H, V>(
      n, "scale", [](int64_t i, auto* x, auto* y) { scale_forward_at(i, factor, x, y); },
      [](int64_t i, auto* x, auto* y) { scale_forward_vec_at<V>(i, factor, x, y); },
      [](int64_t i, auto*, auto* dy, auto* dx, bool a) { scale_backward_at(i, factor, dy, dx, a); },
      [](int64_t i, auto*, auto* dy, auto* dx, bool a) { scale_backward_vec_at<V>(i, factor, dy, dx, a); });
  const DropoutStream d = dropout_stream(0.3, 42, 5);
  const uint64_t step = 3;
  unary_matches<H, V>(
      n, "dropout", [&](int64_t i, auto* x, auto* y) { dropout_forward_at(i, d, &step, x, y); },
      [&](int64_t i, auto* x, auto* y) { dropout_forward_vec_at<V>(i, d, &step, x, y); },
      [&](int64_t i, auto*, auto* dy, auto* dx, bool a) { dropout_backward_at(i, d, &step, dy, dx, a); },
      [&](int64_t i, auto*, auto* dy, auto* dx, bool a) { dropout_backward_vec_at<V>(i, d, &step, dy, dx, a); });
}

TYPED_TEST(HalfStorage, ActivationBodiesAreTheFp32BodiesRoundedOnce) {
  activations_match<TypeParam, 1>(1001);
  activations_match<TypeParam, 8>(1001);  // 125 vectors of 8 and a tail of 1
}

TYPED_TEST(HalfStorage, EltwiseBodiesAreTheFp32BodiesRoundedOnce) {
  eltwise_matches<TypeParam, 1>(1001);
  eltwise_matches<TypeParam, 8>(1003);
}

// Batch norm's apply (+ ReLU) and data pass (+ ReLU), add + ReLU forward and backward, C 13 and 24.
template <class H, int V>
void batch_norm_and_fused_match(int64_t channels) {
  const size_t n = static_cast<size_t>(kRows * channels);
  const Stored<H> x(n, 21), a2(n, 22), dy(n, 23), dx(n, 24, false);
  const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * channels), 25);
  std::vector<float> saved = random_floats(static_cast<size_t>(2 * channels), 26, 0.5f, 2.0f);
  const std::vector<float> coefficients = random_floats(static_cast<size_t>(3 * channels), 27);
  std::vector<H> y(n), y_relu(n), sum_y(n), d_bn = dx.half, d_bn_relu = dx.half, da = dx.half, db(n, H{0x1234u});
  std::vector<float> ey(n), ey_relu(n), esum_y(n), ed_bn = dx.wide, ed_bn_relu = dx.wide, eda = dx.wide, edb(n);
  test::each_row_channel(kRows, channels / V, [&](int64_t r, int64_t q) {
    const int64_t c = q * V;
    batch_norm_relu_apply_at<V>(r, c, channels, x.half.data(), scale_shift.data(), y_relu.data());
    batch_norm_relu_apply_at<V>(r, c, channels, x.wide.data(), scale_shift.data(), ey_relu.data());
    add_relu_forward_at<V>(r, c, channels, x.half.data(), a2.half.data(), sum_y.data());
    add_relu_forward_at<V>(r, c, channels, x.wide.data(), a2.wide.data(), esum_y.data());
  });
  const std::vector<float> sum_y_wide = [&] {
    std::vector<float> w;
    for (H h : sum_y) w.push_back(to_float(h));
    return w;
  }();
  test::each_row_channel(kRows, channels / V, [&](int64_t r, int64_t q) {
    const int64_t c = q * V;  // db first-written (bit 1), da added
    add_relu_backward_at<V>(r, c, channels, sum_y.data(), dy.half.data(), da.data(), db.data(), 2u);
    add_relu_backward_at<V>(r, c, channels, sum_y_wide.data(), dy.wide.data(), eda.data(), edb.data(), 2u);
  });
  test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
    batch_norm_apply_at(r, c, channels, x.half.data(), scale_shift.data(), y.data());
    batch_norm_apply_at(r, c, channels, x.wide.data(), scale_shift.data(), ey.data());
    batch_norm_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), saved.data(), coefficients.data(),
                                d_bn.data());
    batch_norm_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), saved.data(), coefficients.data(),
                                ed_bn.data());
    batch_norm_relu_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), saved.data(), scale_shift.data(),
                                     coefficients.data(), d_bn_relu.data());
    batch_norm_relu_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), saved.data(), scale_shift.data(),
                                     coefficients.data(), ed_bn_relu.data());
  });
  const std::string what = "C " + std::to_string(channels) + ", V " + std::to_string(V);
  expect_rounded_once(y, ey, what + " batch norm apply");
  expect_rounded_once(y_relu, ey_relu, what + " batch norm + relu");
  expect_rounded_once(sum_y, esum_y, what + " add + relu");
  expect_rounded_once(da, eda, what + " add + relu da");
  expect_rounded_once(db, edb, what + " add + relu db (first writer)");
  expect_rounded_once(d_bn, ed_bn, what + " batch norm dx");
  expect_rounded_once(d_bn_relu, ed_bn_relu, what + " batch norm + relu dx");
}

TYPED_TEST(HalfStorage, BatchNormAndFusedBodiesAreTheFp32BodiesRoundedOnce) {
  batch_norm_and_fused_match<TypeParam, 1>(13);
  batch_norm_and_fused_match<TypeParam, 1>(24);
  batch_norm_and_fused_match<TypeParam, 8>(24);
}

// Statistics and backward sums read the widened values: the same doubles as the fp32 terms'.
TYPED_TEST(HalfStorage, BatchNormSumsAreTheFp32Sums) {
  using H = TypeParam;
  const int64_t channels = 13;
  const size_t n = static_cast<size_t>(kRows * channels);
  const Stored<H> x(n, 31, false), dy(n, 32);
  const std::vector<float> saved = random_floats(static_cast<size_t>(2 * channels), 33, 0.5f, 2.0f);
  const auto half = test::channel_sums(BatchNormBackwardTerm<H>{x.half.data(), dy.half.data(), saved.data(), channels},
                                       1, kRows, channels);
  const auto wide = test::channel_sums(
      BatchNormBackwardTerm<float>{x.wide.data(), dy.wide.data(), saved.data(), channels}, 1, kRows, channels);
  ASSERT_EQ(half.size(), wide.size());
  for (size_t i = 0; i < half.size(); ++i)
    if (!std::isnan(wide[i])) {
      ASSERT_EQ(half[i], wide[i]) << name_of<H>() << " at " << i;
    }
  EXPECT_EQ(test::channel_sums(SumTerm<H>{x.half.data(), channels}, 1, kRows, channels),
            test::channel_sums(SumTerm<float>{x.wide.data(), channels}, 1, kRows, channels));
  EXPECT_EQ(test::channel_sums(BatchNormMomentsTerm<H>{x.half.data(), channels}, 1, kRows, channels),  // one_pass
            test::channel_sums(BatchNormMomentsTerm<float>{x.wide.data(), channels}, 1, kRows, channels));
}

// DeepCAM's separable 3x3 convs: padding = dilation, odd sizes.
DepthwiseShape depthwise(int64_t batch, int64_t h, int64_t w, int64_t channels, int64_t stride, int64_t dilation,
                         bool bias) {
  DepthwiseShape s;
  s.batch = batch, s.channels = channels, s.bias = bias;
  const int64_t in[3] = {1, h, w};
  for (int d = 1; d < 3; ++d) {
    s.in[d] = in[d], s.kernel[d] = 3, s.stride[d] = stride, s.dilation[d] = dilation, s.pad[d] = dilation;
    s.out[d] = (in[d] + 2 * dilation - 2 * dilation - 1) / stride + 1;
  }
  return s;
}

template <class H, int V>
void depthwise_matches(const DepthwiseShape& s, const std::string& what) {
  const int64_t c = s.channels;
  const Stored<H> x(static_cast<size_t>(s.in_positions() * c), 41), dy(static_cast<size_t>(s.out_positions() * c), 42, false);
  const Stored<H> dx(static_cast<size_t>(s.in_positions() * c), 43, false);
  const std::vector<float> w = random_floats(static_cast<size_t>(s.taps() * c), 44), b = random_floats(static_cast<size_t>(c), 45);
  std::vector<H> y(static_cast<size_t>(s.out_positions() * c)), d = dx.half;
  std::vector<float> ey(y.size()), ed = dx.wide;
  test::each_row_channel(s.out_positions(), c / V, [&](int64_t p, int64_t q) {
    depthwise_forward_at<V>(p, q * V, s, x.half.data(), w.data(), b.data(), y.data());
    depthwise_forward_at<V>(p, q * V, s, x.wide.data(), w.data(), b.data(), ey.data());
  });
  test::each_row_channel(s.in_positions(), c / V, [&](int64_t p, int64_t q) {
    depthwise_backward_data_at<V>(p, q * V, s, w.data(), dy.half.data(), d.data());
    depthwise_backward_data_at<V>(p, q * V, s, w.data(), dy.wide.data(), ed.data());
  });
  expect_rounded_once(y, ey, what + ", V " + std::to_string(V) + " depthwise forward");
  expect_rounded_once(d, ed, what + ", V " + std::to_string(V) + " depthwise dx");
}

TYPED_TEST(HalfStorage, DepthwiseBodiesAreTheFp32BodiesRoundedOnce) {
  depthwise_matches<TypeParam, 1>(depthwise(2, 7, 9, 13, 1, 1, false), "s1 d1 C 13");
  depthwise_matches<TypeParam, 1>(depthwise(3, 8, 9, 5, 2, 2, true), "s2 d2 C 5, bias");
  depthwise_matches<TypeParam, 8>(depthwise(2, 9, 7, 24, 2, 2, true), "s2 d2 C 24, bias");
}

// concat's copies are exact; its backward adds a band of dy into a half gradient, rounded once.
TYPED_TEST(HalfStorage, ConcatBodiesAreTheFp32BodiesRoundedOnce) {
  using H = TypeParam;
  const int64_t widths[2] = {13, 6}, total = 19;
  std::vector<H> y(static_cast<size_t>(kRows * total));
  std::vector<float> ey(y.size());
  const Stored<H> dy(y.size(), 51);
  int64_t offset = 0;
  for (const int64_t width : widths) {
    const size_t n = static_cast<size_t>(kRows * width);
    const Stored<H> x(n, 52 + static_cast<uint32_t>(width)), dx(n, 54 + static_cast<uint32_t>(width), false);
    std::vector<H> d = dx.half, d_first(n, H{0x7777u});
    std::vector<float> ed = dx.wide, ed_first(n, 0.0f), wide_first(n, -3.0f);
    test::each_row_channel(kRows, width, [&](int64_t r, int64_t c) {
      copy_columns_at(r, c, width, x.half.data(), total, offset, y.data());
      copy_columns_at(r, c, width, x.wide.data(), total, offset, ey.data());
      add_columns_at(r, c, width, dy.half.data(), total, offset, d.data());
      add_columns_at(r, c, width, dy.wide.data(), total, offset, ed.data());
      // The first writer (no memset before): what adding into zeros gives, the garbage never read.
      add_columns_at(r, c, width, dy.half.data(), total, offset, d_first.data(), false);
      add_columns_at(r, c, width, dy.wide.data(), total, offset, wide_first.data(), false);
      add_columns_at(r, c, width, dy.wide.data(), total, offset, ed_first.data());
    });
    expect_rounded_once(d, ed, "concat backward, width " + std::to_string(width));
    expect_rounded_once(d_first, ed_first, "concat backward's first writer, width " + std::to_string(width));
    for (size_t i = 0; i < n; ++i)  // fp32 too, -0 included: 0 + -0 is +0
      ASSERT_EQ(std::bit_cast<uint32_t>(wide_first[i]), std::bit_cast<uint32_t>(ed_first[i])) << "fp32 first writer at " << i;
    offset += width;
  }
  expect_rounded_once(y, ey, "concat");
}

// The first writer's fp32 bits, -0 included (0 + -0 is +0): those of adding into zeros.
void expect_same_fp32_bits(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i])) << what << " at " << i;
}

// DeepCAM's image-pool branch (issue 33's last fp32 values): global average pooling, channel affine and
// broadcast over x, y, dy and dx stored in H; sums in double (pooling, the affine's parameters) from
// the widened values, each stored result rounded once. Backward: added into a half gradient, and as the
// first writer (garbage before it, never read).
constexpr int64_t kBatch = 3, kPositions = 35, kChannels = 13;  // 7 x 5 positions; channels not a multiple of 8

TYPED_TEST(HalfStorage, GlobalAvgPoolBodiesAreTheFp32BodiesRoundedOnce) {
  using H = TypeParam;
  const size_t n = static_cast<size_t>(kBatch * kPositions * kChannels), pooled = static_cast<size_t>(kBatch * kChannels);
  const Stored<H> x(n, 61), dy(pooled, 62), dx(n, 63, false);
  const std::vector<double> sums = test::channel_sums(SumTerm<H>{x.half.data(), kChannels}, kBatch, kPositions, kChannels);
  const std::vector<double> wide_sums =
      test::channel_sums(SumTerm<float>{x.wide.data(), kChannels}, kBatch, kPositions, kChannels);
  std::vector<H> y(pooled);
  std::vector<float> ey(pooled);
  for (int64_t i = 0; i < static_cast<int64_t>(pooled); ++i) {
    global_avg_pool_finish_at(i, kPositions, sums.data(), y.data());
    global_avg_pool_finish_at(i, kPositions, wide_sums.data(), ey.data());
  }
  expect_rounded_once(y, ey, "global_avg_pool forward");
  const float inverse = 1.0f / static_cast<float>(kPositions);
  std::vector<H> d = dx.half, d_first(n, H{0x7777u});
  std::vector<float> ed = dx.wide, ed_first(n, 0.0f), wide_first(n, -3.0f);
  test::each_row_channel(kBatch * kPositions, kChannels, [&](int64_t r, int64_t c) {
    global_avg_pool_backward_at(r, c, kChannels, kPositions, inverse, dy.half.data(), d.data());
    global_avg_pool_backward_at(r, c, kChannels, kPositions, inverse, dy.wide.data(), ed.data());
    global_avg_pool_backward_at(r, c, kChannels, kPositions, inverse, dy.half.data(), d_first.data(), false);
    global_avg_pool_backward_at(r, c, kChannels, kPositions, inverse, dy.wide.data(), wide_first.data(), false);
    global_avg_pool_backward_at(r, c, kChannels, kPositions, inverse, dy.wide.data(), ed_first.data());
  });
  expect_rounded_once(d, ed, "global_avg_pool backward");
  expect_rounded_once(d_first, ed_first, "global_avg_pool backward's first writer");
  expect_same_fp32_bits(wide_first, ed_first, "global_avg_pool's fp32 first writer");
}

// Max pooling outside a pool chain (pool_chain=off): x, y, dy, dx in H. Windows that tile (each dx
// element takes one addition: rounded once, and as the first writer over anything), and overlapping
// ones with small-integer gradients (every partial sum exact in H, so the per-addition rounding is too).
TYPED_TEST(HalfStorage, MaxPoolBodiesAreTheFp32BodiesRoundedOnce) {
  using H = TypeParam;
  PoolShape tiled, overlapping;
  tiled.batch = 2, tiled.channels = 5;
  overlapping.batch = 1, overlapping.channels = 3;
  for (int d = 0; d < 3; ++d) {
    tiled.in[d] = 4, tiled.out[d] = 2, tiled.kernel[d] = tiled.stride[d] = 2;
    overlapping.in[d] = d == 0 ? 1 : 7, overlapping.kernel[d] = d == 0 ? 1 : 3, overlapping.stride[d] = d == 0 ? 1 : 2;
    overlapping.out[d] = (overlapping.in[d] - overlapping.kernel[d]) / overlapping.stride[d] + 1;
  }
  ASSERT_TRUE(pool_windows_cover(tiled));
  ASSERT_FALSE(pool_windows_tile(overlapping));
  for (const PoolShape& s : {tiled, overlapping}) {
    const auto in = static_cast<size_t>(s.in_positions() * s.channels), out = static_cast<size_t>(s.out_positions() * s.channels);
    const Stored<H> x(in, 64);
    std::vector<float> small(out), zeros(in, 0.0f);
    for (size_t i = 0; i < out; ++i) small[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    const Stored<H> dy(out, 65, false), dx(in, 66, false);
    std::vector<H> y(out), dy_small;
    std::vector<float> ey(out);
    for (float v : small) dy_small.push_back(from_float<H>(v));
    test::each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
      max_pool_forward_at(pos, c, s, x.half.data(), y.data());
      max_pool_forward_at(pos, c, s, x.wide.data(), ey.data());
    });
    expect_rounded_once(y, ey, "max_pool forward");
    if (pool_windows_tile(s)) {
      std::vector<H> d = dx.half, d_first(in, H{0x7777u});
      std::vector<float> ed = dx.wide, ed_first = zeros;
      test::each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
        max_pool_backward_tiled_at(pos, c, s, x.half.data(), dy.half.data(), d.data());
        max_pool_backward_tiled_at(pos, c, s, x.wide.data(), dy.wide.data(), ed.data());
        max_pool_backward_tiled_at(pos, c, s, x.half.data(), dy.half.data(), d_first.data(), false);
        max_pool_backward_tiled_at(pos, c, s, x.wide.data(), dy.wide.data(), ed_first.data());
      });
      expect_rounded_once(d, ed, "max_pool backward, windows that tile");
      expect_rounded_once(d_first, ed_first, "max_pool backward's first writer");
    } else {
      std::vector<H> d(in, from_float<H>(0.0f));
      std::vector<float> ed = zeros;
      test::each_row_channel(s.in_positions(), s.channels, [&](int64_t p, int64_t c) {
        max_pool_backward_at(p, c, s, x.half.data(), dy_small.data(), d.data());
        max_pool_backward_at(p, c, s, x.wide.data(), small.data(), ed.data());
      });
      expect_rounded_once(d, ed, "max_pool backward, overlapping windows");
      EXPECT_NE(std::count(ed.begin(), ed.end(), 0.0f), static_cast<std::ptrdiff_t>(ed.size()));
    }
  }
}

TYPED_TEST(HalfStorage, BroadcastBodiesAreTheFp32BodiesRoundedOnce) {
  using H = TypeParam;
  const BroadcastShape s = broadcast_shape(std::vector<int64_t>{kBatch, 1, 1, kChannels},
                                           std::vector<int64_t>{kBatch, 7, 5, kChannels});
  const size_t in = static_cast<size_t>(kBatch * kChannels), out = static_cast<size_t>(kBatch * kPositions * kChannels);
  const Stored<H> x(in, 71), dy(out, 72), dx(in, 73, false);
  std::vector<H> y(out);
  std::vector<float> ey(out);
  test::each_row_channel(s.out_rows(), kChannels, [&](int64_t r, int64_t c) {
    broadcast_forward_at(r, c, s, x.half.data(), y.data());
    broadcast_forward_at(r, c, s, x.wide.data(), ey.data());
  });
  expect_rounded_once(y, ey, "broadcast forward");
  std::vector<H> d = dx.half, d_first(in, H{0x7777u});
  std::vector<float> ed = dx.wide, ed_first(in, 0.0f), wide_first(in, -3.0f);
  test::each_row_channel(s.in_rows(), kChannels, [&](int64_t q, int64_t c) {
    broadcast_backward_at(q, c, s, dy.half.data(), d.data());
    broadcast_backward_at(q, c, s, dy.wide.data(), ed.data());
    broadcast_backward_at(q, c, s, dy.half.data(), d_first.data(), false);
    broadcast_backward_at(q, c, s, dy.wide.data(), wide_first.data(), false);
    broadcast_backward_at(q, c, s, dy.wide.data(), ed_first.data());
  });
  expect_rounded_once(d, ed, "broadcast backward (35 repeats summed in fp32, rounded once)");
  expect_rounded_once(d_first, ed_first, "broadcast backward's first writer");
  expect_same_fp32_bits(wide_first, ed_first, "broadcast's fp32 first writer");
}

TYPED_TEST(HalfStorage, ChannelAffineBodiesAreTheFp32BodiesRoundedOnce) {
  using H = TypeParam;
  const int64_t rows = kBatch * kPositions;
  const size_t n = static_cast<size_t>(rows * kChannels);
  const Stored<H> x(n, 81), dy(n, 82), dx(n, 83, false);
  const std::vector<float> w = random_floats(kChannels, 84), b = random_floats(kChannels, 85);
  std::vector<H> y(n), d = dx.half, d_first(n, H{0x7777u});
  std::vector<float> ey(n), ed = dx.wide, ed_first(n, 0.0f), wide_first(n, -3.0f);
  test::each_row_channel(rows, kChannels, [&](int64_t r, int64_t c) {
    channel_affine_forward_at(r, c, kChannels, x.half.data(), w.data(), b.data(), y.data());
    channel_affine_forward_at(r, c, kChannels, x.wide.data(), w.data(), b.data(), ey.data());
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.half.data(), d.data());
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.wide.data(), ed.data());
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.half.data(), d_first.data(), false);
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.wide.data(), wide_first.data(), false);
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.wide.data(), ed_first.data());
  });
  expect_rounded_once(y, ey, "channel_affine forward");
  expect_rounded_once(d, ed, "channel_affine dx");
  expect_rounded_once(d_first, ed_first, "channel_affine dx's first writer");
  expect_same_fp32_bits(wide_first, ed_first, "channel_affine's fp32 first writer");
  // dw and db (fp32): the same double sums as from the widened x and dy.
  const std::vector<double> sums =
      test::channel_sums(ChannelAffineParamTerm<H>{x.half.data(), dy.half.data(), kChannels}, 1, rows, kChannels);
  const std::vector<double> wide =
      test::channel_sums(ChannelAffineParamTerm<float>{x.wide.data(), dy.wide.data(), kChannels}, 1, rows, kChannels);
  ASSERT_EQ(sums.size(), wide.size());
  for (size_t i = 0; i < sums.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint64_t>(sums[i]), std::bit_cast<uint64_t>(wide[i])) << "channel_affine sums at " << i;
}

// The input's normalization: x fp32 (a graph input), y written in H for the conv that reads it.
TYPED_TEST(HalfStorage, ShiftScaleWritesTheFp32ResultRoundedOnce) {
  using H = TypeParam;
  const int64_t rows = kBatch * kPositions;
  const size_t n = static_cast<size_t>(rows * kChannels);
  const std::vector<float> x = half_edges(n, 91), shift = random_floats(kChannels, 92), scale = random_floats(kChannels, 93);
  std::vector<H> y(n);
  std::vector<float> ey(n);
  test::each_row_channel(rows, kChannels, [&](int64_t r, int64_t c) {
    shift_scale_forward_at(r, c, kChannels, x.data(), shift.data(), scale.data(), y.data());
    shift_scale_forward_at(r, c, kChannels, x.data(), shift.data(), scale.data(), ey.data());
  });
  expect_rounded_once(y, ey, "shift_scale");
}

// The pool chain (the SDK's body) in fp16 through this backend's load_float / store_as overloads. It
// rounds as the unfused fp16 chain stores: pre = z + bias rounded, the activation rounded. So y is the
// fp32 chain's y on the rounded pre (no bias) rounded once (rounding is monotonic: the max of the
// rounded activations is the rounded max), and dz is written at the window's winner only.
TEST(HalfStorageTypes, PoolChainInFp16RoundsTheChainOnce) {
  PoolChainShape s;
  s.batch = 2, s.channels = s.channel_block = 13, s.alpha = 0.3f;
  const int64_t in[3] = {5, 7, 3}, out[3] = {2, 3, 1};
  for (int d = 0; d < 3; ++d) s.in[d] = in[d], s.out[d] = out[d], s.kernel[d] = 2;
  const size_t zn = static_cast<size_t>(s.batch * 5 * 7 * 3 * s.channels), yn = static_cast<size_t>(s.out_positions() * s.channels);
  const Stored<F16> z(zn, 61), dy(yn, 62, false);
  const std::vector<float> bias = random_floats(static_cast<size_t>(s.channels), 63);
  std::vector<F16> y(yn), dz(zn, F16{0});  // zeros: the launcher's memset (odd sizes leave a ragged edge)
  std::vector<float> ey(yn), pre_rounded(zn);
  std::vector<uint8_t> winner(yn), ewinner(yn);
  for (size_t i = 0; i < zn; ++i)
    pre_rounded[i] = to_float(from_float<F16>(z.wide[i] + bias[i % static_cast<size_t>(s.channels)]));
  test::each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
    chain_pool_forward_at<F16>(pos, c, s, z.half.data(), bias.data(), y.data(), winner.data());
    chain_pool_forward_at<float>(pos, c, s, pre_rounded.data(), nullptr, ey.data(), ewinner.data());
    chain_pool_backward_at<F16>(pos, c, s, z.half.data(), bias.data(), dy.half.data(), winner.data(), dz.data());
  });
  expect_rounded_once(y, ey, "fp16 pool chain y");
  size_t written = 0;
  for (size_t i = 0; i < zn; ++i) written += dz[i].bits != 0;
  EXPECT_GT(written, yn / 2);  // a winner per window (but where dy or the slope give 0)
  EXPECT_LE(written, yn);
  // A window's winner: its dz is (pre > 0 ? dy : alpha * dy) rounded once.
  const int64_t pos = 5, c = 4;
  const size_t at = static_cast<size_t>(pos * s.channels + c);
  int64_t n = pos / (s.out[0] * s.out[1] * s.out[2]), rest = pos % (s.out[0] * s.out[1] * s.out[2]);
  const int64_t o0 = rest / (s.out[1] * s.out[2]), o1 = rest / s.out[2] % s.out[1], o2 = rest % s.out[2];
  const int64_t tap = winner[at], k0 = tap / 4, k1 = tap / 2 % 2, k2 = tap % 2;
  const size_t zi = static_cast<size_t>((((n * 5 + o0 * 2 + k0) * 7 + o1 * 2 + k1) * 3 + o2 * 2 + k2) * s.channels + c);
  const float pre = pre_rounded[zi], g = 0.0f + dy.wide[at];
  EXPECT_EQ(dz[zi].bits, from_float<F16>(0.0f + (pre > 0 ? g : s.alpha * g)).bits);
}

// Loss scaling with fp16 gradients: a scaled gradient past 65504 is stored as Inf, and the sums that
// reach the parameters' gradients carry it, so that the optimizer's non-finite count after the
// allreduce (UnscaleTerm) sees the overflow and the step is skipped.
TEST(HalfStorageTypes, AnFp16GradientOverflowReachesTheNonfiniteCount) {
  const int64_t channels = 3;
  std::vector<float> x_wide = random_floats(static_cast<size_t>(kRows * channels), 71);
  std::vector<F16> x, dy(static_cast<size_t>(kRows * channels), from_float<F16>(1.0f));
  for (float v : x_wide) x.push_back(from_float<F16>(v));
  std::vector<F16> d_relu(dy.size());
  const std::vector<F16> big(dy.size(), from_float<F16>(40000.0f));
  for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i)  // 40000 + 40000 overflows fp16
    add_forward_at(i, big.data(), big.data(), dy.data());
  EXPECT_TRUE(std::isinf(to_float(dy[0])));
  const std::vector<float> saved(2 * channels, 1.0f);
  const auto sums = test::channel_sums(BatchNormBackwardTerm<F16>{x.data(), dy.data(), saved.data(), channels}, 1,
                                       kRows, channels);
  float gradient = static_cast<float>(sums[0]);  // dbeta's sum: Inf
  const float scale = 65536.0f;
  double nonfinite = 0;
  const UnscaleTerm unscale{&gradient, &scale};
  unscale(0, &nonfinite);
  EXPECT_EQ(nonfinite, 1.0);
}

}  // namespace
}  // namespace mlph::cuda
