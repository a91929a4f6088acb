// What every harness shares: bad data must end in the reader's one error type; anything else that
// escapes (another exception, a crash, a leak, a sanitizer report) is a bug libFuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mlph::fuzz {

inline std::span<const std::byte> bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

// Runs body, for which ReaderError is the expected way to refuse the input.
template <class ReaderError, class Body>
void refusing(Body&& body) {
  try {
    body();
  } catch (const ReaderError&) {
  }
}

}  // namespace mlph::fuzz
