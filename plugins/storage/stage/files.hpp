// Files as storage/stage and mlph-pack-data read and write them: errors are mlph::sdk::Error naming
// the file, with the code the cause calls for (no space: MLPH_RESOURCE_EXHAUSTED).
#pragma once

#include <cstddef>
#include <filesystem>
#include <utility>

namespace mlph::stage {

// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Opens `path` for reading when it is a regular file (following links). A FIFO, device or
// directory is refused, naming it, without being opened: reading one could wait forever.
Fd open_regular(const std::filesystem::path& path);

// Where the bytes of a file being staged go: the file itself, or a filter in front of it
// (storage/stage inflates gzip files on their way to the file).
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const char* data, size_t bytes) = 0;
  virtual void close() = 0;  // reports what is wrong at the end (a failing close, a truncated stream)
};

// A new file (created or truncated, mode 0644) that checks every write and its close.
class OutputFile final : public Sink {
 public:
  explicit OutputFile(std::filesystem::path path);
  void write(const char* data, size_t bytes) override;
  void close() override;  // reports what a failing close says (NFS, quotas); the destructor does not
  int fd() const { return fd_.get(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  Fd fd_;
};

}  // namespace mlph::stage
