// The cuda backend's kernels of issue 33 (depthwise convolution, fused batch-norm + ReLU,
// add + ReLU, and CosmoFlow's bias + leaky ReLU + max-pool) run on the CPU index by index as their launchers run them (device_order.hpp), against
// the reference backend (compiled, like this test, with -ffp-contract=off): the same bits where the
// body performs the reference's float operations in its order; sums in double within kSumTolerance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
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

namespace mlph::cuda {
namespace {

namespace ref = mlph::reference;
using test::each;
using test::each_row_channel;
using test::kSumTolerance;
using test::pool;
using test::random_floats;
using test::special_floats;

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << what << " at " << i << ": " << actual[i] << " vs the reference's " << expected[i];
}

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected, double scale,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_LE(std::fabs(actual[i] - expected[i]), scale * (1.0 + std::fabs(expected[i])))
        << what << " at " << i << ": " << actual[i] << " vs " << expected[i];
}

// ---- depthwise convolution ----------------------------------------------------------------------

// A depthwise conv as the graph lowers it: 2-D (or 3-D) right-aligned, padding = dilation (DeepCAM's
// 'same' separable convs), odd sizes.
sdk::program::Window depthwise_window(int64_t batch, std::vector<int64_t> in, int64_t channels, int64_t kernel,
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

std::vector<DepthwiseCase> depthwise_cases() {
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

template <int V>
void depthwise_forward_matches(const DepthwiseCase& t) {
  const sdk::program::Window& g = t.g;
  const DepthwiseShape s = depthwise_shape(g, t.bias);
  const int64_t c = g.in_channels;
  const std::vector<float> x = special_floats(static_cast<size_t>(s.in_positions() * c), 1);
  const std::vector<float> w = random_floats(static_cast<size_t>(s.taps() * c), 2);
  const std::vector<float> b = random_floats(static_cast<size_t>(c), 3);
  std::vector<float> y(static_cast<size_t>(s.out_positions() * c), -7.0f), expected(y.size(), 5.0f);
  each_channel_vector<V>(s.out_positions(), c, [&](int64_t p, int64_t ch) {
    depthwise_forward_at<V>(p, ch, s, x.data(), w.data(), b.data(), y.data());
  });
  ref::Scratch scratch;
  ref::conv_forward(pool(), scratch, g, x.data(), w.data(), t.bias ? b.data() : nullptr, expected.data());
  expect_same_bits(y, expected, std::string("depthwise forward, ") + t.what + ", V " + std::to_string(V));
}

template <int V>
void depthwise_backward_data_matches(const DepthwiseCase& t) {
  const sdk::program::Window& g = t.g;
  const DepthwiseShape s = depthwise_shape(g, t.bias);
  const int64_t c = g.in_channels;
  const std::vector<float> w = special_floats(static_cast<size_t>(s.taps() * c), 4);
  const std::vector<float> dy = random_floats(static_cast<size_t>(s.out_positions() * c), 5);
  std::vector<float> dx = random_floats(static_cast<size_t>(s.in_positions() * c), 6), expected = dx;  // accumulates
  each_channel_vector<V>(s.in_positions(), c, [&](int64_t p, int64_t ch) {
    depthwise_backward_data_at<V>(p, ch, s, w.data(), dy.data(), dx.data());
  });
  ref::Scratch scratch;
  ref::conv_backward_data(pool(), scratch, g, w.data(), dy.data(), expected.data());
  expect_same_bits(dx, expected, std::string("depthwise dx, ") + t.what + ", V " + std::to_string(V));
}

TEST(CudaOwnKernels, DepthwiseForwardIsTheReferenceBits) {
  for (const DepthwiseCase& t : depthwise_cases()) {
    depthwise_forward_matches<1>(t);
    if (t.g.in_channels % 4 == 0) depthwise_forward_matches<4>(t);
  }
}

TEST(CudaOwnKernels, DepthwiseDataGradientGatherIsTheReferenceBits) {
  for (const DepthwiseCase& t : depthwise_cases()) {
    depthwise_backward_data_matches<1>(t);
    if (t.g.in_channels % 4 == 0) depthwise_backward_data_matches<4>(t);
  }
}

// The weight gradient's sums [tap][C] as depthwise_backward_weights makes them: a 2-D 3x3 kernel's 9 taps
// per channel at once, other kernels one tap per "channel" of taps x C.
std::vector<double> depthwise_weight_sums(const DepthwiseShape& s, const float* x, const float* dy) {
  if (is_depthwise_3x3(s)) return test::channel_sums(Depthwise3x3WeightTerm{s, x, dy}, 1, s.out_positions(), s.channels);
  return test::channel_sums(DepthwiseWeightTerm{s, x, dy}, 1, s.out_positions(), s.taps() * s.channels);
}

// dw and db: the launcher's channel sums in double (device_order.hpp's order) against the definition
// summed in double (kSumTolerance) and against the reference, whose float sums over rows are only
// within 1e-4 of the magnitude of the terms.
TEST(CudaOwnKernels, DepthwiseWeightGradientIsTheChannelSumOfItsTerms) {
  for (const DepthwiseCase& t : depthwise_cases()) {
    const sdk::program::Window& g = t.g;
    const DepthwiseShape s = depthwise_shape(g, t.bias);
    const int64_t c = g.in_channels, taps = s.taps(), rows = s.out_positions();
    const std::vector<float> x = random_floats(static_cast<size_t>(s.in_positions() * c), 7);
    const std::vector<float> dy = random_floats(static_cast<size_t>(rows * c), 8);
    std::vector<float> dw = random_floats(static_cast<size_t>(taps * c), 9), expected_dw = dw;
    const std::vector<double> sums = depthwise_weight_sums(s, x.data(), dy.data());
    each(taps * c, [&](int64_t j) { depthwise_weight_add_at(j, sums.data(), dw.data()); });
    // The definition: over every output position and tap, the input it reads (0 in the padding), one tap
    // at a time (the 3x3 term's indexing checked against this one's).
    std::vector<double> definition(dw.size());
    for (size_t j = 0; j < dw.size(); ++j) definition[j] = expected_dw[j];
    std::vector<double> exact(dw.size(), 0.0);
    ref::Scratch scratch;
    ref::conv_backward_weights(pool(), scratch, g, x.data(), dy.data(), expected_dw.data(), nullptr);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < taps * c; ++j) {
        double term[1];
        DepthwiseWeightTerm{s, x.data(), dy.data()}(r, j, term);
        exact[static_cast<size_t>(j)] += term[0];
      }
    for (size_t j = 0; j < dw.size(); ++j) definition[j] = static_cast<float>(definition[j] + static_cast<float>(exact[j]));
    expect_near(dw, definition, kSumTolerance, std::string("depthwise dw, ") + t.what);
    std::vector<double> reference(expected_dw.begin(), expected_dw.end());
    expect_near(dw, reference, 1e-4 * std::sqrt(static_cast<double>(rows)), std::string("depthwise dw vs the reference, ") + t.what);
  }
}


// ---- fused batch-norm apply + ReLU, add + ReLU -----------------------------------------------------

// [rows, C] with C not a multiple of 8 (and one that is a multiple of 4 for the 16-byte bodies).
constexpr int64_t kRows = 301;

// Each (r, c) of a V-channel body over [rows, C].
template <int V, class Body>
void each_row_vector(int64_t rows, int64_t channels, Body&& body) {
  test::each_row_channel(rows, channels / V, [&](int64_t r, int64_t v) { body(r, v * V); });
}

// The training forward's per-channel statistics as the launchers compute them (batch_norm.hpp).
struct Statistics {
  std::vector<float> saved, scale_shift;
};
Statistics training_statistics(const std::vector<float>& x, int64_t rows, int64_t channels,
                               const std::vector<float>& gamma, const std::vector<float>& beta) {
  std::vector<double> stats(static_cast<size_t>(2 * channels + 1));
  const std::vector<double> sums = test::channel_sums(SumTerm{x.data(), channels}, 1, rows, channels);
  std::copy(sums.begin(), sums.end(), stats.begin());
  stats[static_cast<size_t>(channels)] = static_cast<double>(rows);
  each(channels, [&](int64_t c) { batch_norm_mean_at(c, channels, stats.data()); });
  const std::vector<double> deviations =
      test::channel_sums(BatchNormDeviationTerm{x.data(), stats.data(), channels}, 1, rows, channels);
  std::copy(deviations.begin(), deviations.end(), stats.begin() + channels + 1);
  Statistics s{std::vector<float>(static_cast<size_t>(2 * channels)), std::vector<float>(static_cast<size_t>(2 * channels))};
  std::vector<float> rm(static_cast<size_t>(channels), 0.0f), rv(static_cast<size_t>(channels), 1.0f);
  each(channels, [&](int64_t c) {
    batch_norm_finalize_at(c, channels, 1e-5, 0.1, stats.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                           s.saved.data(), s.scale_shift.data());
  });
  return s;
}

// Evaluation (running statistics) is the reference's bits; the fused pass equals batch norm then ReLU.
template <int V>
void batch_norm_relu_forward_matches(int64_t channels) {
  const std::vector<float> x = special_floats(static_cast<size_t>(kRows * channels), 11);
  const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 12);
  const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 13);
  const std::vector<float> rm = random_floats(static_cast<size_t>(channels), 14);
  const std::vector<float> rv = random_floats(static_cast<size_t>(channels), 15, 0.5f, 2.0f);
  std::vector<float> scale_shift(static_cast<size_t>(2 * channels)), y(x.size(), -3.0f), normalized(x.size()),
      expected(x.size());
  each(channels, [&](int64_t c) {
    batch_norm_eval_coefficients_at(c, channels, 1e-5, gamma.data(), beta.data(), rm.data(), rv.data(), scale_shift.data());
  });
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    batch_norm_relu_apply_at<V>(r, c, channels, x.data(), scale_shift.data(), y.data());
  });
  ref::batch_norm_eval_forward(pool(), {kRows, channels}, {1e-5, 0.1, 1}, x.data(), gamma.data(), beta.data(), rm.data(),
                               rv.data(), normalized.data());
  ref::relu_forward(pool(), kRows * channels, normalized.data(), expected.data());
  expect_same_bits(y, expected, "batch norm + relu (evaluation), C " + std::to_string(channels) + ", V " + std::to_string(V));
}

