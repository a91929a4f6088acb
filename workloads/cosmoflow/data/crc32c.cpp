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

// Combining the CRCs of pieces (zlib's crc32_combine, for the Castagnoli polynomial): a * b modulo
// the polynomial, bit-reflected (a must not be 0), and x^(2^k) modulo it for k = 0..31.
constexpr uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, product = 0;
  for (;;) {
    if (a & m) {
      product ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = b & 1 ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}
constexpr std::array<uint32_t, 32> make_powers() {
  std::array<uint32_t, 32> powers{};
  uint32_t p = 1u << 30;  // x^1
  powers[0] = p;
  for (size_t k = 1; k < 32; ++k) powers[k] = p = multiply_mod(p, p);
  return powers;
}
constexpr auto kPowers = make_powers();

// The CRC of a + b from the CRCs of a and of b alone, and b's length.
#if defined(MLPH_CRC32C_X86) || defined(MLPH_CRC32C_ARM)  // the portable path has one chain
uint32_t combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  uint32_t shift = 1u << 31;  // x^0; becomes x^(8 * length_b)
  for (unsigned k = 3; length_b; length_b >>= 1, ++k)
    if (length_b & 1) shift = multiply_mod(kPowers[k & 31], shift);
  return multiply_mod(shift, crc_a) ^ crc_b;
}
#endif

// Long inputs run as three independent chains over thirds of the data (the crc32 instruction's
// latency is three times its throughput), combined after.
constexpr size_t kThreeWayBytes = 3 * 1024;

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
__attribute__((target("sse4.2"))) uint32_t crc32c_three_way(uint32_t crc, const std::byte* p, size_t n) {
  const size_t lane = n / 3 / 8 * 8;
  uint64_t a = ~crc, b = 0xffffffffu, c = 0xffffffffu;
  for (size_t i = 0; i < lane; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + lane + i, 8);
    std::memcpy(&wc, p + 2 * lane + i, 8);
    a = _mm_crc32_u64(a, wa);
    b = _mm_crc32_u64(b, wb);
    c = _mm_crc32_u64(c, wc);
  }
  const uint32_t last = ~update_hardware(static_cast<uint32_t>(c), p + 3 * lane, n - 3 * lane);
  return combine(combine(~static_cast<uint32_t>(a), ~static_cast<uint32_t>(b), lane), last, n - 2 * lane);
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
uint32_t crc32c_three_way(uint32_t crc, const std::byte* p, size_t n) {
  const size_t lane = n / 3 / 8 * 8;
  uint32_t a = ~crc, b = 0xffffffffu, c = 0xffffffffu;
  for (size_t i = 0; i < lane; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + lane + i, 8);
    std::memcpy(&wc, p + 2 * lane + i, 8);
    a = __crc32cd(a, wa);
    b = __crc32cd(b, wb);
    c = __crc32cd(c, wc);
  }
  const uint32_t last = ~update_hardware(c, p + 3 * lane, n - 3 * lane);
  return combine(combine(~a, ~b, lane), last, n - 2 * lane);
}
bool have_hardware() { return true; }
#else
uint32_t update_hardware(uint32_t crc, const std::byte* p, size_t n) { return update_portable(crc, p, n); }
uint32_t crc32c_three_way(uint32_t crc, const std::byte* p, size_t n) { return ~update_portable(~crc, p, n); }
bool have_hardware() { return false; }
#endif

}  // namespace

uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc) {
  return ~update_portable(~crc, data.data(), data.size());
}

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) {
  if (!have_hardware()) return crc32c_portable(data, crc);
  if (data.size() >= kThreeWayBytes) return crc32c_three_way(crc, data.data(), data.size());
  return ~update_hardware(~crc, data.data(), data.size());
}

}  // namespace mlph::cosmoflow
