// The fused bias + leaky ReLU + max-pool body (mlph/sdk/kernels/pool_chain.hpp) against the unfused
// reference chain (a bias add, then the reference backend's leaky_relu and max_pool, forward and
// backward into zeroed gradients), bit for bit: fp32, bf16 (the chain's stored values rounded to
// bf16, as an unfused bf16 chain stores them), channels-last and oneDNN's channel-blocked layout,
// odd sizes (a ragged edge no window covers), ties, NaNs, infinities and signed zeros.
#include <gtest/gtest.h>

#include <bit>
#include <limits>
#include <random>
#include <vector>

#include "mlph/sdk/kernels/pool_chain.hpp"
#include "ops.hpp"  // the reference backend's

namespace mlph::sdk::kernels {
namespace {

namespace ref = mlph::reference;

ref::ThreadPool& threads() {
  static ref::ThreadPool pool(2);
  return pool;
}

struct Case {
  int64_t batch, channels, block;
  int64_t in[3];
  int64_t kernel[3];
  float alpha;
  bool bias;
  bool rounding_ties = false;  // z in [-2, -1.34] and alpha 0.75: distinct pre-activations whose
                               // activations round to the same bf16 (a tie only the rounded chain sees)
};

// Values with many exact ties (a coarse grid), and specials sprinkled in.
std::vector<float> chain_inputs(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> grid(-6, 6);
  std::vector<float> v(n);
  for (float& x : v) x = 0.25f * float(grid(gen));
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            1e-40f, -1e-40f, 3e38f, -3e38f};
  for (size_t i = 0; i < n; i += 5) v[i] = specials[(i / 5) % std::size(specials)];
  return v;
}

std::vector<float> uniform(size_t n, uint32_t seed, float low, float high) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// NDHWC index -> offset in the case's layout.
int64_t offset(const Case& k, const int64_t* sp, int64_t n, int64_t d, int64_t h, int64_t w, int64_t c) {
  const int64_t blocks = k.channels / k.block;
  return ((((n * blocks + c / k.block) * sp[0] + d) * sp[1] + h) * sp[2] + w) * k.block + c % k.block;
}
// An NDHWC tensor in the case's layout (and back, with `to_plain`).
std::vector<float> relayout(const Case& k, const int64_t* sp, const std::vector<float>& v, bool to_plain) {
  std::vector<float> out(v.size());
  int64_t i = 0;
  for (int64_t n = 0; n < k.batch; ++n)
    for (int64_t d = 0; d < sp[0]; ++d)
      for (int64_t h = 0; h < sp[1]; ++h)
        for (int64_t w = 0; w < sp[2]; ++w)
          for (int64_t c = 0; c < k.channels; ++c, ++i) {
            const int64_t o = offset(k, sp, n, d, h, w, c);
            if (to_plain) out[size_t(i)] = v[size_t(o)];
            else out[size_t(o)] = v[size_t(i)];
          }
  return out;
}

template <class T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out;
  for (float x : v) out.push_back(store_as<T>(x));
  return out;
}
template <class T>
std::vector<float> loaded(const std::vector<T>& v) {
  std::vector<float> out;
  for (T x : v) out.push_back(load_float(x));
  return out;
}
template <class T>
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_to<T>(x);
  return v;
}

void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << what << " at " << i << ": " << actual[i] << " vs the reference chain's " << expected[i];
}

