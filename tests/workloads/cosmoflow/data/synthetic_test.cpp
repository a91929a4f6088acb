#include "data/synthetic.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "data/crc32c.hpp"
#include "data/file_io.hpp"
#include "data/npy.hpp"
#include "data/tfrecord.hpp"
#include "test_util.hpp"

namespace mlph::cosmoflow {
namespace {

using test::TempDir;

uint32_t checksum(const Sample& s) { return crc32c(std::as_bytes(std::span(s.x))); }

TEST(CosmoFlowDataSynthetic, SameSeedAndIndexGiveTheSameBytes) {
  const Sample a = synthesize_sample(7, 3, 16), b = synthesize_sample(7, 3, 16);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(synthesize_sample(7, 4, 16).x, a.x);
  EXPECT_NE(synthesize_sample(8, 3, 16).x, a.x);
  EXPECT_NE(synthesize_sample(7, 4, 16).y, a.y);
}

TEST(CosmoFlowDataSynthetic, BytesArePinnedAcrossBuildsAndMachines) {
  // The generator uses no libm transcendental and no FMA contraction: these are the bytes everywhere.
  // A deliberate change of the generator updates them (and changes every generated dataset).
  const Sample s = synthesize_sample(1, 0, 16);
  EXPECT_EQ(checksum(s), 0xcd4a2e9cu) << std::hex << checksum(s);
  EXPECT_EQ(s.y, synthetic_targets(1, 0));
}

TEST(CosmoFlowDataSynthetic, TargetsCoverTheUnitRangeUniformly) {
  std::array<double, 4> lo{1, 1, 1, 1}, hi{-1, -1, -1, -1}, sum{};
  constexpr int n = 4000;
  for (int i = 0; i < n; ++i) {
    const auto y = synthetic_targets(1, static_cast<uint64_t>(i));
    for (int k = 0; k < 4; ++k)
      lo[k] = std::min<double>(lo[k], y[k]), hi[k] = std::max<double>(hi[k], y[k]), sum[k] += y[k];
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_GE(lo[k], -1.0);
    EXPECT_LT(lo[k], -0.99);
    EXPECT_LE(hi[k], 1.0);
    EXPECT_GT(hi[k], 0.99);
    EXPECT_NEAR(sum[k] / n, 0.0, 0.05);
  }
}

TEST(CosmoFlowDataSynthetic, CountsAreRealisticAndFollowTheParameters) {
  for (uint64_t index = 0; index < 8; ++index) {
    const Sample s = synthesize_sample(3, index, 32);
    const UniverseParameters u = universe_parameters(s.y);
    const auto [lo, hi] = std::minmax_element(s.x.begin(), s.x.end());
    EXPECT_GE(*lo, 0);
    EXPECT_LT(*hi, 2000);
    std::array<double, 4> sum{};
    size_t small = 0;
    for (size_t i = 0; i < s.x.size(); ++i) sum[i % 4] += s.x[i], small += s.x[i] < 50;
    EXPECT_GT(static_cast<double>(small) / static_cast<double>(s.x.size()), 0.9);  // mostly small counts
    for (int c = 0; c < 4; ++c)  // each channel's mean count is mean_count, the density being normalized
      EXPECT_NEAR(sum[c] / (32.0 * 32 * 32), u.mean_count, 0.05 * u.mean_count) << "channel " << c;
  }
}

TEST(CosmoFlowDataSynthetic, IsFastEnough) {
  using clock = std::chrono::steady_clock;
  auto time_one = [](int edge, int n) {
    const auto start = clock::now();
    for (int i = 0; i < n; ++i) synthesize_sample(1, static_cast<uint64_t>(i), edge);
    return std::chrono::duration<double, std::milli>(clock::now() - start).count() / n;
  };
  const double ms32 = time_one(32, 20), ms128 = time_one(128, 1);
  std::cout << "synthesize_sample: 32^3 " << ms32 << " ms, 128^3 " << ms128 << " ms\n";
  RecordProperty("ms_32", std::to_string(ms32));
  RecordProperty("ms_128", std::to_string(ms128));
  EXPECT_LT(ms32, 50.0);  // loose: a few ms on one core; CI machines are busy
  EXPECT_LT(ms128, 3000.0);
}

void expect_same(const Sample& a, const Sample& b) {
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
}

TEST(CosmoFlowDataSynthetic, WritesEveryFormatInTheReferenceLayout) {
  const TempDir tmp;
  for (const Format format : {Format::tfrecord, Format::tfrecord_gzip, Format::npy}) {
    const std::string dir = tmp / std::string(format_name(format));
    write_dataset(dir, 3, 2, 8, format, 5);
    const bool npy = format == Format::npy;
    for (uint64_t index = 0; index < 5; ++index) {
      const std::string stem = dir + (index < 3 ? "/train/" : "/validation/") + synthetic_stem(5, index);
      const Sample expected = synthesize_sample(5, index, 8);
      if (npy) {
        expect_same(read_npy_sample(read_file(stem + "_data.npy"), read_file(stem + "_label.npy"), stem, 8), expected);
      } else {
        const auto file = read_file(stem + ".tfrecord");
        EXPECT_EQ(file[0] == std::byte{0x1f}, format == Format::tfrecord_gzip);
        const auto samples = read_tfrecord_samples(file, stem, 8, 1);
        ASSERT_EQ(samples.size(), 1u);
        expect_same(samples[0], expected);
      }
    }
    const auto count = [](const std::string& d) {
      return std::distance(std::filesystem::directory_iterator(d), std::filesystem::directory_iterator());
    };
    EXPECT_EQ(count(dir + "/train"), npy ? 6 : 3);
    EXPECT_EQ(count(dir + "/validation"), npy ? 4 : 2);
  }
  EXPECT_EQ(synthetic_stem(5, 42), "univ_5_000042_000");
}

TEST(CosmoFlowDataSynthetic, RegeneratingReplacesEarlierOutputAndRefusesForeignFiles) {
  const TempDir tmp;
  write_dataset(tmp / "d", 4, 1, 4, Format::tfrecord, 1);
  write_dataset(tmp / "d", 2, 1, 4, Format::npy, 2);  // smaller, other format and seed: nothing stale stays
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp / "d/train"), std::filesystem::directory_iterator()),
            4);
  std::ofstream(tmp / "d/validation/notes.txt") << "mine";
  try {
    write_dataset(tmp / "d", 2, 1, 4, Format::npy, 2);
    ADD_FAILURE() << "a folder with foreign files was overwritten";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(tmp / "d/validation/notes.txt"));
}

TEST(CosmoFlowDataSynthetic, FormatNames) {
  for (const Format f : {Format::tfrecord, Format::tfrecord_gzip, Format::npy})
    EXPECT_EQ(parse_format(format_name(f)), f);
  EXPECT_THROW(parse_format("hdf5"), std::invalid_argument);
}

}  // namespace
}  // namespace mlph::cosmoflow
