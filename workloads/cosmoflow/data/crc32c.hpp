// CRC32C (Castagnoli), the checksum TFRecord framing uses, and TensorFlow's masking of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mlph::cosmoflow {

// CRC32C of data; pass a previous result as crc to extend it: crc32c(b, crc32c(a)) == crc32c(a + b).
// Uses the CPU's crc32 instruction when it has one (SSE4.2, ARMv8 CRC), the portable tables otherwise.
uint32_t crc32c(std::span<const std::byte> data, uint32_t crc = 0);

// The same value from slicing-by-8 tables only; exposed so tests can compare both paths.
uint32_t crc32c_portable(std::span<const std::byte> data, uint32_t crc = 0);

// What crc32c_move reports of the bytes it moved: their CRC32C (extending the crc passed), and the
// OR of those that landed at odd addresses: the high bytes of little-endian 16-bit values lying at
// even addresses, so bit 7 is set when any of them is negative.
struct MovedBytes {
  uint32_t crc = 0;
  uint8_t odd_or = 0;
};

// Moves n bytes from src to dst as memmove does (they may overlap) and reports them, in one pass
// where the CPU allows it (AVX-512 with VPCLMULQDQ: each 64 bytes loaded once, stored, folded into
// the CRC and ORed, while they are in the core's cache), else memmove, then crc32c over dst.
MovedBytes crc32c_move(std::byte* dst, const std::byte* src, size_t n, uint32_t crc = 0);

// Every implementation this CPU runs ("tables" always; "crc32 instruction" with SSE4.2 or ARMv8
// CRC; "vpclmulqdq folding" with AVX-512 and VPCLMULQDQ), for the tests to hold each against the
// tables.
struct Crc32cPath {
  const char* name;
  uint32_t (*crc)(std::span<const std::byte> data, uint32_t crc);
  MovedBytes (*move)(std::byte* dst, const std::byte* src, size_t n, uint32_t crc);
};
std::span<const Crc32cPath> crc32c_paths();
// The one crc32c and crc32c_move take (the last of crc32c_paths).
const Crc32cPath& crc32c_path();

// TensorFlow stores CRCs rotated and offset so that a CRC of data holding CRCs stays well distributed.
constexpr uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
constexpr uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

inline uint32_t masked_crc32c(std::span<const std::byte> data) { return mask_crc(crc32c(data)); }

}  // namespace mlph::cosmoflow
