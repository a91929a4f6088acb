// Bias + leaky ReLU + max-pool in one (kernels/pool_chain.hpp).
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

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

}  // namespace
}  // namespace mlph::cuda
