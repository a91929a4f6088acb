// Depthwise convolution (kernels/depthwise.hpp), fp32 and bf16: forward, the data gradient's gather,
// the weight gradient's channel sums.
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

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

}  // namespace
}  // namespace mlph::cuda
