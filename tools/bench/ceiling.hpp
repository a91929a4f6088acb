// The ceiling a data figure is read against: how fast the page cache hands the dataset's bytes to
// plain pread, on the same files, with the same number of threads, into the same (pinned) batch
// memory the readers fill. A reader's samples/s as a share of it says what its decoding costs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mlph::bench {

struct PreadCeiling {
  double bytes_per_s = 0;
  uint64_t bytes = 0;  // timed
};

// Reads `files` whole, in turn, on `threads` threads, thread t starting in `slots[t % slots.size()]`
// and going on through the slots as the readers fill a batch's rows (a file after the previous one,
// 4 KiB-aligned, in the next slot when the rest of this one is too small; a file larger than a slot
// in pieces of it), until at least `bytes` have been read (at least one file): the first files
// that hold `bytes`, after one untimed pass over them that puts them in the page cache. Throws std::runtime_error naming a file
// that cannot be read.
PreadCeiling measure_pread_ceiling(const std::vector<std::string>& files, std::span<const std::span<std::byte>> slots,
                                   unsigned threads, uint64_t bytes);

// This process's resident memory now (/proc/self/statm), 0 where unknown.
double resident_bytes();

}  // namespace mlph::bench
