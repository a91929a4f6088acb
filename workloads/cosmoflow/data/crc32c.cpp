#include "crc32c.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
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

// The OR of the bytes of p[0, n) at odd addresses (the word loop is byte order agnostic: byte j of
// the OR of the words is the OR of the bytes at p + j + 8m).
uint8_t odd_bytes_or(const std::byte* p, size_t n) {
  const auto odd = [p](size_t j) { return ((reinterpret_cast<uintptr_t>(p) + j) & 1) != 0; };
  uint64_t words = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    words |= word;
  }
  std::array<uint8_t, 8> lanes{};
  std::memcpy(lanes.data(), &words, 8);
  uint8_t result = 0;
  for (size_t j = 0; j < 8; ++j)
    if (odd(j)) result |= lanes[j];
  for (; i < n; ++i)
    if (odd(i)) result |= std::to_integer<uint8_t>(p[i]);
  return result;
}

// crc32c_move as two passes: the move, then the CRC (and the OR) over where the bytes landed.
template <uint32_t (*kCrc)(std::span<const std::byte>, uint32_t)>
MovedBytes move_then_check(std::byte* dst, const std::byte* src, size_t n, uint32_t crc) {
  if (n == 0) return {crc, 0};
  std::memmove(dst, src, n);
  return {kCrc({dst, n}, crc), odd_bytes_or(dst, n)};
}

uint32_t crc32c_tables(std::span<const std::byte> data, uint32_t crc) { return crc32c_portable(data, crc); }

#if defined(MLPH_CRC32C_X86)
// Compiled for SSE4.2 whatever the build flags; only called once the CPU is known to have it.
#define MLPH_CRC32_TARGET __attribute__((target("sse4.2")))
MLPH_CRC32_TARGET inline uint32_t step(uint32_t crc, uint64_t word) { return static_cast<uint32_t>(_mm_crc32_u64(crc, word)); }
MLPH_CRC32_TARGET inline uint32_t step(uint32_t crc, uint8_t byte) { return _mm_crc32_u8(crc, byte); }
#elif defined(MLPH_CRC32C_ARM)
#define MLPH_CRC32_TARGET
inline uint32_t step(uint32_t crc, uint64_t word) { return __crc32cd(crc, word); }
inline uint32_t step(uint32_t crc, uint8_t byte) { return __crc32cb(crc, byte); }
#endif

#if defined(MLPH_CRC32C_X86) || defined(MLPH_CRC32C_ARM)
// The CPU's crc32 instruction (step: 8 bytes or 1), one loop for both architectures.
MLPH_CRC32_TARGET uint32_t update_hardware(uint32_t crc, const std::byte* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = step(crc, word);
  }
  for (; n > 0; ++p, --n) crc = step(crc, std::to_integer<uint8_t>(*p));
  return crc;
}
MLPH_CRC32_TARGET uint32_t crc32c_three_way(uint32_t crc, const std::byte* p, size_t n) {
  const size_t lane = n / 3 / 8 * 8;
  uint32_t a = ~crc, b = 0xffffffffu, c = 0xffffffffu;
  for (size_t i = 0; i < lane; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + lane + i, 8);
    std::memcpy(&wc, p + 2 * lane + i, 8);
    a = step(a, wa);
    b = step(b, wb);
    c = step(c, wc);
  }
  const uint32_t last = ~update_hardware(c, p + 3 * lane, n - 3 * lane);
  return combine(combine(~a, ~b, lane), last, n - 2 * lane);
}
uint32_t crc32c_instruction(std::span<const std::byte> data, uint32_t crc) {
  if (data.size() >= kThreeWayBytes) return crc32c_three_way(crc, data.data(), data.size());
  return ~update_hardware(~crc, data.data(), data.size());
}
#endif

#if defined(MLPH_CRC32C_X86)
bool have_instruction() {
#if defined(__SSE4_2__)
  return true;
#else
  static const bool supported = __builtin_cpu_supports("sse4.2");
  return supported;
#endif
}