TEST(CudaOwnKernels, BatchNormReluForwardIsBatchNormThenReluBits) {
  batch_norm_relu_forward_matches<1>(13);
  batch_norm_relu_forward_matches<1>(20);
  batch_norm_relu_forward_matches<4>(20);
}

// Backward with the mask recomputed from x: the reference's relu backward (into a zeroed gradient) then
// its batch-norm backward, on the same statistics; sums reordered, so within kSumTolerance.
TEST(CudaOwnKernels, BatchNormReluBackwardIsReluThenBatchNormBackward) {
  for (const int64_t channels : {13, 20}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(kRows * channels), 21);
    const std::vector<float> dy = random_floats(x.size(), 22);
    const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 23);
    const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 24);
    const Statistics st = training_statistics(x, kRows, channels, gamma, beta);
    // Ours, fused: sums, parameters, data.
    const std::vector<double> sums = [&] {
      std::vector<double> s = test::channel_sums(
          BatchNormReluBackwardTerm{x.data(), dy.data(), st.saved.data(), st.scale_shift.data(), channels}, 1, kRows,
          channels);
      s.push_back(static_cast<double>(kRows));
      return s;
    }();
    std::vector<float> dgamma(static_cast<size_t>(channels), 0.5f), dbeta(dgamma), dx = random_floats(x.size(), 25);
    std::vector<float> coefficients(static_cast<size_t>(3 * channels));
    std::vector<float> expected_dgamma = dgamma, expected_dbeta = dbeta, expected_dx = dx;
    each(channels, [&](int64_t c) { batch_norm_backward_params_at(c, channels, sums.data(), dgamma.data(), dbeta.data()); });
    each(channels, [&](int64_t c) {
      batch_norm_backward_coefficients_at(c, channels, sums.data(), gamma.data(), st.saved.data(), coefficients.data());
    });
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_relu_backward_data_at(r, c, channels, x.data(), dy.data(), st.saved.data(), st.scale_shift.data(),
                                       coefficients.data(), dx.data());
    });
    // The reference's two ops on the same statistics: ReLU's input is the forward's normalized x.
    std::vector<float> normalized(x.size()), d_normalized(x.size(), 0.0f);
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.data(), st.scale_shift.data(), normalized.data());
    });
    ref::relu_backward(pool(), kRows * channels, normalized.data(), dy.data(), d_normalized.data());
    ref::batch_norm_backward(pool(), {kRows, channels}, x.data(), gamma.data(), st.saved.data(), d_normalized.data(),
                             expected_dx.data(), expected_dgamma.data(), expected_dbeta.data());
    const std::string what = "batch norm + relu backward, C " + std::to_string(channels);
    expect_near(dx, std::vector<double>(expected_dx.begin(), expected_dx.end()), kSumTolerance, what + " dx");
    expect_near(dgamma, std::vector<double>(expected_dgamma.begin(), expected_dgamma.end()), kSumTolerance, what + " dgamma");
    expect_near(dbeta, std::vector<double>(expected_dbeta.begin(), expected_dbeta.end()), kSumTolerance, what + " dbeta");
  }
}

