#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "mlph/sdk/util/error.hpp"

namespace mlph::stage {
namespace fs = std::filesystem;
using sdk::fail;

namespace {

std::string errno_text() { return std::strerror(errno); }

MLPH_Code write_error_code(int error) {
  return error == ENOSPC || error == EDQUOT ? MLPH_RESOURCE_EXHAUSTED : MLPH_UNAVAILABLE;
}

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Fd open_regular(const fs::path& path) {
  const auto refuse_unless_regular = [&](const struct stat& st) {
    if (!S_ISREG(st.st_mode)) fail(MLPH_INVALID_ARGUMENT, path.string() + ": not a regular file");
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(errno == ENOENT ? MLPH_NOT_FOUND : MLPH_PERMISSION_DENIED, path.string() + ": cannot open: " + errno_text());
  refuse_unless_regular(st);
  // O_NONBLOCK: should the file have become a FIFO since, opening it does not wait for a writer.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0)
    fail(errno == ENOENT ? MLPH_NOT_FOUND : MLPH_PERMISSION_DENIED, path.string() + ": cannot open: " + errno_text());
  if (::fstat(fd.get(), &st) != 0) fail(MLPH_UNAVAILABLE, path.string() + ": cannot stat: " + errno_text());
  refuse_unless_regular(st);
  return fd;
}

OutputFile::OutputFile(fs::path path)
    : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (fd_.get() < 0) fail(MLPH_PERMISSION_DENIED, path_.string() + ": cannot create: " + errno_text());
}

void OutputFile::write(const char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_.get(), data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(write_error_code(errno), path_.string() + ": cannot write: " + errno_text());
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

void OutputFile::close() {
  if (::close(fd_.release()) != 0) fail(write_error_code(errno), path_.string() + ": cannot close: " + errno_text());
}

}  // namespace mlph::stage
