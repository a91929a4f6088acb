/* mlperf-hpc plug-in ABI: the one symbol every plug-in library exports.
 *
 * A library named  libmlph-<kind>-<name>.so  exports  `const MLPH_Plugin* mlph_plugin(void)`.
 * The core checks, before calling anything else: abi_major == MLPH_ABI_MAJOR, abi_minor >=
 * MLPH_ABI_MIN_MINOR, `kind` and `name` match the file name, `api` is non-NULL and its
 * struct_size covers every member the core requires. The descriptor is static data that lives
 * as long as the library is loaded; the core unloads a library only after destroying every
 * object it produced.
 */
#ifndef MLPH_PLUGIN_H
#define MLPH_PLUGIN_H

#include "mlph/backend.h"
#include "mlph/comms.h"
#include "mlph/storage.h"
#include "mlph/workload.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum MLPH_PluginKind {
  MLPH_KIND_WORKLOAD = 1,
  MLPH_KIND_BACKEND = 2,
  MLPH_KIND_COMMS = 3,
  MLPH_KIND_STORAGE = 4
} MLPH_PluginKind;

typedef struct MLPH_Plugin {
  size_t struct_size;
  const MLPH_Extension* ext;
  uint32_t abi_major;  /* the MLPH_ABI_MAJOR the plug-in was built with */
  uint32_t abi_minor;  /* the MLPH_ABI_MINOR the plug-in was built with */
  MLPH_PluginKind kind;
  const char* name;    /* lower case, e.g. "reference"; equals <name> in the file name */
  const char* version; /* the plug-in's own version */
  const char* description;
  /* MLPH_WorkloadApi / MLPH_BackendApi / MLPH_CommsApi / MLPH_StorageApi, by kind. Each starts
   * with size_t struct_size. */
  const void* api;
} MLPH_Plugin;

#define MLPH_ENTRY_SYMBOL "mlph_plugin"
typedef const MLPH_Plugin* (*MLPH_EntryFn)(void);

#if defined(_WIN32)
#define MLPH_EXPORT __declspec(dllexport)
#else
#define MLPH_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif
#endif /* MLPH_PLUGIN_H */