template <int V>
void add_relu_matches(int64_t channels) {
  const std::vector<float> a = special_floats(static_cast<size_t>(kRows * channels), 31);
  const std::vector<float> b = special_floats(a.size(), 32);
  const std::vector<float> dy = special_floats(a.size(), 33);
  std::vector<float> y(a.size(), -1.0f), sum(a.size()), expected(a.size());
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) { add_relu_forward_at<V>(r, c, channels, a.data(), b.data(), y.data()); });
  ref::add_forward(pool(), kRows * channels, a.data(), b.data(), sum.data());
  ref::relu_forward(pool(), kRows * channels, sum.data(), expected.data());
  const std::string what = "add + relu, C " + std::to_string(channels) + ", V " + std::to_string(V);
  expect_same_bits(y, expected, what);
  // Backward from y: da, db accumulate; a null gradient is skipped.
  std::vector<float> da = random_floats(a.size(), 34), db = random_floats(a.size(), 35), d_sum(a.size(), 0.0f);
  std::vector<float> expected_da = da, expected_db = db, untouched = db;
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, y.data(), dy.data(), da.data(), db.data());
  });
  ref::relu_backward(pool(), kRows * channels, sum.data(), dy.data(), d_sum.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_db.data());
  expect_same_bits(da, expected_da, what + " da");
  expect_same_bits(db, expected_db, what + " db");
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, y.data(), dy.data(), da.data(), static_cast<float*>(nullptr));
  });
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  expect_same_bits(da, expected_da, what + " da, db not needed");
}

TEST(CudaOwnKernels, AddReluForwardAndBackwardAreAddThenReluBits) {
  add_relu_matches<1>(13);
  add_relu_matches<1>(20);
  add_relu_matches<4>(20);
}

// ---- bf16 storage (issue 33 item 4, kernel side): fp32 arithmetic, each result rounded once --------
// Held to the reference run on the bf16-rounded inputs, its float results rounded once to bf16.

std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16{float_to_bfloat16(v[i])};
  return out;
}
std::vector<float> to_floats(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}
void expect_same_bits(const std::vector<Bf16>& actual, const std::vector<float>& reference, const std::string& what) {
  ASSERT_EQ(actual.size(), reference.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(actual[i].bits, float_to_bfloat16(reference[i]))
        << what << " at " << i << ": " << to_float(actual[i]) << " vs the reference's " << reference[i] << " rounded";
}

template <int V>
void depthwise_bf16_matches(const DepthwiseCase& t) {
  const sdk::program::Window& g = t.g;
  const DepthwiseShape s = depthwise_shape(g, t.bias);
  const int64_t c = g.in_channels;
  const std::vector<Bf16> x = to_bf16(special_floats(static_cast<size_t>(s.in_positions() * c), 41));
  const std::vector<float> w = random_floats(static_cast<size_t>(s.taps() * c), 42), b = random_floats(static_cast<size_t>(c), 43);
  const std::vector<Bf16> dy = to_bf16(random_floats(static_cast<size_t>(s.out_positions() * c), 44));
  std::vector<Bf16> y(static_cast<size_t>(s.out_positions() * c)), dx = to_bf16(random_floats(x.size(), 45));
  std::vector<float> expected_y(y.size()), expected_dx = to_floats(dx);
  each_channel_vector<V>(s.out_positions(), c, [&](int64_t p, int64_t ch) {
    depthwise_forward_at<V>(p, ch, s, x.data(), w.data(), b.data(), y.data());
  });
  each_channel_vector<V>(s.in_positions(), c, [&](int64_t p, int64_t ch) {
    depthwise_backward_data_at<V>(p, ch, s, w.data(), dy.data(), dx.data());
  });
  ref::Scratch scratch;
  const std::vector<float> xf = to_floats(x), dyf = to_floats(dy);
  ref::conv_forward(pool(), scratch, g, xf.data(), w.data(), t.bias ? b.data() : nullptr, expected_y.data());
  ref::conv_backward_data(pool(), scratch, g, w.data(), dyf.data(), expected_dx.data());
  const std::string what = std::string("bf16 depthwise, ") + t.what + ", V " + std::to_string(V);
  expect_same_bits(y, expected_y, what + " forward");
  expect_same_bits(dx, expected_dx, what + " dx");
}

TEST(CudaOwnKernels, DepthwiseInBf16IsTheReferenceOnRoundedInputsRoundedOnce) {
  for (const DepthwiseCase& t : depthwise_cases()) {
    depthwise_bf16_matches<1>(t);
    if (t.g.in_channels % 8 == 0) depthwise_bf16_matches<8>(t);
  }
  const DepthwiseCase wide{"3x3 s2 d2, C 24", depthwise_window(2, {9, 7}, 24, 3, 2, 2, 2), true};
  depthwise_bf16_matches<1>(wide);
  depthwise_bf16_matches<8>(wide);
}

template <int V>
void fused_bf16_matches(int64_t channels) {
  const size_t n = static_cast<size_t>(kRows * channels);
  const std::vector<Bf16> x = to_bf16(special_floats(n, 51)), a2 = to_bf16(special_floats(n, 52));
  const std::vector<Bf16> dy = to_bf16(special_floats(n, 53));
  const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * channels), 54);
  const std::vector<float> xf = to_floats(x), a2f = to_floats(a2), dyf = to_floats(dy);
  std::vector<Bf16> y(n), sum_y(n), da = to_bf16(random_floats(n, 55)), db = to_bf16(random_floats(n, 56));
  std::vector<float> expected_y(n), sum(n), expected_sum_y(n), d_sum(n, 0.0f), expected_da = to_floats(da),
      expected_db = to_floats(db);
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    batch_norm_relu_apply_at<V>(r, c, channels, x.data(), scale_shift.data(), y.data());
    add_relu_forward_at<V>(r, c, channels, x.data(), a2.data(), sum_y.data());
  });
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, sum_y.data(), dy.data(), da.data(), db.data());
  });
  test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {  // batch norm's apply: the reference's expression
    const size_t i = static_cast<size_t>(r * channels + c);
    expected_y[i] = xf[i] * scale_shift[static_cast<size_t>(c)] + scale_shift[static_cast<size_t>(channels + c)];
  });
  ref::relu_forward(pool(), kRows * channels, expected_y.data(), expected_y.data());
  ref::add_forward(pool(), kRows * channels, xf.data(), a2f.data(), sum.data());
  ref::relu_forward(pool(), kRows * channels, sum.data(), expected_sum_y.data());
  // The ReLU's mask from the stored (rounded) output, as a bf16 model's relu backward would read it.
  const std::vector<float> sum_yf = to_floats(sum_y);
  ref::relu_backward(pool(), kRows * channels, sum_yf.data(), dyf.data(), d_sum.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_db.data());
  const std::string what = "bf16, C " + std::to_string(channels) + ", V " + std::to_string(V);
  expect_same_bits(y, expected_y, what + " batch norm + relu");
  expect_same_bits(sum_y, expected_sum_y, what + " add + relu");
  expect_same_bits(da, expected_da, what + " add + relu da");
  expect_same_bits(db, expected_db, what + " add + relu db");
}

