// storage/stage: copies each rank's shard of the dataset from the shared ("parallel") file system
// to node-local disk or RAM (/dev/shm), plain or from packed tar.zst archives, verifying sizes and
// checksums, and with `inflate` writing gzip files decompressed; afterwards the workload lists and
// reads the node-local copy. See manifest.hpp for the packed format and storage.h (`stage`) for the
// contract.
//
// Sharding, as the CosmoFlow reference's utils/staging.py and data/cosmo.py: rank r of `size` copies
// sorted(files)[r::size] of each split into a directory shared by the ranks of its node; after every
// rank is done, each rank lists the node's staged files and takes files[local_rank::local_size] of
// the (shuffled) listing. With one rank per node that is exactly files[rank::size].
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "files.hpp"
#include "manifest.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/util/gzip.hpp"

namespace {
namespace fs = std::filesystem;
using mlph::sdk::Error;
using mlph::sdk::fail;
using mlph::stage::Fd;
using mlph::stage::ManifestEntry;
using mlph::stage::OutputFile;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr long long kMaxThreads = 256;  // copy threads per rank: far more than any disk rewards

std::string errno_text() { return std::strerror(errno); }

// a + b, or a failure naming `what` when the sum does not fit (sizes come from untrusted manifests).
uint64_t checked_add(uint64_t a, uint64_t b, const std::string& what) {
  if (b > std::numeric_limits<uint64_t>::max() - a) fail(MLPH_DATA_LOSS, what + ": more than 2^64 bytes in all");
  return a + b;
}

// What this rank stages of one split (train/, validation/ ...).
struct SplitPlan {
  fs::path source, target;
  uint32_t parts = 0;                 // 0: plain files
  std::vector<ManifestEntry> items;   // sorted by name; the listed sizes when there is no manifest
  bool checksums = false;             // whether the split has a manifest (CRC-32s to verify)
  size_t usable = 0;                  // items[:usable] are staged, a multiple of the rank count
  int32_t rank = 0, size = 1;
  // inflate=1, plain files: for each of this rank's gzip files, its estimated size inflated
  // (find_gzip_files); empty otherwise.
  std::vector<std::optional<uint64_t>> inflated;
  bool mine(size_t i) const { return i < usable && i % static_cast<size_t>(size) == static_cast<size_t>(rank); }
  uint64_t my_bytes() const {
    uint64_t total = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (mine(i)) total = checked_add(total, items[i].size, source.string());
    return total;
  }
  // What my files will take staged: their sizes, or what the gzip ones inflate to (estimated).
  uint64_t my_staged_bytes() const {
    uint64_t total = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (mine(i)) total = checked_add(total, is_gzip(i) ? *inflated[i] : items[i].size, source.string());
    return total;
  }
  bool is_gzip(size_t i) const { return i < inflated.size() && inflated[i].has_value(); }
  size_t my_files() const { return usable / static_cast<size_t>(size); }
  // The parts that can hold files of this rank: those p with p % size == rank when the rank count
  // divides the part count, else all; never more than there are files (no part beyond is read).
  std::vector<uint32_t> my_parts() const {
    const bool aligned = parts % static_cast<uint32_t>(size) == 0;
    const uint64_t last = std::min<uint64_t>(parts, items.size());
    std::vector<uint32_t> out;
    for (uint64_t part = aligned ? static_cast<uint64_t>(rank) : 0; part < last; part += aligned ? static_cast<uint64_t>(size) : 1)
      out.push_back(static_cast<uint32_t>(part));
    return out;
  }
};

// Bytes moved so far, with a progress line at most once a second (rank 0 only).
class Progress {
 public:
  Progress(const MLPH_HostApi* host, bool report, uint64_t total) : host_(host), report_(report), total_(total) {
    start_ = last_ = host->now_seconds();
  }
  void add(uint64_t bytes) {
    const uint64_t done = done_ += bytes;
    if (!report_) return;
    std::lock_guard lock(mutex_);
    const double now = host_->now_seconds();
    if (now - last_ < 1.0) return;
    last_ = now;
    char line[160];
    std::snprintf(line, sizeof line, "staging: %.1f of %.1f MiB (%.0f%%), %.1f MiB/s", done / kMiB, total_ / kMiB,
                  total_ ? 100.0 * done / total_ : 100.0, done / kMiB / std::max(now - start_, 1e-9));
    host_->log(MLPH_LOG_INFO, "storage/stage", line);
  }