// ---- folding with carry-less multiplication (AVX-512 VPCLMULQDQ) ----------------------------
//
// The data's polynomial, 128 bits at a time, is folded forward: a 128-bit piece X, bit-reflected as
// loaded (its low 64 bits are the coefficients of highest degree, X = Xh x^64 + Xl), stands for
// X x^D modulo P once it lies D bits further on, and
//   X x^D = Xh x^(D+64) + Xl x^D == Xh (x^(D+31) mod P) x^33 + Xl (x^(D-33) mod P) x^33   (mod P).
// A carry-less product of two reflected 64-bit lanes is the reflected 127-bit product, which read
// as a 128-bit piece is the product times x; a 32-bit reflected constant in a 64-bit lane is the
// constant times x^32: so each lane's product by k = x^(D+31) mod P (for Xh) or x^(D-33) mod P (for
// Xl), both under 96 bits, is the term above, ready to be XORed into the piece D bits on. The
// constants are computed here (x_to_the), not copied. What is left, one 128-bit piece X, gives
// the CRC register X x^32 mod P through two crc32 instructions from 0: (Xh x^32) then
// (that x^64 + Xl x^32).

// x^n modulo P, bit-reflected as the register holds it.
constexpr uint32_t x_to_the(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  for (unsigned k = 0; n; n >>= 1, ++k)
    if (n & 1) result = multiply_mod(kPowers[k & 31], result);
  return result;
}
static_assert(x_to_the(0) == 1u << 31 && x_to_the(31) == 1u && x_to_the(32) == kPolynomial);

struct FoldBy {  // the multipliers of a 128-bit piece's high-degree and low-degree halves
  uint64_t high, low;
};
constexpr FoldBy fold_by(uint64_t bits) { return {x_to_the(bits + 31), x_to_the(bits - 33)}; }

constexpr size_t kVector = 64, kBlock = 4 * kVector;  // four accumulators in flight

#define MLPH_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

MLPH_FOLD_TARGET inline __m512i in_lanes(FoldBy k) {
  const auto h = static_cast<long long>(k.high), l = static_cast<long long>(k.low);
  return _mm512_set_epi64(l, h, l, h, l, h, l, h);
}
// piece moved on by the constants' distance, XORed into next.
MLPH_FOLD_TARGET inline __m512i fold_into(__m512i piece, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(piece, k, 0x00), _mm512_clmulepi64_epi128(piece, k, 0x11),
                                   next, 0x96);
}
MLPH_FOLD_TARGET inline __m128i fold_into(__m128i piece, FoldBy k, __m128i next) {
  const __m128i lanes = _mm_set_epi64x(static_cast<long long>(k.low), static_cast<long long>(k.high));
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(piece, lanes, 0x00), _mm_clmulepi64_si128(piece, lanes, 0x11)),
                       next);
}
// 64 bytes at src + at; moved to dst + at and ORed into ors when kMove.
template <bool kMove>
MLPH_FOLD_TARGET inline __m512i take(std::byte* dst, const std::byte* src, size_t at, __m512i& ors) {
  const __m512i v = _mm512_loadu_si512(src + at);
  if constexpr (kMove) {
    ors = _mm512_or_si512(ors, v);
    _mm512_storeu_si512(dst + at, v);
  }
  return v;
}

