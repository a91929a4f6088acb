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

// TensorFlow stores CRCs rotated and offset so that a CRC of data holding CRCs stays well distributed.
constexpr uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
constexpr uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

inline uint32_t masked_crc32c(std::span<const std::byte> data) { return mask_crc(crc32c(data)); }

}  // namespace mlph::cosmoflow
