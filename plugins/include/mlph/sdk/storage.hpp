// Write a storage plug-in as a C++ class; `storage_api<Impl>()` generates the C table.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mlph/sdk/error.hpp"
#include "mlph/sdk/options.hpp"
#include "mlph/sdk/plugin.hpp"
#include "mlph/storage.h"

namespace mlph::sdk {

// ---- using a storage handle (workloads) ------------------------------------------------------
// Errors throw (sdk::check) with `context` in front, e.g. "DeepCAM data: ...".

// The files of `dir` whose names end in `suffix`, sorted by name (the storage plug-in sorts).
inline std::vector<std::string> list_files(const MLPH_HostApi* host, const MLPH_StorageHandle& storage,
                                           const std::string& dir, const char* suffix, const std::string& context) {
  std::vector<std::string> files;
  auto collect = [](void* ctx, const char* path) { static_cast<std::vector<std::string>*>(ctx)->push_back(path); };
  check(host, storage.api->list(storage.storage, dir.c_str(), suffix, collect, &files), context);
  return files;
}

// The whole file.
inline std::vector<std::byte> read_file(const MLPH_HostApi* host, const MLPH_StorageHandle& storage,
                                        const std::string& path, const std::string& context) {
  std::vector<std::byte> bytes;
  auto alloc = [](void* ctx, size_t size) -> void* {
    auto* buffer = static_cast<std::vector<std::byte>*>(ctx);
    buffer->resize(size);
    return buffer->data();
  };
  size_t size = 0;
  check(host, storage.api->read(storage.storage, path.c_str(), alloc, &bytes, &size), context);
  bytes.resize(size);
  return bytes;
}

// ---- writing a storage plug-in ---------------------------------------------------------------

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) = 0;
  virtual size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) = 0;
  virtual MLPH_IoStats stats() = 0;
  // Optional (ABI 1.1): a class that stages defines
  //   MLPH_StageStats stage(const char* source_dir, const MLPH_CommsHandle& comms);
  // and storage_api<Impl>() fills the table's `stage`; otherwise it stays NULL (no staging).
};

template <class Impl>
concept Stages = requires(Impl& impl, const char* dir, const MLPH_CommsHandle& comms) {
  { impl.stage(dir, comms) } -> std::same_as<MLPH_StageStats>;
};

namespace detail {
using StorageBox = Boxed<Storage>;
inline StorageBox* unbox(MLPH_Storage* s) { return reinterpret_cast<StorageBox*>(s); }

// The table's `stage`: the class's stage() behind the C boundary, or NULL when it has none.
template <class Impl>
constexpr auto stage_entry() -> MLPH_Error* (*)(MLPH_Storage*, const char*, const MLPH_CommsHandle*, MLPH_StageStats*) {
  if constexpr (Stages<Impl>) {
    return [](MLPH_Storage* s, const char* dir, const MLPH_CommsHandle* comms, MLPH_StageStats* out) {
      return guard(unbox(s)->host, [&] {
        if (!comms || !out) fail(MLPH_INVALID_ARGUMENT, "stage: NULL comms or stats");
        const size_t caller_size = out->struct_size;
        MLPH_StageStats stats = static_cast<Impl&>(*unbox(s)->impl).stage(dir, *comms);
        stats.struct_size = caller_size;  // a 1.1 caller's struct may be larger than ours: write only ours
        std::memcpy(out, &stats, std::min(caller_size, sizeof stats));
      });
    };
  } else {
    return nullptr;
  }
}
}  // namespace detail

template <class Impl>
const MLPH_StorageApi* storage_api() {
  using namespace detail;
  static const MLPH_StorageApi api = {
      sizeof(MLPH_StorageApi),
      nullptr,
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Storage** out) {
        return guard(host, [&] {
          auto box = std::make_unique<StorageBox>(StorageBox{host, std::make_unique<Impl>(host, Options(kv, n))});
          *out = reinterpret_cast<MLPH_Storage*>(box.release());
        });
      },
      [](MLPH_Storage* s) { delete unbox(s); },
      [](MLPH_Storage* s, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) {
        return guard(unbox(s)->host, [&] { unbox(s)->impl->list(dir, suffix, each, ctx); });
      },
      [](MLPH_Storage* s, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size) {
        return guard(unbox(s)->host, [&] { *size = unbox(s)->impl->read(path, alloc, ctx); });
      },
      [](MLPH_Storage* s, MLPH_IoStats* out) {
        return guard(unbox(s)->host, [&] { *out = unbox(s)->impl->stats(); });
      },
      stage_entry<Impl>(),
  };
  return &api;
}

}  // namespace mlph::sdk