TEST(CudaOwnKernels, FusedKernelsInBf16AreTheReferenceOnRoundedInputsRoundedOnce) {
  fused_bf16_matches<1>(13);
  fused_bf16_matches<1>(24);
  fused_bf16_matches<8>(24);
}

// ---- every body between DeepCAM's convs in bf16 (issue 33 item 4): its fp32 body on the widened ----
// inputs, each stored result rounded once. The arithmetic is the same, so the bits are: sums (doubles of
// the same terms in the same order) equal, outputs and accumulated gradients equal after one rounding.

void expect_same_sums(const std::vector<double>& actual, const std::vector<double>& expected, const std::string& what) {
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

TEST(CudaOwnKernels, BatchNormPassesInBf16AreTheFp32BodiesOnWidenedInputsRoundedOnce) {
  for (const int64_t channels : {13, 24}) {
    const size_t n = static_cast<size_t>(kRows * channels);
    const Stored x(n, 61, false), dy(n, 62), dx(n, 63, false);
    const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 64);
    const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 65);
    const std::string what = "bf16 batch norm, C " + std::to_string(channels);
    // Statistics: the same terms, so the same doubles.
    expect_same_sums(test::channel_sums(SumTerm<Bf16>{x.half.data(), channels}, 1, kRows, channels),
                     test::channel_sums(SumTerm<float>{x.wide.data(), channels}, 1, kRows, channels), what + " sum");
    const Statistics st = training_statistics(x.wide, kRows, channels, gamma, beta);
    std::vector<double> mean(st.saved.begin(), st.saved.begin() + channels);
    expect_same_sums(test::channel_sums(BatchNormDeviationTerm<Bf16>{x.half.data(), mean.data(), channels}, 1, kRows, channels),
                     test::channel_sums(BatchNormDeviationTerm<float>{x.wide.data(), mean.data(), channels}, 1, kRows, channels),
                     what + " deviations");
    // Apply, plain and with the ReLU.
    std::vector<Bf16> y(n), y_relu(n);
    std::vector<float> expected(n), expected_relu(n);
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.half.data(), st.scale_shift.data(), y.data());
      batch_norm_apply_at(r, c, channels, x.wide.data(), st.scale_shift.data(), expected.data());
    });
    each_row_vector<1>(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_relu_apply_at<1>(r, c, channels, x.half.data(), st.scale_shift.data(), y_relu.data());
      batch_norm_relu_apply_at<1>(r, c, channels, x.wide.data(), st.scale_shift.data(), expected_relu.data());
    });
    expect_same_bits(y, expected, what + " apply");
    expect_same_bits(y_relu, expected_relu, what + " apply + relu");
    // Backward: sums, then dx accumulated into a bf16 gradient (read, added in fp32, rounded once).
    const BatchNormBackwardTerm<Bf16> half_term{x.half.data(), dy.half.data(), st.saved.data(), channels};
    const BatchNormBackwardTerm<float> wide_term{x.wide.data(), dy.wide.data(), st.saved.data(), channels};
    std::vector<double> sums = test::channel_sums(half_term, 1, kRows, channels);
    expect_same_sums(sums, test::channel_sums(wide_term, 1, kRows, channels), what + " backward sums");
    const BatchNormReluBackwardTerm<Bf16> half_relu{x.half.data(), dy.half.data(), st.saved.data(), st.scale_shift.data(), channels};
    const BatchNormReluBackwardTerm<float> wide_relu{x.wide.data(), dy.wide.data(), st.saved.data(), st.scale_shift.data(), channels};
    expect_same_sums(test::channel_sums(half_relu, 1, kRows, channels), test::channel_sums(wide_relu, 1, kRows, channels),
                     what + " + relu backward sums");
    sums.push_back(static_cast<double>(kRows));
    std::vector<float> coefficients(static_cast<size_t>(3 * channels));
    each(channels, [&](int64_t c) {
      batch_norm_backward_coefficients_at(c, channels, sums.data(), gamma.data(), st.saved.data(), coefficients.data());
    });
    std::vector<Bf16> d_half = dx.half, d_relu_half = dx.half;
    std::vector<float> d_wide = dx.wide, d_relu_wide = dx.wide;
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), st.saved.data(), coefficients.data(),
                                  d_half.data());
      batch_norm_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), st.saved.data(), coefficients.data(),
                                  d_wide.data());
      batch_norm_relu_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), st.saved.data(),
                                       st.scale_shift.data(), coefficients.data(), d_relu_half.data());
      batch_norm_relu_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), st.saved.data(),
                                       st.scale_shift.data(), coefficients.data(), d_relu_wide.data());
    });
    expect_same_bits(d_half, d_wide, what + " dx");
    expect_same_bits(d_relu_half, d_relu_wide, what + " + relu dx");
  }
}