template <class T, class Y = T>
void check(const Case& k, uint32_t seed) {
  PoolChainShape s;
  s.batch = k.batch, s.channels = k.channels, s.channel_block = k.block, s.alpha = k.alpha;
  ref::Window g;
  g.batch = k.batch, g.in_channels = g.out_channels = k.channels;
  for (int d = 0; d < 3; ++d) {
    s.in[d] = g.in[d] = k.in[d];
    s.kernel[d] = g.kernel[d] = g.stride[d] = k.kernel[d];
    s.out[d] = g.out[d] = k.in[d] / k.kernel[d];
  }
  ASSERT_TRUE(pool_chain_supports(s));
  const auto z_count = size_t(k.batch * k.in[0] * k.in[1] * k.in[2] * k.channels);
  const auto y_count = size_t(s.out_positions() * k.channels);
  // Inputs as T holds them; the reference chain sees the same values.
  const std::vector<float> z = loaded(stored<T>(k.rounding_ties ? uniform(z_count, seed, -2.0f, -1.34f)
                                                                 : chain_inputs(z_count, seed)));
  const std::vector<float> bias = chain_inputs(size_t(k.channels), seed + 1);  // a NaN channel too
  const std::vector<float> dy = loaded(stored<T>(chain_inputs(y_count, seed + 2)));

  // The unfused reference chain, each stored value rounded to T.
  std::vector<float> pre = z;
  if (k.bias)
    for (size_t i = 0; i < z_count; ++i) pre[i] = round_to<T>(z[i] + bias[i % size_t(k.channels)]);
  std::vector<float> act(z_count), expected_y(y_count), dact(z_count, 0.0f), expected_dz(z_count, 0.0f);
  ref::leaky_relu_forward(threads(), int64_t(z_count), k.alpha, pre.data(), act.data());
  act = rounded<T>(act);
  ref::max_pool_forward(threads(), g, act.data(), expected_y.data());
  ref::max_pool_backward(threads(), g, act.data(), dy.data(), dact.data());
  ref::leaky_relu_backward(threads(), int64_t(z_count), k.alpha, pre.data(), rounded<T>(dact).data(),
                           expected_dz.data());
  expected_dz = rounded<T>(expected_dz);

  // The fused body over every window and channel, in the case's layout.
  const std::vector<T> z_l = stored<T>(relayout(k, s.in, z, false));
  const std::vector<Y> dy_l = stored<Y>(relayout(k, s.out, dy, false));
  std::vector<Y> y_l(y_count);
  std::vector<T> dz_l = stored<T>(std::vector<float>(z_count, -1.0f));
  std::vector<uint8_t> winner(y_count);
  if (!pool_chain_covers(s)) dz_l = stored<T>(std::vector<float>(z_count, 0.0f));
  const float* b = k.bias ? bias.data() : nullptr;
  for (int64_t pos = 0; pos < s.out_positions(); ++pos)
    for (int64_t c = 0; c < k.channels; ++c)
      pool_chain_forward_at<T, Y>(pos, c, s, z_l.data(), b, y_l.data(), winner.data());
  for (int64_t pos = 0; pos < s.out_positions(); ++pos)
    for (int64_t c = 0; c < k.channels; ++c)
      pool_chain_backward_at<T, Y>(pos, c, s, z_l.data(), b, dy_l.data(), winner.data(), dz_l.data());
  if (k.block % 8 == 0) {  // 8 channels per call, as a vectorizing host loop runs it: the same bits
    std::vector<Y> y8(y_count);
    std::vector<T> dz8 = dz_l;
    std::vector<uint8_t> winner8(y_count);
    for (int64_t pos = 0; pos < s.out_positions(); ++pos)
      for (int64_t c = 0; c < k.channels; c += 8) {
        const PoolChainWindow at = pool_chain_window(s, pos, c);
        const float* bc = b ? b + c : nullptr;
        pool_chain_forward_window<8, T, Y>(s, z_l.data() + at.z, bc, y8.data() + at.y, winner8.data() + at.y);
        pool_chain_backward_window<8, T, Y>(s, z_l.data() + at.z, bc, dy_l.data() + at.y, winner8.data() + at.y,
                                      dz8.data() + at.z);
      }
    expect_same_bits(loaded(y8), loaded(y_l), "8 lanes: y");
    expect_same_bits(loaded(dz8), loaded(dz_l), "8 lanes: dz");
  }
  const std::string what = std::string(sizeof(T) == 2 ? "bf16" : "fp32") + (sizeof(Y) != sizeof(T) ? " -> fp32 y" : "") + ", block " + std::to_string(k.block) +
                           ", alpha " + std::to_string(k.alpha) + (k.bias ? ", bias" : "");
  expect_same_bits(relayout(k, s.out, loaded(y_l), true), expected_y, what + ": y");
  expect_same_bits(relayout(k, s.in, loaded(dz_l), true), expected_dz, what + ": dz");
}

const Case kCases[] = {
    {2, 16, 16, {4, 6, 8}, {2, 2, 2}, 0.3f, true},    // CosmoFlow's, blocked as oneDNN lays it out
    {2, 16, 16, {4, 6, 8}, {2, 2, 2}, 0.3f, false},   // the conv added the bias (onednn-cpu)
    {1, 6, 6, {5, 7, 9}, {2, 2, 2}, 0.3f, true},      // channels-last, odd sizes: a ragged edge
    {3, 32, 8, {1, 9, 6}, {1, 3, 2}, 0.0f, true},     // 2-D in 3-D form, relu, uneven windows
    {2, 5, 5, {3, 3, 3}, {3, 3, 3}, 1.0f, false},     // a plain max-pool (no activation), 27 taps
    {2, 16, 16, {4, 4, 4}, {2, 2, 2}, 0.75f, false, true},
};

TEST(PoolChain, Fp32MatchesTheUnfusedReferenceChainBitForBit) {
  uint32_t seed = 10;
  for (const Case& k : kCases) check<float>(k, seed += 7);
}

TEST(PoolChain, Bf16MatchesTheUnfusedReferenceChainRoundedToBf16) {
  uint32_t seed = 50;
  for (const Case& k : kCases) check<Bf16>(k, seed += 7);
}

// onednn-cpu's bf16 chain: a bf16 conv output pooled into fp32 values between ops.
TEST(PoolChain, Bf16ConvOutputIntoFp32PooledValuesMatchesTheRoundedChain) {
  uint32_t seed = 90;
  for (const Case& k : kCases) check<Bf16, float>(k, seed += 7);
}

TEST(PoolChain, TiesGoToTheFirstMaximumAndNaNsWin) {
  PoolChainShape s;
  s.in[2] = 4, s.out[2] = 1, s.kernel[2] = 4, s.alpha = 0.5f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    std::vector<float> z;
    uint8_t winner;
  } windows[] = {{{1, 3, 3, 2}, 1}, {{-2, -1, -1, -4}, 1}, {{1, nan, 5, nan}, 1}, {{-0.0f, 0.0f, 0, -0.0f}, 0}};
  for (const auto& w : windows) {
    float y = 0;
    uint8_t winner = 9;
    pool_chain_forward_at<float>(0, 0, s, w.z.data(), nullptr, &y, &winner);
    EXPECT_EQ(winner, w.winner);
    const float dy = 2.0f;
    std::vector<float> dz(4, 7.0f);
    pool_chain_backward_at<float>(0, 0, s, w.z.data(), nullptr, &dy, &winner, dz.data());
    for (uint8_t t = 0; t < 4; ++t) {
      const float pre = w.z[t];
      EXPECT_EQ(std::bit_cast<uint32_t>(dz[t]), std::bit_cast<uint32_t>(t == w.winner ? (pre > 0 ? 2.0f : 1.0f) : 0.0f));
    }
  }
}

}  // namespace
}  // namespace mlph::sdk::kernels
