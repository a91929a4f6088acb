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

// One file read whole into `slot`, piece by piece; returns its size.
uint64_t pread_file(const std::string& path, std::span<std::byte> slot) {
  uint64_t size = 0;
  const sdk::detail::Fd fd = sdk::detail::open_regular_file(path, size);
  for (uint64_t done = 0; done < size;) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(slot.size(), size - done));
    sdk::detail::read_exactly(fd, path, done, piece, reinterpret_cast<char*>(slot.data()));
    done += piece;
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
          while (read.load() < bytes)
            read += pread_file(files[next++ % files.size()], slots[t % slots.size()]);
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
  for (uint64_t held = 0; used.size() < files.size() && (used.empty() || held < bytes);) {
    used.push_back(files[used.size()]);
    held += pread_file(used.back(), slots.front());
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