// relu, add, accumulate: the scalar T body and its V-element body (V = 8 bf16: 16 bytes), over an odd n.
template <int V>
void eltwise_bf16_matches(size_t n) {
  const Stored x(n, 71), b(n, 72), dy(n, 73), dx(n, 74, false);
  std::vector<Bf16> y(n), sum(n), d_relu = dx.half, d_acc = dx.half;
  std::vector<float> expected_y(n), expected_sum(n), expected_relu = dx.wide, expected_acc = dx.wide;
  const auto vectors = static_cast<int64_t>(n) / V;
  for (int64_t v = 0; v < vectors; ++v) {
    relu_forward_vec_at<V>(v * V, x.half.data(), y.data());
    add_forward_vec_at<V>(v * V, x.half.data(), b.half.data(), sum.data());
    relu_backward_vec_at<V>(v * V, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_vec_at<V>(v * V, dy.half.data(), d_acc.data());
  }
  for (int64_t i = vectors * V; i < static_cast<int64_t>(n); ++i) {  // the launcher's tail: the scalar body
    relu_forward_at(i, x.half.data(), y.data());
    add_forward_at(i, x.half.data(), b.half.data(), sum.data());
    relu_backward_at(i, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_at(i, dy.half.data(), d_acc.data());
  }
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    relu_forward_at(i, x.wide.data(), expected_y.data());
    add_forward_at(i, x.wide.data(), b.wide.data(), expected_sum.data());
    relu_backward_at(i, x.wide.data(), dy.wide.data(), expected_relu.data());
    accumulate_at(i, dy.wide.data(), expected_acc.data());
  }
  const std::string what = "bf16 n " + std::to_string(n) + ", V " + std::to_string(V);
  expect_same_bits(y, expected_y, what + " relu");
  expect_same_bits(sum, expected_sum, what + " add");
  expect_same_bits(d_relu, expected_relu, what + " relu backward");
  expect_same_bits(d_acc, expected_acc, what + " accumulate");
}

TEST(CudaOwnKernels, EltwiseBodiesInBf16AreTheFp32BodiesOnWidenedInputsRoundedOnce) {
  eltwise_bf16_matches<1>(1001);
  eltwise_bf16_matches<8>(1003);
}

// concat's column copies: a copy is exact; the backward adds dy's band into a bf16 gradient, rounded once.
TEST(CudaOwnKernels, ConcatInBf16IsTheFp32BodyOnWidenedInputsRoundedOnce) {
  const int64_t widths[2] = {13, 6}, total = 19;
  std::vector<Bf16> y(static_cast<size_t>(kRows * total));
  std::vector<float> expected_y(y.size());
  const Stored dy(y.size(), 81);
  int64_t offset = 0;
  for (const int64_t width : widths) {
    const size_t n = static_cast<size_t>(kRows * width);
    const Stored x(n, 82 + static_cast<uint32_t>(width)), dx(n, 84 + static_cast<uint32_t>(width), false);
    std::vector<Bf16> d_half = dx.half;
    std::vector<float> d_wide = dx.wide;
    test::each_row_channel(kRows, width, [&](int64_t r, int64_t c) {
      copy_columns_at(r, c, width, x.half.data(), total, offset, y.data());
      copy_columns_at(r, c, width, x.wide.data(), total, offset, expected_y.data());
      add_columns_at(r, c, width, dy.half.data(), total, offset, d_half.data());
      add_columns_at(r, c, width, dy.wide.data(), total, offset, d_wide.data());
    });
    expect_same_bits(d_half, d_wide, "bf16 concat backward, width " + std::to_string(width));
    offset += width;
  }
  expect_same_bits(y, expected_y, "bf16 concat");
}

// The depthwise weight gradient's terms read x and dy as stored: the same products, the same sums.
TEST(CudaOwnKernels, DepthwiseWeightGradientInBf16SumsTheWidenedTerms) {
  for (const DepthwiseCase& t : depthwise_cases()) {
    const DepthwiseShape s = depthwise_shape(t.g, t.bias);
    const int64_t c = s.channels;
    const Stored x(static_cast<size_t>(s.in_positions() * c), 91), dy(static_cast<size_t>(s.out_positions() * c), 92);
    const std::string what = std::string("bf16 depthwise dw, ") + t.what;
    expect_same_sums(test::channel_sums(DepthwiseWeightTerm<Bf16>{s, x.half.data(), dy.half.data()}, 1, s.out_positions(), s.taps() * c),
                     test::channel_sums(DepthwiseWeightTerm<float>{s, x.wide.data(), dy.wide.data()}, 1, s.out_positions(), s.taps() * c),
                     what);
    if (!is_depthwise_3x3(s)) continue;
    expect_same_sums(test::channel_sums(Depthwise3x3WeightTerm<Bf16>{s, x.half.data(), dy.half.data()}, 1, s.out_positions(), c),
                     test::channel_sums(Depthwise3x3WeightTerm<float>{s, x.wide.data(), dy.wide.data()}, 1, s.out_positions(), c),
                     what + " (3x3)");
  }
}

// ---- bias + leaky ReLU + max-pool (pool_chain.hpp) -------------------------------------------------
// The launcher's bodies over every (window, channel), as its 2-D grid runs them, against the unfused
// chain the model runs otherwise: bias_forward's add, then the reference's leaky_relu and max_pool,
// and backward max_pool then leaky_relu into zeroed gradients. fp32 bit for bit; bf16 against the
// chain on bf16 inputs with every value it stores rounded once. Ties (a coarse grid of values), NaNs,
// infinities, signed zeros, a NaN bias; odd sizes (a ragged edge no window covers: dz 0 there),
// channels not a multiple of 8.

struct ChainCase {
  const char* what;
  int64_t batch, channels;
  std::vector<int64_t> in, kernel;  // spatial, right-aligned as the lowering's window
  float alpha;
  bool bias;
};

sdk::program::Window chain_window(const ChainCase& t) {
  sdk::program::Window g;
  g.batch = t.batch, g.in_channels = g.out_channels = t.channels;
  const size_t first = 3 - t.in.size();
  for (size_t e = first; e < 3; ++e) {
    g.in[e] = t.in[e - first];
    g.kernel[e] = g.stride[e] = t.kernel[e - first];
    g.out[e] = g.in[e] / g.kernel[e];
  }
  return g;
}

// A grid of quarter steps (ties within windows) with specials every fifth value.
std::vector<float> chain_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> grid(-6, 6);
  std::vector<float> v(n);
  for (float& x : v) x = 0.25f * static_cast<float>(grid(gen));
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 1e-40f, -1e-40f, 3e38f, -3e38f, 1.3f};
  for (size_t i = 0; i < n; i += 5) v[i] = specials[(i / 5) % std::size(specials)];
  return v;
}

float round_bf16(float v) { return bfloat16_to_float(float_to_bfloat16(v)); }

// The unfused chain on z (already as stored), each value it stores rounded by `round`.
struct ChainResult {
  std::vector<float> y, dz;
};
template <class Round>
ChainResult unfused_chain(const ChainCase& t, const sdk::program::Window& g, const std::vector<float>& z,
                          const std::vector<float>& bias, const std::vector<float>& dy, Round round) {
  const size_t n = z.size(), c = static_cast<size_t>(t.channels);
  std::vector<float> pre = z, act(n), dact(n, 0.0f), dz(n, 0.0f), y(dy.size());
  if (t.bias)
    for (size_t i = 0; i < n; ++i) pre[i] = round(pre[i] + bias[i % c]);  // bias_forward's y + b
  ref::leaky_relu_forward(pool(), static_cast<int64_t>(n), t.alpha, pre.data(), act.data());
  for (float& v : act) v = round(v);
  ref::max_pool_forward(pool(), g, act.data(), y.data());
  ref::max_pool_backward(pool(), g, act.data(), dy.data(), dact.data());
  for (float& v : dact) v = round(v);
  ref::leaky_relu_backward(pool(), static_cast<int64_t>(n), t.alpha, pre.data(), dact.data(), dz.data());
  for (float& v : dz) v = round(v);
  return {y, dz};
}

