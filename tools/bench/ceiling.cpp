#include "ceiling.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "mlph/sdk/storage/storage.hpp"

namespace mlph::bench {
namespace {

// Where a thread's next file lands: the slots taken in turn, each filled file after file, as the
// readers fill a batch's rows. Reading every file into the same place instead (as this did) kept
// that place in the L3 cache (one 16 MiB sample in a 32 MiB L3), which the readers, filling
// ever-new rows of the batch memory, never have: the kernel's copy then ran about 1.5x faster than
// into the memory the readers fill, and every share of the ceiling read low by that.
class Destinations {
 public:
  Destinations(std::span<const std::span<std::byte>> slots, size_t first) : slots_(slots), slot_(first % slots.size()) {}

  // Memory for the next `size` bytes of a file: the rest of the current slot when they fit, else
  // the next slot (from its start, as much of it as there is). Starts stay 4 KiB-aligned, as rows
  // of the batch memory are, so that the copy runs as aligned as the readers' does.
  std::span<std::byte> next(uint64_t size) {
    constexpr size_t kAlign = 4096;
    const std::span<std::byte> slot = slots_[slot_];
    if (used_ > 0 && used_ + size > slot.size()) {
      slot_ = (slot_ + 1) % slots_.size();
      used_ = 0;
    }
    const std::span<std::byte> room = slots_[slot_].subspan(used_);
    const std::span<std::byte> into = room.first(static_cast<size_t>(std::min<uint64_t>(size, room.size())));
    used_ = std::min(slots_[slot_].size(), used_ + (into.size() + kAlign - 1) / kAlign * kAlign);
    return into;
  }

 private:
  std::span<const std::span<std::byte>> slots_;
  size_t slot_, used_ = 0;
};

// One file read whole, in pieces as large as the destinations give; returns its size.
uint64_t pread_file(const std::string& path, Destinations& to) {
  uint64_t size = 0;
  const sdk::detail::Fd fd = sdk::detail::open_regular_file(path, size);
  for (uint64_t done = 0; done < size;) {
    const std::span<std::byte> into = to.next(size - done);
    sdk::detail::read_exactly(fd, path, done, into.size(), reinterpret_cast<char*>(into.data()));
    done += into.size();
  }
  return size;
}

// Threads take the next file (cycling through the list) until `bytes` are read.
PreadCeiling read_until(const std::vector<std::string>& files, std::span<const std::span<std::byte>> slots, unsigned threads,
                  uint64_t bytes) {
  std::atomic<uint64_t> next{0}, read{0};
  std::mutex mutex;
  std::exception_ptr error;
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        try {
          Destinations to(slots, t);
          while (read.load() < bytes) read += pread_file(files[next++ % files.size()], to);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!error) error = std::current_exception();
          read = bytes;  // the others stop too
        }
      });
  }
  if (error) std::rethrow_exception(error);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {static_cast<double>(read.load()) / seconds, read.load()};
}

}  // namespace

PreadCeiling measure_pread_ceiling(const std::vector<std::string>& files, std::span<const std::span<std::byte>> slots,
                                   unsigned threads, uint64_t bytes) {
  if (files.empty() || slots.empty()) throw std::runtime_error("the pread ceiling needs files and memory to read into");
  // As many files as hold `bytes` (a dataset may be far larger than memory), read once into the
  // page cache, then timed.
  std::vector<std::string> used;
  Destinations to(slots, 0);
  for (uint64_t held = 0; used.size() < files.size() && (used.empty() || held < bytes);) {
    used.push_back(files[used.size()]);
    held += pread_file(used.back(), to);
  }
  return read_until(used, slots, std::max(1u, threads), std::max<uint64_t>(bytes, 1));
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
}

}  // namespace mlph::bench
