// Write a storage plug-in as a C++ class; `storage_api<Impl>()` generates the C table.
#pragma once

#include <memory>

#include "mlph/sdk/error.hpp"
#include "mlph/sdk/options.hpp"
#include "mlph/sdk/plugin.hpp"
#include "mlph/storage.h"

namespace mlph::sdk {

class Storage {
 public:
  virtual ~Storage() = default;
  virtual void list(const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) = 0;
  virtual size_t read(const char* path, MLPH_AllocFn alloc, void* ctx) = 0;
  virtual MLPH_IoStats stats() = 0;
};

namespace detail {
using StorageBox = Boxed<Storage>;
inline StorageBox* unbox(MLPH_Storage* s) { return reinterpret_cast<StorageBox*>(s); }
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
  };
  return &api;
}

}  // namespace mlph::sdk
