// FNV-1a 64: the fingerprints the core compares (a plug-in file, a checkpoint's graph and
// configuration, what every rank runs). Not cryptographic: it tells apart what differs by accident.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlph::core {

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ULL;
  void add(const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 0x100000001b3ULL;
  }
  void add(const std::string& s) { add(s.c_str(), s.size() + 1); }  // the NUL separates fields
  std::string hex() const { return fmt::format("{:016x}", h); }
};

}  // namespace mlph::core
