#include "mlph/core/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

namespace mlph::core {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const fs::path& file, const std::string& what, int error = errno) {
  throw OutputError(fmt::format("{}: {}: {}", file.string(), what, std::strerror(error)));
}

// A name nobody else uses: O_EXCL refuses one that exists, and the next is tried. The names are
// hidden and say whose they are (the pid), so a dead writer's leftovers can be told apart.
int create_beside(const fs::path& target, fs::path& temporary) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (int attempt = 0; attempt < 100; ++attempt) {
    temporary = dir / fmt::format(".{}.{}-{}.tmp", target.filename().string(), ::getpid(), counter++);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

}  // namespace

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  struct stat info {};
  if (::lstat(target_.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
    throw OutputError(fmt::format("{}: is a directory", target_.string()));
  fd_ = create_beside(target_, temporary_);
  if (fd_ < 0) fail(target_, fmt::format("cannot create a file beside it ({})", temporary_.filename().string()));
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : target_(std::move(other.target_)),
      temporary_(std::move(other.temporary_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::write(fd_, p, bytes);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail(committed_ ? target_ : temporary_, "cannot write");
    p += done, bytes -= static_cast<size_t>(done);
  }
}

void AtomicFile::sync() {
  if (::fsync(fd_) != 0) fail(committed_ ? target_ : temporary_, "cannot fsync");
}

void AtomicFile::commit() {
  sync();
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) fail(target_, "cannot replace it");
  committed_ = true;
  sync_directory(target_.has_parent_path() ? target_.parent_path() : fs::path("."));
}

void write_whole_file(const fs::path& file, std::string_view text) {
  AtomicFile out(file);
  out.write(text);
  out.commit();
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(dir, "cannot open the directory");
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) fail(dir, "cannot fsync the directory", error);
}

}  // namespace mlph::core
