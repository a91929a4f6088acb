#include "mlph/core/plugin_loader.hpp"

#include <fmt/format.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

namespace mlph::core {
namespace fs = std::filesystem;

const char* kind_name(MLPH_PluginKind kind) {
  switch (kind) {
    case MLPH_KIND_WORKLOAD: return "workload";
    case MLPH_KIND_BACKEND: return "backend";
    case MLPH_KIND_COMMS: return "comms";
    case MLPH_KIND_STORAGE: return "storage";
  }
  return "unknown";
}

std::string plugin_file_name(MLPH_PluginKind kind, const std::string& name) {
  return fmt::format("libmlph-{}-{}.so", kind_name(kind), name);
}

std::vector<fs::path> default_search_path(const std::vector<fs::path>& explicit_dirs) {
  std::vector<fs::path> dirs = explicit_dirs;
  if (const char* env = std::getenv("MLPERF_PLUGIN_PATH")) {
    std::string list = env;
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) dirs.emplace_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  fs::path program_dir = boost::dll::program_location().parent_path().string();
  dirs.push_back(program_dir / ".." / fmt::format("lib/mlperf-hpc-{}", MLPH_ABI_MAJOR));
  return dirs;
}

namespace {

std::string hash_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  uint64_t h = 0xcbf29ce484222325ULL;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buffer[i])) * 0x100000001b3ULL;
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

// The smallest table each kind must provide under ABI 1.0, and the names of its required members.
struct TableRule {
  size_t min_size;
  std::vector<std::pair<const char*, size_t>> required;  // name, offset of a function pointer
};

#define MLPH_MEMBER(T, m) {#m, offsetof(T, m)}
TableRule table_rule(MLPH_PluginKind kind) {
  switch (kind) {
    case MLPH_KIND_BACKEND:
      return {MLPH_STRUCT_SIZE(MLPH_BackendApi, read_gradient),
              {MLPH_MEMBER(MLPH_BackendApi, create), MLPH_MEMBER(MLPH_BackendApi, destroy),
               MLPH_MEMBER(MLPH_BackendApi, compile), MLPH_MEMBER(MLPH_BackendApi, model_destroy),
               MLPH_MEMBER(MLPH_BackendApi, train_step), MLPH_MEMBER(MLPH_BackendApi, eval_step),
               MLPH_MEMBER(MLPH_BackendApi, read_parameter), MLPH_MEMBER(MLPH_BackendApi, write_parameter)}};
    case MLPH_KIND_WORKLOAD:
      return {MLPH_STRUCT_SIZE(MLPH_WorkloadApi, generate_data),
              {MLPH_MEMBER(MLPH_WorkloadApi, params), MLPH_MEMBER(MLPH_WorkloadApi, create),
               MLPH_MEMBER(MLPH_WorkloadApi, destroy), MLPH_MEMBER(MLPH_WorkloadApi, describe),
               MLPH_MEMBER(MLPH_WorkloadApi, build_graph), MLPH_MEMBER(MLPH_WorkloadApi, dataset_open),
               MLPH_MEMBER(MLPH_WorkloadApi, dataset_close), MLPH_MEMBER(MLPH_WorkloadApi, dataset_size),
               MLPH_MEMBER(MLPH_WorkloadApi, dataset_read), MLPH_MEMBER(MLPH_WorkloadApi, learning_rate),
               MLPH_MEMBER(MLPH_WorkloadApi, metric)}};
    case MLPH_KIND_COMMS:
      return {MLPH_STRUCT_SIZE(MLPH_CommsApi, barrier),
              {MLPH_MEMBER(MLPH_CommsApi, create), MLPH_MEMBER(MLPH_CommsApi, destroy),
               MLPH_MEMBER(MLPH_CommsApi, topology), MLPH_MEMBER(MLPH_CommsApi, allreduce),
               MLPH_MEMBER(MLPH_CommsApi, broadcast), MLPH_MEMBER(MLPH_CommsApi, allgather),
               MLPH_MEMBER(MLPH_CommsApi, barrier)}};
    case MLPH_KIND_STORAGE:
      return {MLPH_STRUCT_SIZE(MLPH_StorageApi, stats),
              {MLPH_MEMBER(MLPH_StorageApi, create), MLPH_MEMBER(MLPH_StorageApi, destroy),
               MLPH_MEMBER(MLPH_StorageApi, list), MLPH_MEMBER(MLPH_StorageApi, read),
               MLPH_MEMBER(MLPH_StorageApi, stats)}};
  }
  return {};
}
#undef MLPH_MEMBER

// A function, not an inline comparison: with MLPH_ABI_MIN_MINOR == 0 the latter is "always false".
bool older_than(uint32_t minor, uint32_t oldest) { return minor < oldest; }

bool known_kind(int kind) { return kind >= MLPH_KIND_WORKLOAD && kind <= MLPH_KIND_STORAGE; }