template <class T>
void pool_chain_matches(const ChainCase& t, uint32_t seed) {
  const sdk::program::Window g = chain_window(t);
  ASSERT_TRUE(pool_chain_takes(g)) << t.what;
  const PoolChainShape s = pool_chain_shape(g, t.alpha);
  const size_t zn = static_cast<size_t>(s.batch * s.in[0] * s.in[1] * s.in[2] * s.channels);
  const size_t yn = static_cast<size_t>(s.out_positions() * s.channels);
  constexpr bool half = sizeof(T) == 2;
  auto stored = [](const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
    return out;
  };
  auto floats = [](const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
  };
  const std::vector<T> z = stored(chain_floats(zn, seed)), dy = stored(chain_floats(yn, seed + 1));
  std::vector<float> bias = chain_floats(static_cast<size_t>(s.channels), seed + 2);
  std::vector<T> y(yn), dz = stored(std::vector<float>(zn, -5.0f));  // written, not added: the -5 must go
  std::vector<uint8_t> winner(yn, 77);
  if (!sdk::kernels::pool_chain_covers(s)) dz = stored(std::vector<float>(zn, 0.0f));  // the launcher's memset
  const float* b = t.bias ? bias.data() : nullptr;
  test::each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
    chain_pool_forward_at<T>(pos, c, s, z.data(), b, y.data(), winner.data());
  });
  test::each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
    chain_pool_backward_at<T>(pos, c, s, z.data(), b, dy.data(), winner.data(), dz.data());
  });
  const ChainResult expected = unfused_chain(t, g, floats(z), bias, floats(dy), [](float v) { return half ? round_bf16(v) : v; });
  const std::string what = std::string(half ? "bf16" : "fp32") + " pool chain, " + t.what;
  expect_same_bits(floats(y), expected.y, what + ": y");
  expect_same_bits(floats(dz), expected.dz, what + ": dz");
  for (uint8_t w : winner) ASSERT_LT(w, s.taps()) << what;
}

std::vector<ChainCase> chain_cases() {
  return {
      {"CosmoFlow's 2x2x2, C 32", 2, 32, {4, 6, 4}, {2, 2, 2}, 0.3f, true},
      {"odd sizes (a ragged edge), C 6", 1, 6, {5, 7, 3}, {2, 2, 2}, 0.3f, true},
      {"no bias, C 13", 2, 13, {4, 4, 2}, {2, 2, 2}, 0.3f, false},
      {"2-D, uneven windows, relu, C 24", 3, 24, {9, 6}, {3, 2}, 0.0f, true},
      {"a plain pool (alpha 1), 27 taps, C 5", 2, 5, {3, 3, 3}, {3, 3, 3}, 1.0f, false},
  };
}

TEST(CudaOwnKernels, PoolChainIsBiasLeakyReluMaxPoolBitForBit) {
  uint32_t seed = 60;
  for (const ChainCase& t : chain_cases()) pool_chain_matches<float>(t, seed += 5);
}

TEST(CudaOwnKernels, PoolChainInBf16IsTheChainOnRoundedInputsRoundedOnce) {
  uint32_t seed = 90;
  for (const ChainCase& t : chain_cases()) pool_chain_matches<Bf16>(t, seed += 5);
}

// A bf16 dz's bias gradient (bf16 activations end to end): the channel sums of its widened values, as
// the fp32 SumTerm sums them, in the launcher's order.
TEST(CudaOwnKernels, Bf16BiasGradientIsTheChannelSumOfTheWidenedValues) {
  const int64_t rows = 3001, channels = 13;
  std::vector<Bf16> dz(static_cast<size_t>(rows * channels));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> wide(dz.size());
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = Bf16{float_to_bfloat16(u(gen))}, wide[i] = to_float(dz[i]);
  const std::vector<double> sums = test::channel_sums(SumTerm<Bf16>{dz.data(), channels}, 1, rows, channels);
  const std::vector<double> expected = test::channel_sums(SumTerm{wide.data(), channels}, 1, rows, channels);
  ASSERT_EQ(sums.size(), expected.size());
  for (size_t c = 0; c < sums.size(); ++c) {
    EXPECT_EQ(sums[c], expected[c]) << c;
    double plain = 0;  // and near the plain sum (not all equal: the order differs)
    for (int64_t r = 0; r < rows; ++r) plain += wide[static_cast<size_t>(r * channels) + c];
    EXPECT_NEAR(sums[c], plain, 1e-9 * static_cast<double>(rows));
  }
}

// Padding, overlapping windows and dilation are the unfused kernels' (pool.hpp): the plan keeps them there.
TEST(CudaOwnKernels, PoolChainTakesOnlyTilingUnpaddedWindows) {
  sdk::program::Window g = chain_window(chain_cases()[0]);
  EXPECT_TRUE(pool_chain_takes(g));
  sdk::program::Window overlapping = g, padded = g, big = g;
  overlapping.stride[2] = 1;
  padded.pad_before[1] = 1;
  big.kernel[0] = big.stride[0] = 4, big.kernel[1] = big.stride[1] = 8, big.kernel[2] = big.stride[2] = 8;  // 256 taps
  big.in[0] = 4, big.in[1] = big.in[2] = 8, big.out[0] = big.out[1] = big.out[2] = 1;
  EXPECT_FALSE(pool_chain_takes(overlapping));
  EXPECT_FALSE(pool_chain_takes(padded));
  EXPECT_FALSE(pool_chain_takes(big));
}

// ---- the update's own pass: 16-byte vectors and the half copy (issue 33 items 7 and 8) -----------

// A chunk as the optimizer kernels walk it (reductions.cu each_in_chunk): vector_split's head and
// tail one by one, its middle V at a time.
template <int V, class Vector, class One>
void each_in_chunk(const Chunk& c, Vector vector, One one) {
  const VectorSplit s = vector_split(c.begin, c.end, V);
  ASSERT_TRUE(s.head >= c.begin && s.head - c.begin < V && s.tail <= c.end && c.end - s.tail < V)
      << c.begin << ".." << c.end;
  ASSERT_TRUE(s.head == c.end || s.head % V == 0) << c.begin;
  ASSERT_EQ((s.tail - s.head) % V, 0) << c.begin;
  for (int64_t i = c.begin; i < s.head; ++i) one(i);
  for (int64_t i = s.head; i < s.tail; i += V) vector(i);
  for (int64_t i = s.tail; i < c.end; ++i) one(i);
}

