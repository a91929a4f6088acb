// MLPerf logging, byte for byte as mlperf_logging's mllog writes it:
//   :::MLLOG {"namespace": "", "time_ms": 1695625582386, "event_type": "POINT_IN_TIME", "key": "seed",
//             "value": 42, "metadata": {"file": "core/src/runner.cpp", "lineno": 120}}
// Every line is flushed as it is written, so a crash still leaves a readable log.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/json.hpp"

namespace mlph::core {

using Metadata = std::vector<std::pair<std::string, Json>>;

class MlLogger {
 public:
  // Writes to `path` when it is not empty (a new file renamed over what was there: atomic_file.hpp),
  // and to stdout when `echo`; neither: a disabled logger (ranks other than 0).
  MlLogger(const std::filesystem::path& path, bool echo);
  ~MlLogger();
  MlLogger(const MlLogger&) = delete;
  MlLogger& operator=(const MlLogger&) = delete;

  void event(const std::string& key, const Json& value = {}, const Metadata& metadata = {},
             std::source_location where = std::source_location::current());
  void start(const std::string& key, const Json& value = {}, const Metadata& metadata = {},
             std::source_location where = std::source_location::current());
  void end(const std::string& key, const Json& value = {}, const Metadata& metadata = {},
           std::source_location where = std::source_location::current());

  const std::filesystem::path& path() const { return path_; }
  // run_stop is the log's last line: once it is written (by the run, or by the signal watcher's last
  // words) every later line is refused, not written; this counts them.
  size_t refused_lines() const;

  // A line to be written later by code that cannot format (the crash handler, with write(2) to
  // fd()): its text cut where the time and the text of metadata `text_key` (after `metadata`) go.
  struct LineTemplate {
    std::string before_time, before_text, after_text;
  };
  LineTemplate line_template(const char* event_type, const std::string& key, Metadata metadata,
                             const std::string& text_key,
                             std::source_location where = std::source_location::current()) const;
  int fd() const { return file_ ? file_->fd() : -1; }

 private:
  void write(const char* event_type, const std::string& key, const Json& value, const Metadata& metadata,
             const std::source_location& where);
  static std::string format_line(const char* event_type, const std::string& key, const Json& value,
                                 const Metadata& metadata, const std::source_location& where, const std::string& time_ms);
  std::filesystem::path path_;
  std::optional<AtomicFile> file_;
  bool echo_;
  mutable std::mutex mutex_;  // the run's thread and the signal watcher's both write
  bool ended_ = false;        // run_stop written
  size_t refused_ = 0;
};

// The source file as logged: relative to the project root, so it is stable across checkouts.
std::string relative_source(const char* file);

}  // namespace mlph::core
