#include "data/crc32c.hpp"

#include <gtest/gtest.h>

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

TEST(CosmoFlowDataCrc32c, MaskingIsTensorFlows) {
  EXPECT_EQ(mask_crc(0xe3069283u), ((0xe3069283u >> 15) | (0xe3069283u << 17)) + 0xa282ead8u);
  for (const uint32_t crc : {0u, 1u, 0xe3069283u, 0xffffffffu, 0x80000000u}) EXPECT_EQ(unmask_crc(mask_crc(crc)), crc);
  // TFRecord's length CRC of an 8-byte zero length, as TensorFlow writes it for an empty record.
  const std::vector<std::byte> zero_length(8, std::byte{0});
  EXPECT_EQ(masked_crc32c(zero_length), mask_crc(crc32c(zero_length)));
}

}  // namespace
}  // namespace mlph::cosmoflow
