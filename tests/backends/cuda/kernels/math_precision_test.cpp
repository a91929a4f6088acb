// Mixed precision (kernels/precision.hpp): bf16 and fp16 rounding, unscaling, the loss scale's
// steps against plan::LossScaler.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

// The nearest of two neighbours, ties to the even one: what round-to-nearest-even must give. `up` may
// be one past the largest finite value, standing for the overflow to Inf.
template <class Bits>
Bits nearest_even(double value, Bits down, double down_value, Bits up, double up_value) {
  const double below = value - down_value, above = up_value - value;
  if (below < above) return down;
  if (above < below) return up;
  return (down & 1) ? up : down;
}

TEST(CudaKernelBodies, BFloat16RoundsToNearestEvenAndBackExactly) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000};
  for (uint32_t high = 0; high < 0x10000; ++high)
    for (uint32_t low : lows) {
      const uint32_t bits = high << 16 | low;
      const float f = std::bit_cast<float>(bits);
      const uint16_t h = float_to_bfloat16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(bfloat16_to_float(h))) << std::hex << bits;
        ASSERT_EQ(h & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
        continue;
      }
      // Magnitudes: truncation, and the next bfloat16 away from zero (2^128 past the largest finite).
      const uint16_t down = static_cast<uint16_t>(high);
      const double down_value = std::fabs(static_cast<double>(bfloat16_to_float(down)));
      const double up_value = (high & 0x7fff) == 0x7f7f ? std::ldexp(1.0, 128)
                                                         : std::fabs(static_cast<double>(bfloat16_to_float(
                                                               static_cast<uint16_t>(high + 1))));
      if ((high & 0x7fff) >= 0x7f80) {  // Inf stays Inf
        ASSERT_EQ(h, down) << std::hex << bits;
        continue;
      }
      const uint16_t expected =
          nearest_even(std::fabs(static_cast<double>(f)), down, down_value, static_cast<uint16_t>(high + 1), up_value);
      ASSERT_EQ(h, expected) << std::hex << bits;
      if (low == 0) {
        ASSERT_EQ(bfloat16_to_float(h), f) << std::hex << bits;  // exact values round-trip
      }
    }
}

#ifdef __FLT16_MANT_DIG__
// Against the compiler's IEEE binary16 conversions: every half, and around each midpoint between two.
TEST(CudaKernelBodies, Float16RoundsToNearestEvenLikeTheCompilersFloat16) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    const float next = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h + 1)));
    const float mid = h + 1 == 0x7c00 ? 65520.0f : (v + next) / 2;  // exact: 12 significant bits
    for (float f : {v, std::nextafter(v, 0.0f), std::nextafter(v, 1e30f), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e30f)})
      probes.push_back(f), probes.push_back(-f);
  }
  for (float f : {1e30f, 65519.99f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  1e-8f, 2.98e-8f, 2.9802322e-8f, 2.9802326e-8f})
    probes.push_back(f), probes.push_back(-f);
  for (float f : probes) {
    const auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(float_to_half(f), expected) << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const float expected = static_cast<float>(std::bit_cast<_Float16>(half));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(half_to_float(half))) << h;
      ASSERT_TRUE(std::isnan(bits_float(float_bits(half_to_float(half))))) << h;
      ASSERT_EQ(float_to_half(half_to_float(half)) & 0x7e00, 0x7e00) << h;  // a NaN stays a (quiet) NaN
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(half_to_float(half)), std::bit_cast<uint32_t>(expected)) << h;
    }
  }
}
#endif

TEST(CudaKernelBodies, UnscaleCountsNonFiniteGradientsAndDividesByTheScale) {
  std::vector<float> g = random_floats(kN, 150, -1000.0f, 1000.0f);
  g[10] = std::numeric_limits<float>::infinity(), g[2000] = std::numeric_limits<float>::quiet_NaN();
  g[2999] = -std::numeric_limits<float>::infinity();
  const std::vector<float> before = g;
  const float scale = 1024.0f;
  const double nonfinite = test::flat_sums(UnscaleTerm{g.data(), &scale}, kN)[0];
  EXPECT_EQ(nonfinite, 3.0);
  for (size_t i = 0; i < g.size(); ++i)
    if (std::isfinite(before[i])) {
      ASSERT_EQ(g[i], before[i] / 1024.0f) << i;
    }
}

TEST(CudaKernelBodies, LossScaleBacksOffOnOverflowAndGrowsAfterTheInterval) {
  const LossScaleRule rule{2.0, 0.5, 3};
  float scale = 65536.0f;
  int32_t good = 0;
  loss_scale_step(rule, 1.0, &scale, &good);
  EXPECT_EQ(scale, 32768.0f);
  EXPECT_EQ(good, 0);
  loss_scale_step(rule, 0.0, &scale, &good);
  loss_scale_step(rule, 0.0, &scale, &good);
  EXPECT_EQ(scale, 32768.0f);
  EXPECT_EQ(good, 2);
  loss_scale_step(rule, 0.0, &scale, &good);  // the third good step in a row
  EXPECT_EQ(scale, 65536.0f);
  EXPECT_EQ(good, 0);
  scale = std::numeric_limits<float>::max();
  good = 2;
  loss_scale_step(rule, 0.0, &scale, &good);  // growing would overflow: kept
  EXPECT_EQ(scale, std::numeric_limits<float>::max());
  EXPECT_EQ(good, 0);
}

// The device's rule and the host's (plan::LossScaler, which keeps the state for checkpoints) are one
// rule: the same scale and count after every step of a long run with overflows, non-power-of-two
// factors included.
TEST(CudaKernelBodies, LossScaleStepIsThePlansLossScaler) {
  for (const LossScaleRule rule : {LossScaleRule{}, LossScaleRule{3.0, 0.3, 7}}) {
    plan::LossScaler host({65536.0f, rule.growth, rule.backoff, rule.interval});
    float scale = host.scale();
    int32_t good = 0;
    std::mt19937 gen(160);
    for (int step = 0; step < 20000; ++step) {
      const bool overflow = gen() % 500 == 0 || (step > 15000 && gen() % 3 == 0);
      host.update(overflow);
      loss_scale_step(rule, overflow ? 1.0 : 0.0, &scale, &good);
      ASSERT_EQ(std::bit_cast<uint32_t>(scale), std::bit_cast<uint32_t>(host.scale())) << step;
      ASSERT_EQ(good, host.good_steps()) << step;
    }
    EXPECT_NE(host.scale(), 65536.0f) << "the run means to move the scale";
  }
}

}  // namespace
}  // namespace mlph::cuda
