// Finding, checking, loading and validating plug-in libraries.
#pragma once

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlph/plugin.h"

namespace mlph::core {

// One clear line: the file (or name), what is wrong, and what to do about it.
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* kind_name(MLPH_PluginKind kind);

// A library opened with dlopen, closed with the last owner. open() throws LoadError with the
// dynamic loader's own reason (dlerror), naming the file.
class SharedLibrary {
 public:
  static SharedLibrary open(const std::filesystem::path& file);
  void* symbol(const char* name) const;  // nullptr when the library does not export it

 private:
  struct Close {
    void operator()(void* handle) const;
  };
  std::unique_ptr<void, Close> handle_;
};

// Loading a library runs its initializers, so the core loads only files that nobody but their owner
// (this user or root) can change: the file and its directory must be owned by this user or root and
// writable by no one else (a group of the owner's own, with no other members, counts as the owner),
// and so must every directory above them, except that a sticky directory (/tmp) may be writable by
// all. Returns "" for such a file (`file` as an absolute path without symbolic links), else the
// reason, naming the file or directory at fault.
std::string untrusted_reason(const std::filesystem::path& file);

// A validated plug-in. The library stays loaded for as long as this object lives, so keep it
// alive longer than every object the plug-in created.
struct LoadedPlugin {
  SharedLibrary library;
  const MLPH_Plugin* descriptor = nullptr;
  std::filesystem::path file;
  std::string file_hash;  // FNV-1a 64 of the file's bytes, logged so a run names exactly what it ran

  template <class Api>
  const Api* api() const {
    return static_cast<const Api*>(descriptor->api);
  }
};

// Whether a backend plug-in has the members ABI 1.6 appended to MLPH_BackendApi, all at once
// (create_with, attributes, alloc_input, free_input, read_loss; each may still be NULL): the plug-in
// says it is that new and its table is that large. The core's one gate for them (the session, the
// input buffers).
bool backend_is_1_6(const LoadedPlugin& backend);

// What --list-plugins prints for each library found.
struct ScanEntry {
  std::filesystem::path file;
  bool ok = false;
  std::string error;  // when !ok
  MLPH_PluginKind kind{};
  std::string name, version, description;
  uint32_t abi_major = 0, abi_minor = 0;
};

// Search order: the explicit directories (--plugin-dir), then MLPERF_PLUGIN_PATH (':'-separated),
// then the directory beside the running program (../lib/mlperf-hpc-<ABI major>).
std::vector<std::filesystem::path> default_search_path(const std::vector<std::filesystem::path>& explicit_dirs);

std::string plugin_file_name(MLPH_PluginKind kind, const std::string& name);

class PluginLoader {
 public:
  explicit PluginLoader(std::vector<std::filesystem::path> search_path) : search_path_(std::move(search_path)) {}

  // Finds libmlph-<kind>-<name>.so on the search path and validates it; throws LoadError.
  LoadedPlugin load(MLPH_PluginKind kind, const std::string& name) const;
  // Checks one file (untrusted_reason; MLPERF_PLUGIN_TRUST=all skips that), then loads and validates it,
  // expecting `kind` and `name`.
  static LoadedPlugin load_file(const std::filesystem::path& file, MLPH_PluginKind kind, const std::string& name);
  // Every libmlph-*.so on the search path, valid or not; never throws for a bad library.
  std::vector<ScanEntry> scan() const;

  const std::vector<std::filesystem::path>& search_path() const { return search_path_; }

 private:
  std::vector<std::filesystem::path> search_path_;
};

}  // namespace mlph::core
