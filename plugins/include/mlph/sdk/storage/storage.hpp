// Write a storage plug-in as a C++ class; `storage_api<Impl>()` generates the C table.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/util/plugin.hpp"
#include "mlph/storage.h"

namespace mlph::sdk {

// ---- using a storage handle (workloads) ------------------------------------------------------
// Errors throw (sdk::check) with `context` in front, e.g. "DeepCAM data: ...".

// The files of `dir` whose names end in `suffix`, sorted by name (the storage plug-in sorts).
inline std::vector<std::string> list_files(const MLPH_HostApi* host, const MLPH_StorageHandle& storage,
                                           const std::string& dir, const char* suffix, const std::string& context) {
  std::vector<std::string> files;
  auto collect = [](void* ctx, const char* path) { static_cast<std::vector<std::string>*>(ctx)->push_back(path); };
  check(host, storage.api->list(storage.storage, dir.c_str(), suffix, collect, &files), context);
  return files;
}

// The whole file, refused with one line naming it when it is larger than `max_bytes` (what the
// caller's format allows: a read never asks for an absurd buffer) or memory for it cannot be had.
// The whole file at `path` into `into`, reusing its memory (a reader that keeps one buffer for every
// file neither zeroes nor faults in fresh pages per file); refused beyond `max_bytes`, naming the file.
inline void read_file(const MLPH_HostApi* host, const MLPH_StorageHandle& storage, const std::string& path,
                      const std::string& context, uint64_t max_bytes, std::vector<std::byte>& into) {
  struct Target {
    std::vector<std::byte>& bytes;
    uint64_t max_bytes;
    std::optional<size_t> refused;  // the size asked for, when the buffer was refused
    bool out_of_memory = false;
  } target{into, max_bytes, std::nullopt};
  auto alloc = [](void* ctx, size_t size) noexcept -> void* {
    auto* t = static_cast<Target*>(ctx);
    try {
      if (size <= t->max_bytes) {
        t->bytes.resize(size);
        return t->bytes.data();
      }
    } catch (const std::bad_alloc&) {
      t->out_of_memory = true;
    }
    t->refused = size;
    return nullptr;
  };
  size_t size = 0;
  MLPH_Error* error = storage.api->read(storage.storage, path.c_str(), alloc, &target, &size);
  if (target.refused) {
    if (error) host->error_free(error);
    const std::string bytes = std::to_string(*target.refused) + " bytes";
    if (target.out_of_memory) fail(MLPH_RESOURCE_EXHAUSTED, context + ": " + path + ": out of memory for its " + bytes);
    fail(MLPH_OUT_OF_RANGE, context + ": " + path + ": " + bytes + ", more than the " + std::to_string(max_bytes) +
                                " bytes a file of this data can hold");
  }
  check(host, error, context);
  into.resize(size);
}

inline std::vector<std::byte> read_file(const MLPH_HostApi* host, const MLPH_StorageHandle& storage,
                                        const std::string& path, const std::string& context,
                                        uint64_t max_bytes = std::numeric_limits<uint64_t>::max()) {
  std::vector<std::byte> bytes;
  read_file(host, storage, path, context, max_bytes, bytes);
  return bytes;
}

// ---- reading a file safely (storage plug-ins; workloads reading a file directly) --------------

// The machine's memory: no file larger than this can be read whole.
inline uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                               : std::numeric_limits<uint64_t>::max();
}

namespace detail {
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

inline const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading and returns it with its size, refusing with one line naming the path
// what is not a regular file (a FIFO blocks the reader, a directory or a device such as /dev/zero
// has no size). Opened non-blocking, so a FIFO swapped in after a check cannot hang the open either.
inline Fd open_regular_file(const std::string& path, uint64_t& size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    fail(e == ENOENT ? MLPH_NOT_FOUND : e == EACCES ? MLPH_PERMISSION_DENIED : MLPH_UNAVAILABLE,
         path + ": cannot open: " + std::strerror(e));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(MLPH_UNAVAILABLE, path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    fail(MLPH_INVALID_ARGUMENT, path + ": is " + file_kind(info.st_mode) + ", not a regular file");
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  size = static_cast<uint64_t>(info.st_size);
  return fd;
}

// Reads `bytes` bytes at `offset` of the open file into `buffer`; a file that ends sooner (it
// shrank while read) is one line naming it.
inline void read_exactly(const Fd& fd, const std::string& path, uint64_t offset, size_t bytes, char* buffer) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd.get(), buffer + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(MLPH_DATA_LOSS, path + ": cannot read: " + std::strerror(errno));
    if (n == 0)
      fail(MLPH_DATA_LOSS, path + ": short read: " + std::to_string(done) + " of " + std::to_string(bytes) +
                               " bytes (the file shrank while read?)");
    done += static_cast<size_t>(n);
  }
}
}  // namespace detail

