#include "data/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "data/bytes.hpp"

namespace mlph::cosmoflow {
namespace {

std::span<const std::byte> text(std::string_view s) { return cosmoflow::as_bytes(s); }

TEST(CosmoFlowDataCrc32c, KnownVectors) {
  EXPECT_EQ(crc32c(text("123456789")), 0xe3069283u);  // the standard check value
  EXPECT_EQ(crc32c(text("")), 0u);
  EXPECT_EQ(crc32c(text("a")), 0xc1d04330u);
  const std::vector<std::byte> zeros(32, std::byte{0}), ones(32, std::byte{0xff});
  EXPECT_EQ(crc32c(zeros), 0x8a9136aau);  // RFC 3720 (iSCSI) B.4
  EXPECT_EQ(crc32c(ones), 0x62a8ab43u);
  std::vector<std::byte> ascending(32);
  for (size_t i = 0; i < 32; ++i) ascending[i] = static_cast<std::byte>(i);
  EXPECT_EQ(crc32c(ascending), 0x46dd794eu);
}

TEST(CosmoFlowDataCrc32c, HardwareAndTablesAgreeAtEveryLengthAndOffset) {
  std::vector<std::byte> data(1000);
  uint32_t state = 12345;
  for (auto& b : data) b = static_cast<std::byte>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t offset = 0; offset < 9; ++offset)
    for (size_t length = 0; offset + length <= data.size(); length += 37) {
      const auto part = std::span(data).subspan(offset, length);
      ASSERT_EQ(crc32c(part), crc32c_portable(part)) << offset << " " << length;
    }
}

// Past 3 KiB the hardware path runs three chains and combines them: every split of the length
// into thirds (and the bytes left over) must give the tables' value, extended from any CRC.
TEST(CosmoFlowDataCrc32c, ThreeChainsAgreeWithTheTables) {
  std::vector<std::byte> data(70000);
  uint32_t state = 777;
  for (auto& b : data) b = static_cast<std::byte>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t length : {3071u, 3072u, 3073u, 3079u, 4099u, 65536u, 69997u}) {
    const auto part = std::span(data).first(length);
    ASSERT_EQ(crc32c(part), crc32c_portable(part)) << length;
    ASSERT_EQ(crc32c(part.subspan(5), 0xdeadbeefu), crc32c_portable(part.subspan(5), 0xdeadbeefu)) << length;
  }
}

TEST(CosmoFlowDataCrc32c, ExtendsAcrossPieces) {
  const auto whole = text("123456789");
  EXPECT_EQ(crc32c(whole.subspan(4), crc32c(whole.first(4))), 0xe3069283u);
  EXPECT_EQ(crc32c_portable(whole.subspan(7), crc32c_portable(whole.first(7))), 0xe3069283u);
}

std::vector<std::byte> noise(size_t n, uint32_t state) {
  std::vector<std::byte> data(n);
  for (auto& b : data) b = static_cast<std::byte>((state = state * 1103515245u + 12345u) >> 24);
  return data;
}

// The bytes at odd addresses of [p, p + n), ORed: what crc32c_move's odd_or must be.
uint8_t odd_or_of(const std::byte* p, size_t n) {
  uint8_t result = 0;
  for (size_t i = 0; i < n; ++i)
    if ((reinterpret_cast<uintptr_t>(p + i) & 1) != 0) result |= std::to_integer<uint8_t>(p[i]);
  return result;
}

TEST(CosmoFlowDataCrc32c, EveryPathGivesTheKnownVectors) {
  ASSERT_GE(crc32c_paths().size(), 1u);
  EXPECT_STREQ(crc32c_paths().front().name, "tables");
  for (const Crc32cPath& path : crc32c_paths()) {
    SCOPED_TRACE(path.name);
    std::vector<std::byte> zeros(32, std::byte{0}), ones(32, std::byte{0xff}), ascending(32), moved(32);
    for (size_t i = 0; i < 32; ++i) ascending[i] = static_cast<std::byte>(i);
    EXPECT_EQ(path.crc(zeros, 0), 0x8a9136aau);  // RFC 3720 (iSCSI) B.4
    EXPECT_EQ(path.crc(ones, 0), 0x62a8ab43u);
    EXPECT_EQ(path.crc(ascending, 0), 0x46dd794eu);
    EXPECT_EQ(path.crc(text("123456789"), 0), 0xe3069283u);
    EXPECT_EQ(path.move(moved.data(), ascending.data(), 32, 0).crc, 0x46dd794eu);
    // Long runs of the vectors' bytes, through the folding too: the tables say what they give.
    const std::vector<std::byte> long_ones(4096 + 32, std::byte{0xff});
    EXPECT_EQ(path.crc(long_ones, 0), crc32c_portable(long_ones));
  }
}

// A CPU that can fold must get the folding (else the readers quietly run the slower paths).
TEST(CosmoFlowDataCrc32c, TheFastestPathThisCpuHasIsTheOneUsed) {
  std::vector<std::string> names;
  for (const Crc32cPath& path : crc32c_paths()) names.push_back(path.name);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("sse4.2")) {
    EXPECT_EQ(names.at(1), "crc32 instruction");
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul")) {
    EXPECT_EQ(names.back(), "vpclmulqdq folding");
  }
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
  EXPECT_EQ(names.back(), "crc32 instruction");