// Four tensors at odd offsets (every chunk's head and tail misaligned), chunks of 256: none, bf16, a
// one-element fp16, and a [682, 3] weight whose bf16 copy is padded to [682, 8] (plan::pad_channels).
struct HalfCopies {
  std::vector<TensorSlice> slices = {{0, 5}, {5, 701}, {706, 1}, {707, 2046}};
  ChunkTable table = make_chunks(slices, 256);
  int64_t n = 2753;
  static constexpr uint16_t kUnwritten = 0xdead;
  std::vector<uint16_t> copy1 = std::vector<uint16_t>(701, kUnwritten), copy2 = std::vector<uint16_t>(1, kUnwritten),
                        copy3 = padded_copy();
  std::vector<HalfCopy> halves = {HalfCopy{},
                                  {copy1.data(), 5, FloatType::bf16, 0, 0},
                                  {copy2.data(), 706, FloatType::f16, 0, 0},
                                  {copy3.data(), 707, FloatType::bf16, 3, 8}};

  // What the cast of a host write leaves: zeros in channels 3-7 (here the master's channels unwritten).
  static std::vector<uint16_t> padded_copy() {
    std::vector<uint16_t> copy(682 * 8, 0);
    for (size_t r = 0; r < 682; ++r)
      for (size_t c = 0; c < 3; ++c) copy[r * 8 + c] = kUnwritten;
    return copy;
  }
  // Each copy holds its tensor's masters w, rounded; the padding still zero.
  void expect_rounded(const std::vector<float>& w, const std::string& what) const {
    for (int64_t j = 0; j < 701; ++j)
      ASSERT_EQ(copy1[static_cast<size_t>(j)], float_to_bfloat16(w[static_cast<size_t>(5 + j)])) << what << " bf16 " << j;
    ASSERT_EQ(copy2[0], float_to_half(w[706])) << what << " fp16";
    for (int64_t r = 0; r < 682; ++r)
      for (int64_t c = 0; c < 8; ++c)
        ASSERT_EQ(copy3[static_cast<size_t>(r * 8 + c)], c < 3 ? float_to_bfloat16(w[static_cast<size_t>(707 + r * 3 + c)]) : 0)
            << what << " padded " << r << ", " << c;
  }
  template <class Vector, class One>
  void each_chunk(Vector vector, One one) const {
    for (const Chunk& c : table.chunks)
      each_in_chunk<4>(
          c, [&](int64_t i) { vector(i, halves[static_cast<size_t>(c.tensor)]); },
          [&](int64_t i) { one(i, halves[static_cast<size_t>(c.tensor)]); });
  }
};

TEST(CudaOwnKernels, OptimizerPassesWriteTheMastersBitsAndTheirRoundedHalfCopies) {
  {  // SGD with momentum (CosmoFlow)
    HalfCopies h;
    const std::vector<float> g = random_floats(static_cast<size_t>(h.n), 901), w0 = random_floats(static_cast<size_t>(h.n), 902);
    const std::vector<float> v0 = random_floats(static_cast<size_t>(h.n), 903);
    const SgdScalars k = sgd_scalars(0.05, 0.9);
    std::vector<float> w = w0, v = v0, expected_w = w0, expected_v = v0;
    each(h.n, [&](int64_t i) { sgd_keras_at(i, k, g.data(), expected_v.data(), expected_w.data()); });
    h.each_chunk([&](int64_t i, const HalfCopy& c) { sgd_keras_vec_at<4>(i, k, c, g.data(), v.data(), w.data()); },
                 [&](int64_t i, const HalfCopy& c) { sgd_keras_half_at(i, k, c, g.data(), v.data(), w.data()); });
    expect_same_bits(w, expected_w, "sgd masters");
    expect_same_bits(v, expected_v, "sgd velocity");
    h.expect_rounded(w, "sgd");
  }
  for (bool decoupled : {false, true}) {  // Adam, AdamW
    HalfCopies h;
    const std::vector<float> g = random_floats(static_cast<size_t>(h.n), 911), w0 = random_floats(static_cast<size_t>(h.n), 912);
    const std::vector<float> m0 = random_floats(static_cast<size_t>(h.n), 913), v0 = random_floats(static_cast<size_t>(h.n), 914, 0.0f, 1.0f);
    std::vector<AdamScalars> k;
    for (double decay : {0.01, 0.0, 0.5, 0.02}) k.push_back(adam_scalars(1e-2, 0.9, 0.999, 1e-8, 3, decay, decoupled));
    std::vector<float> w = w0, m = m0, v = v0, expected_w = w0, expected_m = m0, expected_v = v0;
    for (const Chunk& c : h.table.chunks)
      for (int64_t i = c.begin; i < c.end; ++i)
        adam_at(i, k[static_cast<size_t>(c.tensor)], g.data(), expected_m.data(), expected_v.data(), expected_w.data());
    for (const Chunk& c : h.table.chunks) {
      const AdamScalars& kc = k[static_cast<size_t>(c.tensor)];
      const HalfCopy& hc = h.halves[static_cast<size_t>(c.tensor)];
      each_in_chunk<4>(
          c, [&](int64_t i) { adam_vec_at<4>(i, kc, hc, g.data(), m.data(), v.data(), w.data()); },
          [&](int64_t i) { adam_half_at(i, kc, hc, g.data(), m.data(), v.data(), w.data()); });
    }
    expect_same_bits(w, expected_w, "adam masters");
    expect_same_bits(m, expected_m, "adam m");
    expect_same_bits(v, expected_v, "adam v");
    h.expect_rounded(w, decoupled ? "adamw" : "adam");
  }
  {  // LAMB's apply (DeepCAM): its per-tensor step
    HalfCopies h;
    const std::vector<float> u = random_floats(static_cast<size_t>(h.n), 921), w0 = random_floats(static_cast<size_t>(h.n), 922);
    const float steps[] = {1e-3f, 2e-2f, 0.5f, 3e-3f};
    std::vector<float> w = w0, expected_w = w0;
    for (const Chunk& c : h.table.chunks)
      for (int64_t i = c.begin; i < c.end; ++i) lamb_apply_at(i, steps[c.tensor], u.data(), expected_w.data());
    for (const Chunk& c : h.table.chunks) {
      const HalfCopy& hc = h.halves[static_cast<size_t>(c.tensor)];
      each_in_chunk<4>(
          c, [&](int64_t i) { lamb_apply_vec_at<4>(i, steps[c.tensor], hc, u.data(), w.data()); },
          [&](int64_t i) { lamb_apply_half_at(i, steps[c.tensor], hc, u.data(), w.data()); });
    }
    expect_same_bits(w, expected_w, "lamb masters");
    h.expect_rounded(w, "lamb");
  }
}

