#include "mlph/core/plugin_loader.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>

#include "mlph/backend.h"
#include "mlph/core/fnv1a.hpp"

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

void SharedLibrary::Close::operator()(void* handle) const { ::dlclose(handle); }

SharedLibrary SharedLibrary::open(const fs::path& file) {
  ::dlerror();
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = ::dlerror();
    std::string reason = error ? error : "the dynamic loader gave no reason";
    const std::string prefix = file.string() + ": ";  // dlerror names the file first when it is at fault
    if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
    throw LoadError(fmt::format("{}: cannot load: {}", file.string(), reason));
  }
  SharedLibrary library;
  library.handle_.reset(handle);
  return library;
}

void* SharedLibrary::symbol(const char* name) const { return ::dlsym(handle_.get(), name); }

namespace {

// Whether the group of `st` is its owner's own (a user private group: the owner's primary group,
// named as the owner, with no other members), whose write permission gives no one else a way in.
bool owners_private_group(const struct stat& st) {
  std::vector<char> buffer(1 << 16);
  passwd user{};
  passwd* found_user = nullptr;
  group group{};
  ::group* found_group = nullptr;
  if (::getpwuid_r(st.st_uid, &user, buffer.data(), buffer.size() / 2, &found_user) != 0 || !found_user ||
      ::getgrgid_r(st.st_gid, &group, buffer.data() + buffer.size() / 2, buffer.size() / 2, &found_group) != 0 ||
      !found_group)
    return false;
  if (user.pw_gid != st.st_gid || std::string_view(group.gr_name) != user.pw_name) return false;
  for (char** member = group.gr_mem; *member; ++member)
    if (std::string_view(*member) != user.pw_name) return false;
  return true;
}

// Why someone other than its owner, this user or root, could change `path`; "" when no one can.
// A sticky directory's entries can be renamed or removed only by their owners: when `sticky_is_safe`
// (a directory above the plug-in's), such a directory may be writable by all.
std::string who_else_can_change(const fs::path& path, bool sticky_is_safe) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno));
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return fmt::format("{} is owned by another user (uid {})", path.string(), st.st_uid);
  if (sticky_is_safe && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX)) return "";
  if (st.st_mode & S_IWOTH) return fmt::format("{} is writable by every user (mode {:04o})", path.string(), st.st_mode & 07777);
  if ((st.st_mode & S_IWGRP) && !owners_private_group(st))
    return fmt::format("{} is writable by its group (gid {}, mode {:04o})", path.string(), st.st_gid, st.st_mode & 07777);
  return "";
}

// MLPERF_PLUGIN_TRUST=all: load plug-ins whatever their owners and modes.
bool trust_every_file() {
  const char* value = std::getenv("MLPERF_PLUGIN_TRUST");
  if (!value || !*value) return false;
  if (std::string_view(value) == "all") return true;
  throw LoadError(fmt::format("MLPERF_PLUGIN_TRUST={}: the only setting is 'all' (load plug-ins whatever their "
                              "owners and modes); unset it to load only files no one else can change",
                              value));
}

std::string hash_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  Fnv1a hash;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) hash.add(buffer, static_cast<size_t>(in.gcount()));
  return "fnv1a64:" + hash.hex();
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

std::string untrusted_reason(const fs::path& file) {
  if (std::string why = who_else_can_change(file, false); !why.empty()) return why;
  const fs::path dir = file.parent_path();
  for (fs::path d = dir;; d = d.parent_path()) {
    if (std::string why = who_else_can_change(d, d != dir); !why.empty()) return why;
    if (d == d.parent_path()) return "";
  }
}

LoadedPlugin PluginLoader::load_file(const fs::path& path, MLPH_PluginKind kind, const std::string& name) {
  std::error_code ec;
  const fs::path file = fs::canonical(path, ec);  // what is checked is what is loaded: no link in between
  if (ec) throw LoadError(fmt::format("{}: cannot load: {}", path.string(), ec.message()));
  if (!fs::is_regular_file(file, ec))  // dlopen would wait forever on a FIFO
    throw LoadError(fmt::format("{}: cannot load: not a regular file", file.string()));
  if (!trust_every_file()) {
    if (const std::string why = untrusted_reason(file); !why.empty())
      throw LoadError(fmt::format("{}: not loaded: {}; plug-ins load only from files and directories that no one "
                                  "but their owner (you or root) can change (chmod go-w, or set "
                                  "MLPERF_PLUGIN_TRUST=all to load it anyway)",
                                  file.string(), why));
  }
  LoadedPlugin plugin;
  plugin.file = file;
  plugin.library = SharedLibrary::open(file);
  const auto entry = reinterpret_cast<const MLPH_Plugin* (*)()>(plugin.library.symbol(MLPH_ENTRY_SYMBOL));
  if (!entry)
    throw LoadError(fmt::format("{}: not an mlperf-hpc plug-in: it exports no '{}' symbol", file.string(),
                                MLPH_ENTRY_SYMBOL));
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
    if (fs::exists(candidate, ec)) return load_file(candidate, kind, name);
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

bool backend_is_1_6(const LoadedPlugin& backend) {
  return backend.descriptor->abi_minor >= 6 &&
         backend.api<MLPH_BackendApi>()->struct_size >= MLPH_STRUCT_SIZE(MLPH_BackendApi, read_loss);
}

}  // namespace mlph::core
