// Reading what people and other programs wrote: configs, YAML of log keys, MLPerf logs, system
// descriptions, checkpoint manifests. Files must be regular and of bounded size; YAML has a bounded
// node count, no anchors or aliases, and no key twice in a map; all are checked before anything grows. (An alias repeats a node without
// copying it: a few hundred bytes of YAML can stand for billions of nodes once walked, the
// "billion laughs"; and a node takes about 480 bytes of memory however little text it needs.)
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mlph::core {

// A file that is not what it should be, named with the reason.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A YAML text refused: at `line` (1-based) for `reason`, e.g. "invalid YAML: end of map not found".
class YamlError : public std::runtime_error {
 public:
  YamlError(int line, const std::string& reason);
  int line;
  std::string reason;
};

// Refused for its node count alone.
class YamlTooLarge : public YamlError {
 public:
  using YamlError::YamlError;
};

// The bounds. Real configs are a few KiB; the largest real MLPerf HPC log here (NVIDIA's v3.0
// CosmoFlow) is 188 KB: 740 lines of at most 313 bytes, 16,916 YAML nodes. A log may be 44 times
// that; its nodes, at about 480 bytes each, then take at most 480 MB.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;  // also a YAML of log keys, a system description
inline constexpr size_t kMaxConfigNodes = 100'000;
inline constexpr uint64_t kMaxLogBytes = uint64_t{8} << 20;
inline constexpr size_t kMaxLogLineBytes = size_t{1} << 20;
inline constexpr size_t kMaxLogNodes = 1'000'000;

// `text` with the escapes of a JSON string, without the quotes: one line whatever it holds (the MLPerf
// log's strings, and what a file said quoted in a message). Past `max_shown` bytes it is cut, "..." after.
std::string escaped(std::string_view text, size_t max_shown = std::string_view::npos);

// The whole of `file`, read with sdk::read_regular_file: refused (InputError naming it) unless a
// regular file of at most `max_bytes` (a FIFO without blocking). `what` names its kind when it is
// missing: "x.yaml: config file not found".
std::string read_text_file(const std::filesystem::path& file, uint64_t max_bytes, std::string_view what);

// The first YAML document of `text`. Refused (YamlError) when it is not YAML, holds an anchor or an
// alias or a key twice in one map (yaml-cpp would keep the first, Python's json the last), or
// (YamlTooLarge) more than `max_nodes` nodes: checked on the parser's events, before any node is built.
// `nodes`, if given, receives the node count.
YAML::Node load_yaml(const std::string& text, size_t max_nodes, size_t* nodes = nullptr);

}  // namespace mlph::core
