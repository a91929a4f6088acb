#include "mlph/core/mllog.hpp"

#include <fmt/format.h>

#include <chrono>

#include "mlph/core/text_input.hpp"
#include "mlph/sdk/json.hpp"
#include <stdexcept>

namespace mlph::core {

Json json(double v) { return {sdk::json_number(v)}; }
Json json(long long v) { return {fmt::format("{}", v)}; }
Json json(int v) { return {fmt::format("{}", v)}; }
Json json(unsigned long long v) { return {fmt::format("{}", v)}; }
Json json(unsigned long v) { return {fmt::format("{}", v)}; }
Json json(bool v) { return {v ? "true" : "false"}; }
Json json(const char* v) { return json(std::string(v)); }
Json json(const std::string& v) {
  std::string out = "\"";
  out += escaped(v);
  out += '"';
  return {out};
}
Json json_list(const std::vector<double>& v, bool integers) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? ", " : "") + (integers ? fmt::format("{}", static_cast<long long>(v[i])) : json(v[i]).text);
  return {out + "]"};
}
Json json_raw(std::string encoded) { return {std::move(encoded)}; }

std::string relative_source(const char* file) {
  std::string path = file;
#ifdef MLPH_SOURCE_ROOT
  const std::string root = MLPH_SOURCE_ROOT "/";
  if (path.rfind(root, 0) == 0) path = path.substr(root.size());
#endif
  return path;
}

MlLogger::MlLogger(const std::filesystem::path& path, bool echo) : path_(path), echo_(echo) {
  if (!path.empty()) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    file_ = std::fopen(path.c_str(), "w");
    if (!file_) throw std::runtime_error(fmt::format("{}: cannot open the MLPerf log for writing", path.string()));
  }
}

MlLogger::~MlLogger() {
  if (file_) std::fclose(file_);
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

void MlLogger::write(const char* event_type, const std::string& key, const Json& value, const Metadata& metadata,
                     const std::source_location& where) {
  const long long time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  std::string meta = fmt::format("\"file\": {}, \"lineno\": {}", json(relative_source(where.file_name())).text,
                                 where.line());
  for (const auto& [k, v] : metadata) meta += fmt::format(", {}: {}", json(k).text, v.text);
  const std::string line =
      fmt::format(":::MLLOG {{\"namespace\": \"\", \"time_ms\": {}, \"event_type\": \"{}\", \"key\": {}, "
                  "\"value\": {}, \"metadata\": {{{}}}}}\n",
                  time_ms, event_type, json(key).text, value.text, meta);
  if (file_) {
    std::fputs(line.c_str(), file_);
    std::fflush(file_);
  }
  if (echo_) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
}

}  // namespace mlph::core
