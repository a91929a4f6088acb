// Writing the files the programs make (checkpoints, exported weights, the MLPerf log, mlperf-score's
// CSV and report): one way. The bytes go into a temporary file created beside the target under a
// name of its own with O_CREAT | O_EXCL (which never opens an existing file, nor follows a symbolic
// link), are fsync'ed, and the file is renamed over the target, its directory fsync'ed: a reader sees
// the old file or the whole new one, and what stood at the target (a link, a FIFO, an older file) is
// replaced, never written through.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mlph::core {

// A file that cannot be written: one line naming it and why.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AtomicFile {
 public:
  // Creates the temporary beside `target` (its directory must exist). Refused, naming the target,
  // when the target is a directory or the directory cannot take a new file: made before a run
  // starts, it reserves the output that run will write.
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();  // an uncommitted file is removed
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the target, fsync its directory. The file stays open: a file that grows while
  // it is in use (the MLPerf log) is committed when it is opened and written on under its name.
  void commit();
  void sync();  // fsync what was written since

  const std::filesystem::path& target() const { return target_; }
  int fd() const { return fd_; }

 private:
  std::filesystem::path target_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// `text` as the whole of `file`, through an AtomicFile.
void write_whole_file(const std::filesystem::path& file, std::string_view text);

// New directory entries (a rename, a new file) are durable once their directory is fsync'ed.
void sync_directory(const std::filesystem::path& dir);

}  // namespace mlph::core