// Reads the whole regular file at `path` into the buffer `alloc(size)` returns (NULL refuses it)
// and returns the size. Refused with one line naming the path, before anything blocks or is
// allocated: what is not a regular file (detail::open_regular_file) and a file larger than
// max_bytes or than the machine's memory.
template <class Alloc>
size_t read_regular_file(const std::string& path, uint64_t max_bytes, Alloc&& alloc) {
  uint64_t size = 0;
  const detail::Fd fd = detail::open_regular_file(path, size);
  const uint64_t limit = std::min(max_bytes, physical_memory_bytes());
  if (size > limit)
    fail(MLPH_OUT_OF_RANGE, path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(limit) +
                                (limit == max_bytes ? " bytes allowed" : " bytes of this machine's memory"));
  auto* buffer = static_cast<char*>(static_cast<void*>(alloc(static_cast<size_t>(size))));
  if (!buffer && size) fail(MLPH_RESOURCE_EXHAUSTED, path + ": no buffer for " + std::to_string(size) + " bytes");
  detail::read_exactly(fd, path, 0, static_cast<size_t>(size), buffer);
  return static_cast<size_t>(size);
}

// `bytes` bytes at `offset` of the regular file at `path` into `dst` (ABI 1.5's read_range), refused
// as read_regular_file refuses, and a range past the end of the file, with one line naming it.
inline void read_regular_file_range(const std::string& path, uint64_t offset, size_t bytes, void* dst) {
  uint64_t size = 0;
  const detail::Fd fd = detail::open_regular_file(path, size);
  if (offset > size || bytes > size - offset)
    fail(MLPH_DATA_LOSS, path + ": bytes " + std::to_string(offset) + " to " + std::to_string(offset + bytes) +
                                " lie past the end of the file (" + std::to_string(size) + " bytes)");
  detail::read_exactly(fd, path, offset, bytes, static_cast<char*>(dst));
}

// The same into a vector.
inline std::vector<std::byte> read_regular_file(const std::string& path, uint64_t max_bytes) {
  std::vector<std::byte> bytes;
  read_regular_file(path, max_bytes, [&](size_t size) {
    bytes.resize(size);
    return bytes.data();
  });
  return bytes;
}

// ---- a lock a process holds while it runs ----------------------------------------------------

// An exclusive flock(2) on the regular file at `path` (created with `mode` when `create`; never
// opened through a symbolic link), held until the returned Fd is closed or the process ends however
// it ends: the kernel drops it. nullopt when another process holds it. Throws, naming the path, when
// it cannot be opened (or is no regular file) or locked. Whoever can read the file can lock it.
inline std::optional<detail::Fd> lock_file(const std::string& path, bool create, mode_t mode = 0600) {
  detail::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (create ? O_CREAT : 0), mode));
  if (fd.get() < 0) {
    const int e = errno;
    fail(e == ENOENT ? MLPH_NOT_FOUND : MLPH_PERMISSION_DENIED, path + ": cannot open the lock file: " + std::strerror(e));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode))
    fail(MLPH_INVALID_ARGUMENT, path + ": is " + detail::file_kind(info.st_mode) + ", not a lock file");
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
  if (errno == EWOULDBLOCK) return std::nullopt;
  fail(MLPH_PERMISSION_DENIED, path + ": cannot lock: " + std::strerror(errno));
}

// Whether a storage table has read_range (ABI 1.5).
inline bool has_read_range(const MLPH_StorageApi* api) {
  return api && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_StorageApi, read_range) && api->read_range;
}

// `bytes` bytes at `offset` of a file into `dst`; the storage must have read_range (has_read_range).
inline void read_range(const MLPH_HostApi* host, const MLPH_StorageHandle& storage, const std::string& path,
                       uint64_t offset, size_t bytes, void* dst, const std::string& context) {
  check(host, storage.api->read_range(storage.storage, path.c_str(), offset, bytes, dst), context);
}

// ---- writing a storage plug-in ---------------------------------------------------------------

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) = 0;
  virtual size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) = 0;
  virtual MLPH_IoStats stats() = 0;
  // Optional (ABI 1.1): a class that stages defines
  //   MLPH_StageStats stage(const char* source_dir, const MLPH_CommsHandle& comms);
  // and storage_api<Impl>() fills the table's `stage`; otherwise it stays NULL (no staging).
  // Optional (ABI 1.4): a class that leaves files behind defines
  //   void abandon();   // thread-safe: remove them now, the process is ending (storage.h)
  // and storage_api<Impl>() fills `abandon`; its exceptions are swallowed (only the exit follows).
  // Optional (ABI 1.5): a class that reads byte ranges defines
  //   void read_range(const char* path, uint64_t offset, size_t bytes, void* dst);
  // for the table's `read_range`; otherwise it stays NULL (whole files only).
};