// n >= kBlock. Forward, each 64 bytes loaded before they are stored, so dst may lie below src
// (overlapping): a store reaches only bytes already loaded.
template <bool kMove>
MLPH_FOLD_TARGET MovedBytes fold_avx512(std::byte* dst, const std::byte* src, size_t n, uint32_t crc) {
  const __m512i by_block = in_lanes(fold_by(8 * kBlock)), by_vector = in_lanes(fold_by(8 * kVector));
  __m512i ors = _mm512_setzero_si512();
  __m512i a0 = take<kMove>(dst, src, 0, ors), a1 = take<kMove>(dst, src, kVector, ors);
  __m512i a2 = take<kMove>(dst, src, 2 * kVector, ors), a3 = take<kMove>(dst, src, 3 * kVector, ors);
  a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));  // the register
  size_t at = kBlock;
  for (; n - at >= kBlock; at += kBlock) {
    a0 = fold_into(a0, by_block, take<kMove>(dst, src, at, ors));
    a1 = fold_into(a1, by_block, take<kMove>(dst, src, at + kVector, ors));
    a2 = fold_into(a2, by_block, take<kMove>(dst, src, at + 2 * kVector, ors));
    a3 = fold_into(a3, by_block, take<kMove>(dst, src, at + 3 * kVector, ors));
  }
  a3 = fold_into(fold_into(fold_into(a0, by_vector, a1), by_vector, a2), by_vector, a3);
  // (the maskz form: GCC 12 takes the plain one's (and the cast's) undefined pass-through for an uninitialized read)
  __m128i x = _mm512_maskz_extracti32x4_epi32(0xf, a3, 3);
  x = fold_into(_mm512_maskz_extracti32x4_epi32(0xf, a3, 2), fold_by(128), x);
  x = fold_into(_mm512_maskz_extracti32x4_epi32(0xf, a3, 1), fold_by(256), x);
  x = fold_into(_mm512_maskz_extracti32x4_epi32(0xf, a3, 0), fold_by(384), x);
  const auto high = static_cast<uint64_t>(_mm_cvtsi128_si64(x)), low = static_cast<uint64_t>(_mm_extract_epi64(x, 1));
  const auto reg = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, high), low));
  if constexpr (!kMove) return {~update_hardware(reg, src + at, n - at), 0};
  std::memmove(dst + at, src + at, n - at);
  alignas(kVector) std::array<uint8_t, kVector> lanes;
  _mm512_store_si512(lanes.data(), ors);
  uint8_t odd = odd_bytes_or(dst + at, n - at);
  for (size_t j = 0; j < kVector; ++j)  // every store was at dst + a multiple of 64
    if ((reinterpret_cast<uintptr_t>(dst) + j) & 1) odd |= lanes[j];
  return {~update_hardware(reg, dst + at, n - at), odd};
}

uint32_t crc32c_folding(std::span<const std::byte> data, uint32_t crc) {
  if (data.size() < kBlock) return crc32c_instruction(data, crc);
  return fold_avx512<false>(nullptr, data.data(), data.size(), crc).crc;
}
MovedBytes move_folding(std::byte* dst, const std::byte* src, size_t n, uint32_t crc) {
  if (n < kBlock || (dst > src && dst < src + n)) return move_then_check<crc32c_instruction>(dst, src, n, crc);
  return fold_avx512<true>(dst, src, n, crc);
}
bool have_folding() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                                __builtin_cpu_supports("pclmul") && have_instruction();
  return supported;
}

std::vector<Crc32cPath> available_paths() {
  std::vector<Crc32cPath> paths{{"tables", crc32c_tables, move_then_check<crc32c_tables>}};
  if (have_instruction())
    paths.push_back({"crc32 instruction", crc32c_instruction, move_then_check<crc32c_instruction>});
  if (have_folding()) paths.push_back({"vpclmulqdq folding", crc32c_folding, move_folding});
  return paths;
}
#elif defined(MLPH_CRC32C_ARM)
std::vector<Crc32cPath> available_paths() {
  return {{"tables", crc32c_tables, move_then_check<crc32c_tables>},
          {"crc32 instruction", crc32c_instruction, move_then_check<crc32c_instruction>}};
}
#else
std::vector<Crc32cPath> available_paths() { return {{"tables", crc32c_tables, move_then_check<crc32c_tables>}}; }
#endif

}  // namespace

uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc) {
  return ~update_portable(~crc, data.data(), data.size());
}

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) { return crc32c_path().crc(data, crc); }

MovedBytes crc32c_move(std::byte* dst, const std::byte* src, size_t n, uint32_t crc) {
  return crc32c_path().move(dst, src, n, crc);
}

std::span<const Crc32cPath> crc32c_paths() {
  static const std::vector<Crc32cPath> paths = available_paths();
  return paths;
}

const Crc32cPath& crc32c_path() {
  static const Crc32cPath path = crc32c_paths().back();
  return path;
}

}  // namespace mlph::cosmoflow
