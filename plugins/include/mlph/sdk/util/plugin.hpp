// The descriptor every plug-in library exports, in one line.
#pragma once

#include <memory>

#include "mlph/plugin.h"

namespace mlph::sdk::detail {
// The C++ object behind an opaque C handle, with the host that made it (errors are the host's).
template <class T>
struct Boxed {
  const MLPH_HostApi* host;
  std::unique_ptr<T> impl;
};
}  // namespace mlph::sdk::detail

// Defines `mlph_plugin()`, the library's only exported symbol. API is an expression giving a
// pointer to the kind's table (e.g. mlph::sdk::backend_api<MyBackend>()).
#define MLPH_DEFINE_PLUGIN(KIND, NAME, VERSION, DESCRIPTION, API)                                       \
  extern "C" MLPH_EXPORT const MLPH_Plugin* mlph_plugin(void) {                                         \
    static const MLPH_Plugin descriptor = {sizeof(MLPH_Plugin), nullptr, MLPH_ABI_MAJOR, MLPH_ABI_MINOR, \
                                           KIND, NAME, VERSION, DESCRIPTION, (API)};                    \
    return &descriptor;                                                                                 \
  }