template <class Impl>
concept Stages = requires(Impl& impl, const char* dir, const MLPH_CommsHandle& comms) {
  { impl.stage(dir, comms) } -> std::same_as<MLPH_StageStats>;
};

template <class Impl>
concept Abandons = requires(Impl& impl) {
  { impl.abandon() } -> std::same_as<void>;
};

template <class Impl>
concept ReadsRanges = requires(Impl& impl, const char* path, uint64_t offset, size_t bytes, void* dst) {
  impl.read_range(path, offset, bytes, dst);
};

namespace detail {
using StorageBox = Boxed<Storage>;
inline StorageBox* unbox(MLPH_Storage* s) { return reinterpret_cast<StorageBox*>(s); }

// The table's `stage`: the class's stage() behind the C boundary, or NULL when it has none.
template <class Impl>
constexpr auto stage_entry() -> MLPH_Error* (*)(MLPH_Storage*, const char*, const MLPH_CommsHandle*, MLPH_StageStats*) {
  if constexpr (Stages<Impl>) {
    return [](MLPH_Storage* s, const char* dir, const MLPH_CommsHandle* comms, MLPH_StageStats* out) {
      return guard(unbox(s)->host, [&] {
        if (!comms || !out) fail(MLPH_INVALID_ARGUMENT, "stage: NULL comms or stats");
        const size_t caller_size = out->struct_size;
        MLPH_StageStats stats = static_cast<Impl&>(*unbox(s)->impl).stage(dir, *comms);
        stats.struct_size = caller_size;  // a 1.1 caller's struct may be larger than ours: write only ours
        std::memcpy(out, &stats, std::min(caller_size, sizeof stats));
      });
    };
  } else {
    return nullptr;
  }
}

// The table's `abandon`: the class's abandon(), or NULL when it has none.
template <class Impl>
constexpr auto abandon_entry() -> void (*)(MLPH_Storage*) {
  if constexpr (Abandons<Impl>) {
    return [](MLPH_Storage* s) {
      try {
        static_cast<Impl&>(*unbox(s)->impl).abandon();
      } catch (...) {  // best effort: the process exits next, and no exception may cross the boundary
      }
    };
  } else {
    return nullptr;
  }
}

// The table's `read_range`: the class's read_range() behind the C boundary, or NULL when it has none.
template <class Impl>
constexpr auto read_range_entry() -> MLPH_Error* (*)(MLPH_Storage*, const char*, uint64_t, size_t, void*) {
  if constexpr (ReadsRanges<Impl>) {
    return [](MLPH_Storage* s, const char* path, uint64_t offset, size_t bytes, void* dst) {
      return guard(unbox(s)->host, [&] {
        if (!dst && bytes) fail(MLPH_INVALID_ARGUMENT, "read_range: no destination");
        static_cast<Impl&>(*unbox(s)->impl).read_range(path, offset, bytes, dst);
      });
    };
  } else {
    return nullptr;
  }
}
}  // namespace detail

template <class Impl>
const MLPH_StorageApi* storage_api() {
  using namespace detail;
  static const MLPH_StorageApi api = {
      sizeof(MLPH_StorageApi),
      nullptr,
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Storage** out) {
        return guard(host, [&] {
          auto box = std::make_unique<StorageBox>(StorageBox{host, std::make_unique<Impl>(host, Options(kv, n))});
          *out = reinterpret_cast<MLPH_Storage*>(box.release());
        });
      },
      [](MLPH_Storage* s) { delete unbox(s); },
      [](MLPH_Storage* s, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) {
        return guard(unbox(s)->host, [&] { unbox(s)->impl->list(dir, suffix, each, ctx); });
      },
      [](MLPH_Storage* s, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size) {
        return guard(unbox(s)->host, [&] { *size = unbox(s)->impl->read(path, alloc, ctx); });
      },
      [](MLPH_Storage* s, MLPH_IoStats* out) {
        return guard(unbox(s)->host, [&] { *out = unbox(s)->impl->stats(); });
      },
      stage_entry<Impl>(),
      abandon_entry<Impl>(),
      read_range_entry<Impl>(),
  };
  return &api;
}

}  // namespace mlph::sdk
