// Little-endian views and copies of numeric arrays: every format here stores little-endian.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace mlph::cosmoflow {

template <typename T>
T byteswap_value(T v) {
  auto raw = std::bit_cast<std::array<std::byte, sizeof(T)>>(v);
  for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(raw[i], raw[sizeof(T) - 1 - i]);
  return std::bit_cast<T>(raw);
}

// Decodes count little-endian values of T from bytes (which holds exactly count * sizeof(T)).
template <typename T>
void from_le_bytes(std::span<const std::byte> bytes, T* out) {
  std::memcpy(out, bytes.data(), bytes.size());
  if constexpr (std::endian::native == std::endian::big)
    for (size_t i = 0; i < bytes.size() / sizeof(T); ++i) out[i] = byteswap_value(out[i]);
}

// The little-endian bytes of values.
template <typename T>
std::vector<std::byte> to_le_bytes(std::span<const T> values) {
  std::vector<std::byte> out(values.size_bytes());
  std::memcpy(out.data(), values.data(), out.size());
  if constexpr (std::endian::native == std::endian::big)
    for (size_t i = 0; i < values.size(); ++i) {
      const T swapped = byteswap_value(values[i]);
      std::memcpy(out.data() + i * sizeof(T), &swapped, sizeof(T));
    }
  return out;
}

inline std::span<const std::byte> as_bytes(const std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace mlph::cosmoflow
