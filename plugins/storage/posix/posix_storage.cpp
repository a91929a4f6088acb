// storage/posix: lists and reads files on any mounted file system, counting bytes and time.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "mlph/sdk/storage/storage.hpp"

namespace {
namespace fs = std::filesystem;
using mlph::sdk::fail;

class PosixStorage final : public mlph::sdk::Storage {
 public:
  PosixStorage(const MLPH_HostApi*, const mlph::sdk::Options& options) { options.allow_only({}, "storage/posix"); }

  void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) override {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail(MLPH_NOT_FOUND, std::string(dir) + ": no such directory");
    std::vector<std::string> paths;
    const std::string tail = suffix ? suffix : "";
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_regular_file(ec) && name.size() >= tail.size() &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
        paths.push_back(it->path().string());
    }
    if (ec) fail(MLPH_UNAVAILABLE, std::string(dir) + ": cannot list: " + ec.message());
    std::sort(paths.begin(), paths.end());
    for (const std::string& p : paths) each(ctx, p.c_str());
  }

  size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) override {
    const auto start = std::chrono::steady_clock::now();
    const size_t size = mlph::sdk::read_regular_file(path, std::numeric_limits<uint64_t>::max(),
                                                     [&](size_t bytes) { return alloc(ctx, bytes); });
    count(size, start);
    return size;
  }

  // ABI 1.5: a byte range, for a rank that holds only part of each sample.
  void read_range(const char* path, uint64_t offset, size_t bytes, void* dst) {
    const auto start = std::chrono::steady_clock::now();
    mlph::sdk::read_regular_file_range(path, offset, bytes, dst);
    count(bytes, start);
  }

  MLPH_IoStats stats() override {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  void count(size_t bytes, std::chrono::steady_clock::time_point start) {
    std::lock_guard lock(mutex_);
    stats_.bytes_read += bytes;
    stats_.files_read += 1;
    stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::mutex mutex_;
  MLPH_IoStats stats_{sizeof(MLPH_IoStats), nullptr, 0, 0, 0.0};
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_STORAGE, "posix", "0.1.0", "reads files from any mounted file system",
                   mlph::sdk::storage_api<PosixStorage>())