#endif
  EXPECT_EQ(crc32c_path().name, names.back());
  EXPECT_EQ(crc32c_path().crc, crc32c_paths().back().crc);
  // crc32c and crc32c_move are that path's: the same values as the tables from 256 bytes on too.
  std::vector<std::byte> data = noise(5000, 31), moved(5000);
  EXPECT_EQ(crc32c(data), crc32c_portable(data));
  EXPECT_EQ(crc32c_move(moved.data(), data.data(), data.size(), 5).crc, crc32c_portable(data, 5));
  EXPECT_EQ(moved, data);
}

// Each path against the tables at every length to 4100 (the folding's 256-byte blocks, the three
// chains' 3 KiB, the tails) and 16 alignments, from 0 and from another CRC; and over 1 MiB + 7.
TEST(CosmoFlowDataCrc32c, EveryPathAgreesWithTheTablesAtEveryLengthAndOffset) {
  const std::vector<std::byte> data = noise(4100 + 16, 4242);
  for (const Crc32cPath& path : crc32c_paths()) {
    for (size_t offset = 0; offset < 16; ++offset)
      for (size_t length = 0; length <= 4100; ++length) {
        const auto part = std::span(data).subspan(offset, length);
        ASSERT_EQ(path.crc(part, 0), crc32c_portable(part)) << path.name << " at " << offset << ", " << length << " bytes";
        if (length % 7 == 0) {
          ASSERT_EQ(path.crc(part, 0x1234abcdu), crc32c_portable(part, 0x1234abcdu)) << path.name << " " << length;
        }
      }
    const std::vector<std::byte> big = noise((size_t{1} << 20) + 7, 99);
    EXPECT_EQ(path.crc(big, 0), crc32c_portable(big)) << path.name;
    EXPECT_EQ(path.crc(std::span(big).subspan(3), 77u), crc32c_portable(std::span(big).subspan(3), 77u)) << path.name;
  }
}

// crc32c_move on each path: the bytes land (moved down over themselves by 0..65 bytes, or to
// memory apart, or up over themselves), nothing around them is written, and the CRC is the tables'.
TEST(CosmoFlowDataCrc32c, EveryPathMovesTheBytesAndChecksThemWhereTheyLand) {
  const std::vector<std::byte> data = noise(4100 + 16, 5150);
  for (const Crc32cPath& path : crc32c_paths())
    for (const ptrdiff_t shift : {0, 1, 2, 7, 42, 63, 64, 65, -1, -64, 5000})
      for (size_t offset = 0; offset < 16; offset += 5)
        for (size_t length = 0; length <= 4100; length += length < 600 ? 1 : 97) {
          std::vector<std::byte> memory(2 * 5000 + 4100 + 200, std::byte{0x5a});
          const size_t from = 100 + 5000 + offset, to = static_cast<size_t>(static_cast<ptrdiff_t>(from) - shift);
          const auto src = std::span(data).subspan(offset, length);
          std::copy(src.begin(), src.end(), memory.begin() + static_cast<ptrdiff_t>(from));
          std::vector<std::byte> expected = memory;
          std::copy(src.begin(), src.end(), expected.begin() + static_cast<ptrdiff_t>(to));
          const MovedBytes moved = path.move(memory.data() + to, memory.data() + from, length, 0xfeedu);
          const std::string where = std::string(path.name) + " " + std::to_string(length) + " bytes by " +
                                    std::to_string(shift) + " at " + std::to_string(offset);
          ASSERT_EQ(memory, expected) << where;
          ASSERT_EQ(moved.crc, crc32c_portable(src, 0xfeedu)) << where;
          ASSERT_EQ(moved.odd_or, odd_or_of(memory.data() + to, length)) << where;
        }
}

// odd_or sees one set byte wherever it lies (before, in or after the folded blocks), only where it
// lands at an odd address; moved down by an odd count, the parity flips.
TEST(CosmoFlowDataCrc32c, EveryPathSeesOneHighByteWhereverItLands) {
  constexpr size_t kLength = 1100;
  for (const Crc32cPath& path : crc32c_paths())
    for (const size_t shift : {0u, 1u, 42u})
      for (size_t at = 0; at < kLength; ++at) {
        std::vector<std::byte> memory(kLength + 64 + 64, std::byte{0});
        std::byte* src = memory.data() + 64 + (reinterpret_cast<uintptr_t>(memory.data()) % 2);
        src[at] = std::byte{0x80};
        const std::byte* lands = src - shift + at;
        const MovedBytes moved = path.move(src - shift, src, kLength, 0);
        ASSERT_EQ(moved.odd_or, (reinterpret_cast<uintptr_t>(lands) & 1) ? 0x80 : 0)
            << path.name << " byte " << at << " moved by " << shift;
        ASSERT_EQ(*lands, std::byte{0x80});
      }
}

TEST(CosmoFlowDataCrc32c, MaskingIsTensorFlows) {
  EXPECT_EQ(mask_crc(0xe3069283u), ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
  for (const uint32_t crc : {0u, 1u, 0xe3069283u, 0xffffffffu, 0x80000000u}) EXPECT_EQ(unmask_crc(mask_crc(crc)), crc);
  // TFRecord's length CRC of an 8-byte zero length, as TensorFlow writes it for an empty record.
  const std::vector<std::byte> zero_length(8, std::byte{0});
  EXPECT_EQ(masked_crc32c(zero_length), mask_crc(crc32c(zero_length)));
}

}  // namespace
}  // namespace mlph::cosmoflow