// Checks everything the descriptor promises before the core calls anything in it.
void validate(const fs::path& file, const MLPH_Plugin* d, MLPH_PluginKind kind, const std::string& name) {
  const std::string where = file.string();
  if (!d) throw LoadError(fmt::format("{}: mlph_plugin() returned NULL", where));
  if (d->struct_size < MLPH_STRUCT_SIZE(MLPH_Plugin, api))
    throw LoadError(fmt::format("{}: plug-in descriptor is {} bytes, ABI {}.{} requires at least {}", where,
                                d->struct_size, MLPH_ABI_MAJOR, MLPH_ABI_MINOR, MLPH_STRUCT_SIZE(MLPH_Plugin, api)));
  if (d->abi_major != MLPH_ABI_MAJOR)
    throw LoadError(fmt::format("{}: built for plug-in ABI {}.{}, but this mlperf-run speaks ABI {}.{}; "
                                "major versions must match: rebuild the plug-in against ABI {}",
                                where, d->abi_major, d->abi_minor, MLPH_ABI_MAJOR, MLPH_ABI_MINOR, MLPH_ABI_MAJOR));
  if (older_than(d->abi_minor, MLPH_ABI_MIN_MINOR))
    throw LoadError(fmt::format("{}: built for plug-in ABI {}.{}, older than the oldest supported {}.{}", where,
                                d->abi_major, d->abi_minor, MLPH_ABI_MAJOR, MLPH_ABI_MIN_MINOR));
  if (!known_kind(d->kind))
    throw LoadError(fmt::format("{}: unknown plug-in kind {}", where, static_cast<int>(d->kind)));
  if (d->kind != kind)
    throw LoadError(fmt::format("{}: is a {} plug-in, expected a {} plug-in", where, kind_name(d->kind), kind_name(kind)));
  if (!d->name || name != d->name)
    throw LoadError(fmt::format("{}: calls itself '{}', but its file name says '{}'", where, d->name ? d->name : "(null)",
                                name));
  if (!d->api) throw LoadError(fmt::format("{}: has no {} function table", where, kind_name(kind)));
  const TableRule rule = table_rule(kind);
  const size_t table_size = *static_cast<const size_t*>(d->api);
  if (table_size < rule.min_size)
    throw LoadError(fmt::format("{}: {} function table is {} bytes, ABI {}.{} requires at least {}", where,
                                kind_name(kind), table_size, MLPH_ABI_MAJOR, MLPH_ABI_MIN_MINOR, rule.min_size));
  for (const auto& [member, offset] : rule.required) {
    void* fn = nullptr;
    std::memcpy(&fn, static_cast<const char*>(d->api) + offset, sizeof fn);
    if (!fn) throw LoadError(fmt::format("{}: {} table lacks the required function '{}'", where, kind_name(kind), member));
  }
}

// Parses libmlph-<kind>-<name>.so; false for any other file name.
bool parse_file_name(const fs::path& file, MLPH_PluginKind& kind, std::string& name) {
  const std::string base = file.filename().string();
  const std::string prefix = "libmlph-", suffix = ".so";
  if (base.size() <= prefix.size() + suffix.size() || base.rfind(prefix, 0) != 0 ||
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string stem = base.substr(prefix.size(), base.size() - prefix.size() - suffix.size());
  for (MLPH_PluginKind k : {MLPH_KIND_WORKLOAD, MLPH_KIND_BACKEND, MLPH_KIND_COMMS, MLPH_KIND_STORAGE}) {
    const std::string head = std::string(kind_name(k)) + "-";
    if (stem.rfind(head, 0) == 0 && stem.size() > head.size()) {
      kind = k;
      name = stem.substr(head.size());
      return true;
    }
  }
  return false;
}

}  // namespace

LoadedPlugin PluginLoader::load_file(const fs::path& file, MLPH_PluginKind kind, const std::string& name) {
  LoadedPlugin plugin;
  plugin.file = file;
  boost::dll::fs::error_code ec;
  plugin.library.load(file.string(), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec)
    throw LoadError(fmt::format("{}: cannot load: {} (a missing symbol, or a library built for another version?)",
                                file.string(), ec.message()));
  if (!plugin.library.has(MLPH_ENTRY_SYMBOL))
    throw LoadError(fmt::format("{}: not an mlperf-hpc plug-in: it exports no '{}' symbol", file.string(),
                                MLPH_ENTRY_SYMBOL));
  auto entry = plugin.library.get<const MLPH_Plugin*()>(MLPH_ENTRY_SYMBOL);
  plugin.descriptor = entry();
  validate(file, plugin.descriptor, kind, name);
  plugin.file_hash = hash_file(file);
  return plugin;
}

LoadedPlugin PluginLoader::load(MLPH_PluginKind kind, const std::string& name) const {
  const std::string file_name = plugin_file_name(kind, name);
  std::string looked;
  for (const fs::path& dir : search_path_) {
    const fs::path candidate = dir / file_name;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return load_file(fs::weakly_canonical(candidate), kind, name);
    looked += (looked.empty() ? "" : ", ") + dir.lexically_normal().string();
  }
  throw LoadError(fmt::format("{} plug-in '{}' not found: no {} in {} (see --list-plugins, --plugin-dir, "
                              "MLPERF_PLUGIN_PATH)",
                              kind_name(kind), name, file_name, looked));
}

std::vector<ScanEntry> PluginLoader::scan() const {
  std::vector<ScanEntry> entries;
  std::set<std::string> seen;  // the first file of a name on the search path wins, as in load()
  for (const fs::path& dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& item : fs::directory_iterator(dir, ec)) files.push_back(item.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      ScanEntry e;
      std::string name;
      if (!parse_file_name(file, e.kind, name) || !seen.insert(file.filename().string()).second) continue;
      e.file = fs::weakly_canonical(file);
      e.name = name;
      try {
        LoadedPlugin p = load_file(e.file, e.kind, name);
        e.ok = true;
        e.version = p.descriptor->version ? p.descriptor->version : "";
        e.description = p.descriptor->description ? p.descriptor->description : "";
        e.abi_major = p.descriptor->abi_major;
        e.abi_minor = p.descriptor->abi_minor;
      } catch (const LoadError& error) {
        e.error = error.what();
      }
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

}  // namespace mlph::core
