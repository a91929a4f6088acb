#include "crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define MLPH_CRC32C_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define MLPH_CRC32C_ARM 1
#endif

namespace mlph::cosmoflow {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78u;  // Castagnoli, bit-reversed

// tables[k][b]: the CRC of byte b followed by k zero bytes, so 8 bytes fold with 8 lookups.
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    tables[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t b = 0; b < 256; ++b) tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xffu];
  return tables;
}
constexpr auto kTables = make_tables();

uint64_t load_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

// Works on the inverted register; callers invert on entry and exit.
uint32_t update_portable(uint32_t crc, const std::byte* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    const uint64_t word = load_le64(p) ^ crc;
    crc = kTables[7][word & 0xff] ^ kTables[6][(word >> 8) & 0xff] ^ kTables[5][(word >> 16) & 0xff] ^
          kTables[4][(word >> 24) & 0xff] ^ kTables[3][(word >> 32) & 0xff] ^ kTables[2][(word >> 40) & 0xff] ^
          kTables[1][(word >> 48) & 0xff] ^ kTables[0][word >> 56];
  }
  for (; n > 0; ++p, --n) crc = (crc >> 8) ^ kTables[0][(crc ^ std::to_integer<uint32_t>(*p)) & 0xffu];
  return crc;
}

#if defined(MLPH_CRC32C_X86)
// Compiled for SSE4.2 whatever the build flags; only called once the CPU is known to have it.
__attribute__((target("sse4.2"))) uint32_t update_hardware(uint32_t crc, const std::byte* p, size_t n) {
  uint64_t wide = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
  }
  auto narrow = static_cast<uint32_t>(wide);
  for (; n > 0; ++p, --n) narrow = _mm_crc32_u8(narrow, std::to_integer<uint8_t>(*p));
  return narrow;
}
bool have_hardware() {
#if defined(__SSE4_2__)
  return true;
#else
  static const bool supported = __builtin_cpu_supports("sse4.2");
  return supported;
#endif
}
#elif defined(MLPH_CRC32C_ARM)
uint32_t update_hardware(uint32_t crc, const std::byte* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = __crc32cd(crc, word);
  }
  for (; n > 0; ++p, --n) crc = __crc32cb(crc, std::to_integer<uint8_t>(*p));
  return crc;
}
bool have_hardware() { return true; }
#else
uint32_t update_hardware(uint32_t crc, const std::byte* p, size_t n) { return update_portable(crc, p, n); }
bool have_hardware() { return false; }
#endif

}  // namespace

uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc) {
  return ~update_portable(~crc, data.data(), data.size());
}

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) {
  if (!have_hardware()) return crc32c_portable(data, crc);
  return ~update_hardware(~crc, data.data(), data.size());
}

}  // namespace mlph::cosmoflow