 private:
  const MLPH_HostApi* host_;
  bool report_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  double start_, last_;
};

// Runs `jobs` on `threads` threads; the first exception stops the rest and is rethrown.
void run_parallel(const std::vector<std::function<void()>>& jobs, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mutex;
  auto worker = [&] {
    for (size_t i; !failed && (i = next++) < jobs.size();) {
      try {
        jobs[i]();
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!failed.exchange(true)) first = std::current_exception();
      }
    }
  };
  std::vector<std::jthread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(jobs.size())); ++t) pool.emplace_back(worker);
  worker();
  pool.clear();
  if (first) std::rethrow_exception(first);
}

// The bytes a rank has written to its staged copy, and how many it may write: what a gzip file
// inflates to is known only once inflated (the space check can but estimate it, and a gzip "bomb"
// inflates a thousandfold), so inflated writes stop at the limit rather than fill the target.
struct WriteBudget {
  std::atomic<uint64_t> written{0};
  uint64_t limit = std::numeric_limits<uint64_t>::max();
};

// One staged file: its bytes as they come, or, for a gzip file staged with inflate=1, what they
// inflate to. `gzip` unset: decided by the first two bytes written (gzip's magic, 1f 8b), for files
// unpacked from archives. `source` names the file in errors. A gzip file is held whole and inflated
// in one call by libdeflate (plugins/util's mlph_gzip, 2-3x zlib); one too large to hold (over
// kWholeCompressedBytes, or inflating past kWholeInflatedBytes) is inflated by zlib as it comes,
// in constant memory.
class StagedFile final : public mlph::stage::Sink {
 public:
  static constexpr size_t kWholeCompressedBytes = size_t{64} << 20, kWholeInflatedBytes = size_t{256} << 20;

  StagedFile(OutputFile file, std::string source, std::optional<bool> gzip, WriteBudget& budget)
      : file_(std::move(file)), source_(std::move(source)), budget_(budget) {
    if (gzip) gzip_ = *gzip;
  }

  void write(const char* data, size_t bytes) override {
    if (!gzip_) {
      const size_t take = std::min(bytes, 2 - head_.size());
      head_.append(data, take);
      data += take;
      bytes -= take;
      if (head_.size() < 2) return;
      gzip_ = mlph::gzip::is_gzip(std::as_bytes(std::span(head_.data(), head_.size())));
      pass(head_.data(), head_.size());
    }
    pass(data, bytes);
  }

  void close() override {
    if (!gzip_) {  // fewer than two bytes: not gzip
      gzip_ = false;
      pass(head_.data(), head_.size());
    }
    if (*gzip_) finish_gzip();
    file_.close();
  }

  // copy_file_range wrote to file() directly (plain files only).
  OutputFile& file() { return file_; }
  void written_directly(uint64_t bytes) { budget_.written += bytes; }

 private:
  void pass(const char* data, size_t bytes) {
    if (!*gzip_) return put(data, bytes);
    if (streaming_) return feed(data, bytes);
    compressed_.insert(compressed_.end(), data, data + bytes);
    if (compressed_.size() > kWholeCompressedBytes) stream_what_is_held();
  }

  // The held bytes go to zlib's streaming inflater, and what follows them too.
  void stream_what_is_held() {
    streaming_.emplace(source_);
    std::vector<char> held;
    held.swap(compressed_);
    feed(held.data(), held.size());
  }

  void feed(const char* data, size_t bytes) {
    try {
      streaming_->feed(reinterpret_cast<const std::byte*>(data), bytes,
                       [this](const std::byte* inflated, size_t n) { put(reinterpret_cast<const char*>(inflated), n); });
    } catch (const mlph::gzip::Error& e) {
      fail(MLPH_DATA_LOSS, e.what());
    }
  }

  // The whole file inflated in one call, into memory bounded by what this rank may still write (a
  // "bomb" stops there); a file libdeflate refuses is streamed through zlib for the message it
  // always gave ("cannot inflate: ..."), and one too large to hold is streamed too.
  void finish_gzip() {
    if (!streaming_) {
      const uint64_t room = budget_.limit - std::min(budget_.limit, budget_.written.load());
      const auto bound = static_cast<size_t>(std::min<uint64_t>(room, kWholeInflatedBytes));
      try {
        const std::vector<std::byte> inflated = mlph::gzip::inflate(std::as_bytes(std::span(compressed_)), source_, bound);
        put(reinterpret_cast<const char*>(inflated.data()), inflated.size());
        compressed_ = {};
        return;
      } catch (const mlph::gzip::Error& e) {
        if (e.too_large() && bound == room) over_budget();
      }
      stream_what_is_held();
    }
    try {
      streaming_->finish();
    } catch (const mlph::gzip::Error& e) {
      fail(MLPH_DATA_LOSS, e.what());
    }
  }

