// libmlph-storage-stalling.so: storage like storage/posix whose read of a file whose name contains
// option `stall_on` never returns: a reader stuck on a file (a hung network file system, a library
// looping on a corrupt file), for the tests of data.read_timeout_s.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "mlph/sdk/storage/storage.hpp"

namespace {
namespace fs = std::filesystem;

class StallingStorage final : public mlph::sdk::Storage {
 public:
  StallingStorage(const MLPH_HostApi*, const mlph::sdk::Options& options) : stall_on_(options.get("stall_on")) {
    options.allow_only({"stall_on"}, "storage/stalling");
    if (stall_on_.empty()) mlph::sdk::fail(MLPH_INVALID_ARGUMENT, "storage/stalling: option 'stall_on' is required");
  }

  void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) override {
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && entry.path().string().ends_with(suffix ? suffix : "")) paths.push_back(entry.path().string());
    std::sort(paths.begin(), paths.end());
    for (const std::string& p : paths) each(ctx, p.c_str());
  }

  size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) override {
    if (fs::path(path).filename().string().find(stall_on_) != std::string::npos)
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    return mlph::sdk::read_regular_file(path, std::numeric_limits<uint64_t>::max(),
                                        [&](size_t bytes) { return alloc(ctx, bytes); });
  }

  MLPH_IoStats stats() override { return {sizeof(MLPH_IoStats), nullptr, 0, 0, 0.0}; }

 private:
  std::string stall_on_;
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_STORAGE, "stalling", "0.1.0", "test only: storage whose read of a chosen file never returns",
                   mlph::sdk::storage_api<StallingStorage>())