// The casts 8 at a time (16-byte accesses on both sides) are convert_at's bits, every pair of types,
// specials included; a length that leaves a tail of 5.
TEST(CudaOwnKernels, CastVectorsAreTheScalarCastsBits) {
  const int64_t n = 8 * 9 + 5;
  const std::vector<float> x = special_floats(static_cast<size_t>(n), 931);
  for (FloatType from : {FloatType::f32, FloatType::bf16, FloatType::f16}) {
    std::vector<uint32_t> source(static_cast<size_t>(n));  // room for either width
    for (int64_t i = 0; i < n; ++i) store_float(from, source.data(), i, x[static_cast<size_t>(i)]);
    for (FloatType to : {FloatType::f32, FloatType::bf16, FloatType::f16}) {
      std::vector<uint32_t> expected(static_cast<size_t>(n), 0x5a5a5a5au), actual = expected;
      each(n, [&](int64_t i) { convert_at(i, from, source.data(), to, expected.data()); });
      for (int64_t i = 0; i + 8 <= n; i += 8) convert_vec_at<8>(i, from, source.data(), to, actual.data());
      for (int64_t i = n / 8 * 8; i < n; ++i) convert_at(i, from, source.data(), to, actual.data());
      EXPECT_EQ(actual, expected) << static_cast<int>(from) << " -> " << static_cast<int>(to);
    }
    const std::vector<float> sum0 = random_floats(static_cast<size_t>(n), 932);
    std::vector<float> sum = sum0, expected_sum = sum0;
    each(n, [&](int64_t i) { convert_add_at(i, from, source.data(), expected_sum.data()); });
    for (int64_t i = 0; i + 8 <= n; i += 8) convert_add_vec_at<8>(i, from, source.data(), sum.data());
    for (int64_t i = n / 8 * 8; i < n; ++i) convert_add_at(i, from, source.data(), sum.data());
    expect_same_bits(sum, expected_sum, "convert_add");
  }
}

// ---- a gradient's first writer writes (issue 33 item 4): no memset, no read -----------------------

// body(dx, accumulate) over a buffer of n: written into NaNs (accumulate false) it gives the bits of
// adding into zeros, -0 terms becoming +0 as 0 + -0 does.
template <class T, class Body>
void expect_written_as_added_into_zeros(size_t n, const std::string& what, Body&& body) {
  std::vector<T> added(n, from_float<T>(0.0f)), written(n, from_float<T>(std::numeric_limits<float>::quiet_NaN()));
  body(added.data(), true);
  body(written.data(), false);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(to_float(written[i])), std::bit_cast<uint32_t>(to_float(added[i]))) << what << " at " << i;
}

template <class T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out;
  for (float f : v) out.push_back(from_float<T>(f));
  return out;
}

template <class T>
void first_writers_write() {
  const int64_t rows = 7, c = 24, n = rows * c;
  std::vector<float> xf = special_floats(static_cast<size_t>(n), 951), dyf = random_floats(static_cast<size_t>(n), 952);
  for (size_t i = 0; i < dyf.size(); i += 5) dyf[i] = -0.0f;  // terms of -0: written +0
  const std::vector<T> x = stored<T>(xf), dy = stored<T>(dyf);
  const std::string type = sizeof(T) == 4 ? " (fp32)" : " (bf16)";
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "relu_backward" + type, [&](T* dx, bool a) {
    each(n, [&](int64_t i) { relu_backward_at(i, x.data(), dy.data(), dx, a); });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "relu_backward_vec" + type, [&](T* dx, bool a) {
    for (int64_t i = 0; i < n; i += 8) relu_backward_vec_at<8>(i, x.data(), dy.data(), dx, a);
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "accumulate" + type, [&](T* dx, bool a) {
    each(n, [&](int64_t i) { accumulate_at(i, dy.data(), dx, a); });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "accumulate_vec" + type, [&](T* dx, bool a) {
    for (int64_t i = 0; i < n; i += 8) accumulate_vec_at<8>(i, dy.data(), dx, a);
  });
  const std::vector<float> saved = random_floats(static_cast<size_t>(2 * c), 953, 0.5f, 2.0f);
  const std::vector<float> coefficients = random_floats(static_cast<size_t>(3 * c), 954);
  const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * c), 955);
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "batch_norm_backward_data" + type, [&](T* dx, bool a) {
    each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_backward_data_at(r, ch, c, x.data(), dy.data(), saved.data(), coefficients.data(), dx, a);
    });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "batch_norm_relu_backward_data" + type, [&](T* dx, bool a) {
    each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_relu_backward_data_at(r, ch, c, x.data(), dy.data(), saved.data(), scale_shift.data(), coefficients.data(),
                                       dx, a);
    });
  });
  // add + relu: da written (bit 0) while db adds into what da's write left (add(a, a): one buffer)
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "add_relu_backward" + type, [&](T* d, bool a) {
    each_channel_vector<8>(rows, c, [&](int64_t r, int64_t ch) {
      add_relu_backward_at<8>(r, ch, c, x.data(), dy.data(), d, d, a ? 0u : 1u);
    });
  });
  for (const DepthwiseCase& t : depthwise_cases()) {
    const DepthwiseShape sh = depthwise_shape(t.g, t.bias);
    const int64_t ch_count = t.g.in_channels;
    const std::vector<float> w = random_floats(static_cast<size_t>(sh.taps() * ch_count), 956);
    const std::vector<T> g = stored<T>(random_floats(static_cast<size_t>(sh.out_positions() * ch_count), 957));
    expect_written_as_added_into_zeros<T>(static_cast<size_t>(sh.in_positions() * ch_count),
                                          std::string("depthwise_backward_data, ") + t.what + type, [&](T* dx, bool a) {
                                            each_channel_vector<1>(sh.in_positions(), ch_count, [&](int64_t p, int64_t ch) {
                                              depthwise_backward_data_at<1>(p, ch, sh, w.data(), g.data(), dx, a);
                                            });
                                          });
  }
}

TEST(CudaOwnKernels, FirstGradientWritersWriteTheBitsOfAddingIntoZeros) {
  first_writers_write<float>();
  first_writers_write<Bf16>();
}

}  // namespace
}  // namespace mlph::cuda