  void put(const char* data, size_t bytes) {
    const uint64_t written = budget_.written += bytes;
    if (*gzip_ && written > budget_.limit) over_budget();
    file_.write(data, bytes);
  }

  [[noreturn]] void over_budget() const {
    fail(MLPH_RESOURCE_EXHAUSTED, source_ + ": inflates past the " + std::to_string(budget_.limit) +
                                      " bytes this rank may stage (storage.max_bytes, or what its files need and half its share "
                                      "of the target's free space beyond)");
  }

  OutputFile file_;
  std::string source_;
  WriteBudget& budget_;
  std::optional<bool> gzip_;
  std::string head_;  // the first bytes, until two decide whether the file is gzip
  std::vector<char> compressed_;  // a gzip file held whole until it ends
  std::optional<mlph::gzip::Inflater> streaming_;
};

// Reads exactly `bytes` at `offset`; false at the end of the file.
bool read_at(const Fd& fd, const fs::path& path, unsigned char* out, size_t bytes, off_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd.get(), out, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(MLPH_DATA_LOSS, path.string() + ": cannot read: " + errno_text());
    if (n == 0) return false;
    out += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

// What a file inflates to, when it is gzip (its first two bytes): the gzip trailer's ISIZE field,
// the inflated size mod 2^32 (in a multi-member file, the last member's only). An estimate for the
// space check, exact for the usual single-member file under 4 GiB; WriteBudget bounds the rest.
std::optional<uint64_t> gzip_inflated_size(const fs::path& file) {
  const Fd fd = mlph::stage::open_regular(file);
  unsigned char head[2], isize[4];
  if (!read_at(fd, file, head, sizeof head, 0) || !mlph::gzip::is_gzip(std::as_bytes(std::span(head)))) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(MLPH_UNAVAILABLE, file.string() + ": cannot stat: " + errno_text());
  if (st.st_size < 18 || !read_at(fd, file, isize, sizeof isize, st.st_size - 4)) return 0;  // inflating says what is wrong
  return mlph::gzip::trailer_size(std::as_bytes(std::span(isize)));
}

// The node this process runs on, as the network (and MPI, and Slurm) name it.
std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "?";
  return name.data();
}

// What each rank tells the others after staging: whether it failed, and its node.
struct Outcome {
  int32_t failed = 0;
  char node[60] = {};
};

class StageStorage final : public mlph::sdk::Storage {
 public:
  StageStorage(const MLPH_HostApi* host, const mlph::sdk::Options& options) : host_(host) {
    options.allow_only({"target", "keep", "threads", "max_bytes", "inflate"}, "storage/stage");
    const std::string target = options.get("target", "");
    const char* tmpdir = std::getenv("TMPDIR");
    target_base_ = target == "ram" ? fs::path("/dev/shm") : !target.empty() ? fs::path(target)
                                                            : fs::path(tmpdir && *tmpdir ? tmpdir : "/tmp");
    keep_ = options.get_int("keep", 0) != 0;
    inflate_ = options.get_int("inflate", 0, 0, 1) == 1;
    const long long threads = options.get_int("threads", 2);
    max_bytes_ = options.get_int("max_bytes", 0);
    if (threads < 1 || threads > kMaxThreads || max_bytes_ < 0)
      fail(MLPH_INVALID_ARGUMENT, "storage/stage: threads must be 1 to " + std::to_string(kMaxThreads) +
                                      " and max_bytes >= 0");
    threads_ = static_cast<int>(threads);
  }

  ~StageStorage() override {
    std::lock_guard lock(mutex_);
    remove_copy();
  }

  // The process is ending without destroying this instance (storage.h): the staged copy goes now,
  // and the copy threads, should any still run, create nothing more.
  void abandon() {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
    remove_copy();
  }

