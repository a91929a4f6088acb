#include "mlph/core/mllog.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>

namespace mlph::core {

std::string relative_source(const char* file) {
  std::string path = file;
#if defined(MLPH_SOURCE_ROOT) && defined(MLPH_BUILD_ROOT)
  // A compiler cache may hand the compiler paths relative to the build tree (ccache's base_dir):
  // those are resolved where the build ran before the source root is taken off.
  if (!path.empty() && path.front() != '/')
    path = (std::filesystem::path(MLPH_BUILD_ROOT) / path).lexically_normal().string();
  const std::string root = MLPH_SOURCE_ROOT "/";
  if (path.rfind(root, 0) == 0) path = path.substr(root.size());
#endif
  return path;
}

MlLogger::MlLogger(const std::filesystem::path& path, bool echo) : path_(path), echo_(echo) {
  if (!path.empty()) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    file_.emplace(path);
    file_->commit();  // named at once, and written on: a crash leaves the log where it is looked for
  }
}

MlLogger::~MlLogger() {
  try {
    if (file_) file_->sync();
  } catch (const OutputError&) {  // the lines are written; only their durability is in doubt
  }
}

void MlLogger::event(const std::string& key, const Json& value, const Metadata& metadata, std::source_location where) {
  write("POINT_IN_TIME", key, value, metadata, where);
}
void MlLogger::start(const std::string& key, const Json& value, const Metadata& metadata, std::source_location where) {
  write("INTERVAL_START", key, value, metadata, where);
}
void MlLogger::end(const std::string& key, const Json& value, const Metadata& metadata, std::source_location where) {
  write("INTERVAL_END", key, value, metadata, where);
}

std::string MlLogger::format_line(const char* event_type, const std::string& key, const Json& value,
                                  const Metadata& metadata, const std::source_location& where, const std::string& time_ms) {
  std::string meta = fmt::format("\"file\": {}, \"lineno\": {}", json(relative_source(where.file_name())).text,
                                 where.line());
  for (const auto& [k, v] : metadata) meta += fmt::format(", {}: {}", json(k).text, v.text);
  return fmt::format(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {}, \"event_type\": \"{}\", \"key\": {}, "
                     "\"value\": {}, \"metadata\": {{{}}}}}\n",
                     time_ms, event_type, json(key).text, value.text, meta);
}

MlLogger::LineTemplate MlLogger::line_template(const char* event_type, const std::string& key, Metadata metadata,
                                               const std::string& text_key, std::source_location where) const {
  metadata.emplace_back(text_key, json_raw("\"\x02\""));  // the marks cannot come out of json()
  const std::string line = format_line(event_type, key, {}, metadata, where, "\x01");
  const size_t time = line.find('\x01'), text = line.find('\x02');
  return {line.substr(0, time), line.substr(time + 1, text - time - 1), line.substr(text + 1)};
}

size_t MlLogger::refused_lines() const {
  const std::lock_guard lock(mutex_);
  return refused_;
}

void MlLogger::write(const char* event_type, const std::string& key, const Json& value, const Metadata& metadata,
                     const std::source_location& where) {
  const long long time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  const std::string line = format_line(event_type, key, value, metadata, where, std::to_string(time_ms));
  const std::lock_guard lock(mutex_);
  if (ended_) {
    ++refused_;
    return;
  }
  ended_ = key == "run_stop";
  try {
    if (file_) file_->write(line);  // one write(2) per line, as the crash handler's last words
  } catch (const OutputError&) {  // a full disk costs log lines, not the run (the log then fails the checker)
  }
  if (echo_) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
}

}  // namespace mlph::core
