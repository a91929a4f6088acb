// What every harness shares: bad data must end in the reader's one error type; anything else that
// escapes (another exception, a crash, a leak, a sanitizer report) is a bug libFuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

// libhdf5 allocates metadata buffers of the sizes a file states before it checks them against the
// file (a corrupt one asks for 17 GB, then fails the read). Untouched, that is address space, and
// glibc returns NULL for absurd sizes, which HDF5 reports as an error; under ASan the shadow of
// such a buffer alone is gigabytes. So allocations past 2 GiB fail here as they would there; one
// of ours then escapes as std::bad_alloc and is still reported.
#define MLPH_FUZZ_ALLOCATIONS_FAIL_PAST_2GIB \
  extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:max_allocation_size_mb=2048"; }

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