  void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) override {
    const fs::path where = staged_path(dir);
    std::error_code ec;
    if (!fs::is_directory(where, ec)) fail(MLPH_NOT_FOUND, where.string() + ": no such directory");
    std::vector<std::string> paths;
    const std::string tail = suffix ? suffix : "";
    for (fs::directory_iterator it(where, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (it->is_regular_file(ec) && name.size() >= tail.size() &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
        paths.push_back(it->path().string());
    }
    if (ec) fail(MLPH_UNAVAILABLE, where.string() + ": cannot list: " + ec.message());
    std::sort(paths.begin(), paths.end());
    for (const std::string& p : paths) each(ctx, p.c_str());
  }

  size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) override {
    const double start = host_->now_seconds();
    const size_t size = mlph::sdk::read_regular_file(path, std::numeric_limits<uint64_t>::max(),
                                                     [&](size_t bytes) { return alloc(ctx, bytes); });
    std::lock_guard lock(mutex_);
    io_.bytes_read += size;
    io_.files_read += 1;
    io_.read_seconds += host_->now_seconds() - start;
    return size;
  }

  // ABI 1.5: a byte range of a staged file (a workload reads a sample's payload straight into its batch).
  void read_range(const char* path, uint64_t offset, size_t bytes, void* dst) {
    const double start = host_->now_seconds();
    mlph::sdk::read_regular_file_range(path, offset, bytes, dst);
    std::lock_guard lock(mutex_);
    io_.bytes_read += bytes;
    io_.read_seconds += host_->now_seconds() - start;
  }

  MLPH_IoStats stats() override {
    std::lock_guard lock(mutex_);
    return io_;
  }

  MLPH_StageStats stage(const char* source_dir, const MLPH_CommsHandle& comms) {
    const double start = host_->now_seconds();
    if (!root_.empty()) fail(MLPH_FAILED_PRECONDITION, "storage/stage: already staged " + source_.string());
    MLPH_Topology t{sizeof(MLPH_Topology), nullptr, 0, 1, 0, 1, 1};
    mlph::sdk::check(host_, comms.api->topology(comms.comm, &t), "storage/stage: comms");
    // Across nodes a rank is named with its node: staging goes to node-local disk, whose room and
    // state are the node's.
    const std::string node = t.nodes > 1 ? " on node " + host_name() : "";
    const std::string who = "storage/stage: rank " + std::to_string(t.rank) + node + ": ";
    {
      std::lock_guard lock(mutex_);  // abandon() may read it from another thread
      root_ = target_base_ / ("mlperf-stage-" + job_tag(comms, t));
    }
    source_ = fs::absolute(source_dir).lexically_normal();

    MLPH_StageStats out{sizeof(MLPH_StageStats), nullptr, 0, 0, 0, 0.0, t.local_rank, t.local_size};
    std::optional<Error> error;
    attempt(error, who, [&] {
      remove_stale_copies();
      plan(t);
      if (inflate_) find_gzip_files();
      measure_free_space();
    });
    // Every rank has measured the target's free space before any rank copies: a rank measuring
    // after a peer of its node had copied would count that peer's copies twice.
    if (failed_ranks(comms, t, error, who + "comms before copying").empty())
      attempt(error, who, [&] {
        check_space(t);
        if (!keep_) hold_alive_lock(t.rank);
        copy_all(t, out);
      });
    // Every rank learns whether any failed, and on which node, so that none goes on to train on a
    // partial dataset.
    const std::vector<FailedRank> failed = failed_ranks(comms, t, error, who + "comms after staging");
    if (error) throw *error;
    if (!failed.empty())
      fail(MLPH_ABORTED, who + "rank " + std::to_string(failed.front().rank) +
                             (t.nodes > 1 && !failed.front().node.empty() ? " on node " + failed.front().node : "") +
                             " failed to stage its shard (see its error)");
    check_node_view(t, who);

    out.seconds = host_->now_seconds() - start;
    if (t.rank == 0) {
      char line[256];
      std::snprintf(line, sizeof line, "staged %llu files, %.1f MiB read, %.1f MiB written in %.2f s (%.1f MiB/s) to %s",
                    static_cast<unsigned long long>(out.files), out.bytes_read / kMiB, out.bytes_written / kMiB,
                    out.seconds, out.bytes_written / kMiB / std::max(out.seconds, 1e-9), root_.c_str());
      host_->log(MLPH_LOG_INFO, "storage/stage", line);
    }
    return out;
  }

 private:
  // Runs `step` unless an error came before; keeps the first error, naming the rank.
  template <class Step>
  static void attempt(std::optional<Error>& error, const std::string& who, Step&& step) {
    if (error) return;
    try {
      step();
    } catch (const Error& e) {
      error.emplace(e.code(), who + e.what());
    } catch (const std::exception& e) {
      error.emplace(MLPH_INTERNAL, who + e.what());
    }
  }

  struct FailedRank {
    int32_t rank;
    std::string node;
  };

  // The ranks that have an error so far, with their nodes (a collective: every rank calls it at the
  // same points).
  std::vector<FailedRank> failed_ranks(const MLPH_CommsHandle& comms, const MLPH_Topology& t,
                                       const std::optional<Error>& error, const std::string& context) const {
    Outcome mine{error ? 1 : 0, {}};
    host_name().copy(mine.node, sizeof mine.node - 1);
    std::vector<Outcome> all(static_cast<size_t>(t.size));
    mlph::sdk::check(host_, comms.api->allgather(comms.comm, &mine, all.data(), sizeof mine), context);
    std::vector<FailedRank> failed;
    for (int32_t r = 0; r < t.size; ++r)
      if (const Outcome& o = all[static_cast<size_t>(r)]; o.failed) failed.push_back({r, o.node});
    return failed;
  }

  // The same fresh name on every rank: rank 0 draws it and broadcasts it.
  std::string job_tag(const MLPH_CommsHandle& comms, const MLPH_Topology& t) {
    uint64_t tag = t.rank == 0 ? (static_cast<uint64_t>(::getpid()) << 32) ^
                                     static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count())
                               : 0;
    mlph::sdk::check(host_, comms.api->broadcast(comms.comm, &tag, sizeof tag, 0), "storage/stage: comms");
    char text[24];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(tag));
    return text;
  }

  // A source path under the staged directory lists its staged copy; anything else lists itself.
  fs::path staged_path(const char* dir) const {
    fs::path path = fs::absolute(dir).lexically_normal();
    if (!path.has_filename()) path = path.parent_path();
    if (root_.empty()) return path;
    const fs::path rel = path.lexically_relative(source_);
    if (rel.empty() || *rel.begin() == "..") return path;
    return rel == "." ? root_ : root_ / rel;
  }

  // ---- copies left behind ----------------------------------------------------------------------
  // A run that crashes or is killed (SIGKILL, the OOM killer) cannot remove its copy, and under
  // /dev/shm that holds RAM until someone does. So each rank holds an flock on <copy>/.alive-<rank>
  // while it runs, which the kernel drops however the process ends, and a later run removes a copy
  // in which no such lock is held any more. A copy staged with `keep` has no lock file: it stays.

  static constexpr std::string_view kAlivePrefix = ".alive-";

  // The lock file appears under its final name only once locked (made under another, then renamed),
  // so that another run never sees this copy's lock free while it starts.
  void hold_alive_lock(int32_t rank) {
    std::lock_guard guard(mutex_);  // as create_file: abandon comes wholly before (nothing made) or after
    if (abandoned_) fail(MLPH_ABORTED, root_.string() + ": no lock taken: the run is ending");
    const fs::path lock = root_ / (std::string(kAlivePrefix) + std::to_string(rank));
    const fs::path locking = root_ / (".locking-" + std::to_string(rank));
    std::optional<mlph::sdk::detail::Fd> fd = mlph::sdk::lock_file(locking.string(), true);
    if (!fd) fail(MLPH_PERMISSION_DENIED, locking.string() + ": locked by another process");
    std::error_code ec;
    fs::rename(locking, lock, ec);
    if (ec) fail(MLPH_PERMISSION_DENIED, lock.string() + ": cannot name the lock: " + ec.message());
    files_.push_back(lock);  // removed with the copy; the lock goes when the process does
    alive_.emplace(std::move(*fd));
  }

  // A copy is stale when it has lock files and every one of them can be locked: no rank holds it.
  static bool is_stale(const fs::path& copy) {
    bool any = false;
    std::error_code ec;
    for (fs::directory_iterator it(copy, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().rfind(kAlivePrefix, 0) != 0) continue;
      any = true;
      try {
        if (!mlph::sdk::lock_file(it->path().string(), false)) return false;  // held: a run is using it
      } catch (const mlph::sdk::Error&) {
        return false;  // not ours to judge: left alone
      }
    }
    return any && !ec;
  }

  void remove_stale_copies() const {
    std::error_code ec;
    for (fs::directory_iterator it(target_base_, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path copy = it->path();
      if (copy.filename().string().rfind("mlperf-stage-", 0) != 0 || copy == root_ || !is_stale(copy)) continue;
      std::error_code removing;
      if (fs::remove_all(copy, removing) > 0 && !removing)
        host_->log(MLPH_LOG_WARNING, "storage/stage",
                   (copy.string() + ": removed, a copy staged by a run that ended without removing it").c_str());
    }
  }

  // Removes what this rank staged, files first, then the directories it made, innermost first:
  // a directory that still holds another rank's files stays, so the node's last rank removes it.
  // A rank killed outright (a failing node, a task Slurm killed) removes nothing: when no rank holds
  // the copy any more, the one removing its own files last removes the dead ranks' too.
  // The caller holds mutex_.
  void remove_copy() {
    if (keep_) return;
    std::error_code ec;
    for (const fs::path& file : files_) fs::remove(file, ec);
    for (auto dir = dirs_.rbegin(); dir != dirs_.rend(); ++dir) fs::remove(*dir, ec);
    files_.clear();
    dirs_.clear();
    if (!root_.empty() && fs::exists(root_, ec) && is_stale(root_) && fs::remove_all(root_, ec) > 0 && !ec)
      host_->log(MLPH_LOG_WARNING, "storage/stage",
                 (root_.string() + ": removed the files of ranks that ended without removing them").c_str());
  }

  // One plan per subdirectory of the source: its files from the manifest or the listing.
  void plan(const MLPH_Topology& t) {
    std::error_code ec;
    if (!fs::is_directory(source_, ec)) fail(MLPH_NOT_FOUND, source_.string() + ": no such directory");
    std::vector<fs::path> splits;
    for (const auto& item : fs::directory_iterator(source_)) if (item.is_directory()) splits.push_back(item.path());
    std::sort(splits.begin(), splits.end());
    if (splits.empty()) fail(MLPH_NOT_FOUND, source_.string() + ": no subdirectories (train/, validation/) to stage");
    for (const fs::path& split : splits) {
      SplitPlan p{split, root_ / split.filename(), 0, {}, false, 0, t.rank, t.size, {}};
      if (fs::exists(split / mlph::stage::kManifestName)) {
        mlph::stage::Manifest m = mlph::stage::read_manifest(split / mlph::stage::kManifestName);
        p.parts = m.parts;
        p.items = std::move(m.entries);
        p.checksums = true;
      } else {
        for (const auto& item : fs::directory_iterator(split))
          if (item.is_regular_file()) p.items.push_back({item.path().filename().string(), item.file_size(), 0});
        std::sort(p.items.begin(), p.items.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
      }
      p.usable = p.items.size() / static_cast<size_t>(t.size) * static_cast<size_t>(t.size);
      if (p.usable < p.items.size() && t.rank == 0)
        host_->log(MLPH_LOG_WARNING, "storage/stage",
                   (split.string() + ": staging " + std::to_string(p.usable) + " of " + std::to_string(p.items.size()) +
                    " files, a multiple of the " + std::to_string(t.size) + " ranks").c_str());
      plans_.push_back(std::move(p));
    }
  }

  // inflate=1: which of this rank's plain files are gzip, and what each inflates to (estimated).
  // Files unpacked from archives are known only as they are unpacked: StagedFile decides for them,
  // and the space check counts their size in the archive.
  void find_gzip_files() {
    std::vector<std::function<void()>> jobs;
    for (SplitPlan& p : plans_) {
      if (p.parts != 0) continue;
      p.inflated.resize(p.items.size());
      for (size_t i = 0; i < p.items.size(); ++i)
        if (p.mine(i)) jobs.push_back([&p, i] { p.inflated[i] = gzip_inflated_size(p.source / p.items[i].name); });
    }
    run_parallel(jobs, threads_);  // an open and two small reads per file: in parallel on a parallel file system
  }

  // The target's free space, before any rank copies (stage() orders it so).
  void measure_free_space() {
    make_directory(root_);
    struct statvfs vfs {};
    if (::statvfs(root_.c_str(), &vfs) != 0) fail(MLPH_UNAVAILABLE, root_.string() + ": statvfs: " + errno_text());
    free_bytes_ = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }

  // Whether the node's ranks' files fit the free space measured; and how much this rank may write:
  // what it needs (estimated), and of its share of the space beyond that only half (kInflateMargin),
  // for an inflated file that outgrows its estimate (a GZIP trailer that lies low) must stop while
  // the target, a RAM disk perhaps, still has room.
  void check_space(const MLPH_Topology& t) {
    uint64_t need = 0;
    for (const SplitPlan& p : plans_) need = checked_add(need, p.my_staged_bytes(), source_.string());
    if (max_bytes_ > 0 && need > static_cast<uint64_t>(max_bytes_))
      fail(MLPH_RESOURCE_EXHAUSTED, "staging " + source_.string() + " needs " + std::to_string(need) +
                                        " bytes, more than storage.max_bytes = " + std::to_string(max_bytes_));
    const auto ranks = static_cast<uint64_t>(std::max(t.local_size, 1));
    const uint64_t node_need = need > std::numeric_limits<uint64_t>::max() / ranks ? std::numeric_limits<uint64_t>::max()
                                                                                   : need * ranks;
    if (node_need > free_bytes_)
      fail(MLPH_RESOURCE_EXHAUSTED, root_.string() + ": no space to stage: the node's " + std::to_string(t.local_size) +
                                        " rank(s) need about " + std::to_string(node_need) + " bytes, " +
                                        std::to_string(free_bytes_) + " are free");
    const uint64_t share = free_bytes_ / ranks;
    budget_.limit = need + (share - need) / kInflateMargin;
    if (max_bytes_ > 0) budget_.limit = std::min(budget_.limit, static_cast<uint64_t>(max_bytes_));
  }

  void copy_all(const MLPH_Topology& t, MLPH_StageStats& out) {
    uint64_t total = 0;
    for (const SplitPlan& p : plans_) total += p.my_bytes();
    Progress progress(host_, t.rank == 0, total);
    std::atomic<uint64_t> read_bytes{0};
    std::vector<std::function<void()>> jobs;
    std::vector<std::vector<char>> found(plans_.size());
    for (size_t s = 0; s < plans_.size(); ++s) {
      const SplitPlan& p = plans_[s];
      make_directory(p.target);
      if (p.parts == 0) {
        for (size_t i = 0; i < p.items.size(); ++i)
          if (p.mine(i))
            jobs.push_back([&, i] {
              copy_file(p.source / p.items[i].name, p.target / p.items[i].name, p.items[i], p.checksums, p.is_gzip(i),
                        progress);
              read_bytes += p.items[i].size;
            });
      } else {
        found[s].assign(p.items.size(), 0);
        for (const uint32_t part : p.my_parts())
          jobs.push_back([&, s, part] { read_bytes += unpack(p, part, found[s], progress); });
      }
    }
    run_parallel(jobs, threads_);
    for (size_t s = 0; s < plans_.size(); ++s) {
      const SplitPlan& p = plans_[s];
      if (p.parts == 0) continue;
      for (size_t i = 0; i < p.items.size(); ++i)
        if (p.mine(i) && !found[s][i])
          fail(MLPH_DATA_LOSS, (p.source / mlph::stage::part_name(static_cast<uint32_t>(i % p.parts))).string() +
                                   ": " + p.items[i].name + " is in the manifest but not in the archive");
    }
    out.bytes_read = read_bytes;
    out.bytes_written = budget_.written;
    for (const SplitPlan& p : plans_) out.files += p.my_files();
  }

  // Creates `dir` (and its parents) and remembers it for the clean-up, unless abandoned.
  void make_directory(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    if (abandoned_) fail(MLPH_ABORTED, dir.string() + ": not created: the run is ending");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail(MLPH_PERMISSION_DENIED, dir.string() + ": cannot create: " + ec.message());
    dirs_.push_back(dir);
  }

  // Creates `path` for writing and remembers it for the clean-up, unless abandoned.
  OutputFile create_file(const fs::path& path) {
    std::lock_guard lock(mutex_);
    if (abandoned_) fail(MLPH_ABORTED, path.string() + ": not created: the run is ending");
    files_.push_back(path);
    return OutputFile(path);
  }

  // Copies one plain file (inflating it when `gzip`), never more bytes than expected, verifying its
  // size (and CRC-32) as read.
  void copy_file(const fs::path& from, const fs::path& to, const ManifestEntry& item, bool check_crc, bool gzip,
                 Progress& progress) {
    const Fd in = mlph::stage::open_regular(from);
    StagedFile out(create_file(to), from.string(), gzip, budget_);
    uint64_t bytes = check_crc || gzip ? 0 : copy_in_kernel(in.get(), out, from, item.size, progress);
    uint32_t crc = 0;
    std::vector<char> buffer(4 << 20);
    for (;;) {  // with a checksum to verify (or when the kernel cannot copy): through our buffer
      const uint64_t left = item.size - bytes;  // asking for one byte more finds a file that grew
      const size_t want = left < buffer.size() ? static_cast<size_t>(left) + 1 : buffer.size();
      const ssize_t n = ::read(in.get(), buffer.data(), want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(MLPH_DATA_LOSS, from.string() + ": cannot read: " + errno_text());
      if (n == 0) break;
      if (static_cast<uint64_t>(n) > item.size - bytes) fail(MLPH_DATA_LOSS, from.string() + ": " + larger_than(item.size));
      if (check_crc) crc = mlph::stage::crc32_update(crc, buffer.data(), static_cast<size_t>(n));
      out.write(buffer.data(), static_cast<size_t>(n));
      bytes += static_cast<uint64_t>(n);
      progress.add(static_cast<uint64_t>(n));
    }
    out.close();
    mlph::stage::verify(from.string(), item, bytes, crc, check_crc);
  }

  static std::string larger_than(uint64_t size) { return "larger than the " + std::to_string(size) + " bytes expected"; }

  // Copies up to `size` bytes without passing them through user space (as cp does) while the
  // kernel can; returns the bytes copied, after which the caller's read/write loop finishes
  // whatever is left (and finds a file that grew).
  static uint64_t copy_in_kernel(int in, StagedFile& out, const fs::path& from, uint64_t size, Progress& progress) {
    uint64_t bytes = 0;
    while (bytes < size) {
      const ssize_t n = ::copy_file_range(in, nullptr, out.file().fd(), nullptr, std::min<uint64_t>(size - bytes, 64 << 20), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) return bytes;
      if (n < 0)
        fail(errno == ENOSPC || errno == EDQUOT ? MLPH_RESOURCE_EXHAUSTED : MLPH_DATA_LOSS,
             from.string() + " -> " + out.file().path().string() + ": cannot copy: " + errno_text());
      if (n == 0) return bytes;
      out.written_directly(static_cast<uint64_t>(n));
      bytes += static_cast<uint64_t>(n);
      progress.add(static_cast<uint64_t>(n));
    }
    return bytes;
  }

  // Unpacks this rank's files from one part; returns the archive bytes read.
  uint64_t unpack(const SplitPlan& p, uint32_t part, std::vector<char>& found, Progress& progress) {
    const fs::path path = p.source / mlph::stage::part_name(part);
    const Fd fd = mlph::stage::open_regular(path);
    std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
    archive_read_support_filter_zstd(a.get());  // what mlph-pack-data writes, and no other (no external programs)
    archive_read_support_format_tar(a.get());
    if (archive_read_open_fd(a.get(), fd.get(), 1 << 20) != ARCHIVE_OK)
      fail(MLPH_DATA_LOSS, path.string() + ": cannot read: " + archive_error_string(a.get()));
    return mlph::stage::unpack_part(
        a.get(), path.string(), p.items, p.parts, part, [&](size_t i) { return p.mine(i); },
        [&](size_t i) {
          return std::make_unique<StagedFile>(create_file(p.target / p.items[i].name), path.string() + ": " + p.items[i].name,
                                              inflate_ ? std::nullopt : std::optional<bool>(false), budget_);
        },
        [&](uint64_t bytes) { progress.add(bytes); }, found);
  }

  // After the barrier the node's directory must hold exactly its ranks' shards: more means the
  // target is shared between nodes (not node-local), which would break the sharding.
  void check_node_view(const MLPH_Topology& t, const std::string& who) const {
    for (const SplitPlan& p : plans_) {
      size_t count = 0;
      for (const auto& item : fs::directory_iterator(p.target)) count += item.is_regular_file() ? 1 : 0;
      const size_t expected = p.my_files() * static_cast<size_t>(std::max(t.local_size, 1));
      if (count != expected)
        fail(MLPH_FAILED_PRECONDITION, who + p.target.string() + " holds " + std::to_string(count) + " files, expected " +
                                           std::to_string(expected) + " from this node's ranks: is storage.target node-local?");
    }
  }

  const MLPH_HostApi* host_;
  fs::path target_base_, root_, source_;
  bool keep_ = false;
  bool inflate_ = false;  // gzip files are staged inflated
  uint64_t free_bytes_ = 0;  // the target's, measured before any rank copied
  // Of the space beyond what the files need (estimated), a rank's inflated writes may take 1/this.
  static constexpr uint64_t kInflateMargin = 2;
  int threads_ = 2;
  long long max_bytes_ = 0;
  std::vector<SplitPlan> plans_;
  WriteBudget budget_;
  std::mutex mutex_;  // guards what follows
  std::vector<fs::path> files_, dirs_;  // what this rank created, for the clean-up
  bool abandoned_ = false;
  std::optional<mlph::sdk::detail::Fd> alive_;  // holds this rank's lock on its copy (hold_alive_lock)
  MLPH_IoStats io_{sizeof(MLPH_IoStats), nullptr, 0, 0, 0.0};
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_STORAGE, "stage", "0.1.0",
                   "stages each rank's shard to node-local disk or RAM (plain or tar.zst), then reads it",
                   mlph::sdk::storage_api<StageStorage>())
