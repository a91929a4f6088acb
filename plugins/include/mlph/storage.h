/* mlperf-hpc plug-in ABI: storage (posix, stage): listing, reading, staging bytes. */
#ifndef MLPH_STORAGE_H
#define MLPH_STORAGE_H

#include "mlph/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MLPH_Storage MLPH_Storage;

/* Caller-provided destination: returns a buffer of `bytes` that the caller owns, or NULL. */
typedef void* (*MLPH_AllocFn)(void* ctx, size_t bytes);
/* Receives one path per call; the string lives only for the call. */
typedef void (*MLPH_PathFn)(void* ctx, const char* path);

typedef struct MLPH_IoStats {
  size_t struct_size;
  const MLPH_Extension* ext;
  uint64_t bytes_read;
  uint64_t files_read;
  double read_seconds;
} MLPH_IoStats;

typedef struct MLPH_StorageApi {
  size_t struct_size;
  const MLPH_Extension* ext;
  MLPH_Error* (*create)(const MLPH_HostApi* host, const MLPH_KeyValue* options, size_t n_options,
                        MLPH_Storage** out);
  void (*destroy)(MLPH_Storage* storage);
  /* Calls `each` for every regular file in `dir` whose name ends in `suffix` ("" = all), sorted by
   * name. A missing or unreadable directory is MLPH_NOT_FOUND naming it. */
  MLPH_Error* (*list)(MLPH_Storage* storage, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx);
  /* Reads the whole file into memory obtained from `alloc`; *size receives its length. */
  MLPH_Error* (*read)(MLPH_Storage* storage, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size);
  MLPH_Error* (*stats)(MLPH_Storage* storage, MLPH_IoStats* out);
} MLPH_StorageApi;

/* What a workload receives to read its dataset: the table and the instance, both borrowed. */
typedef struct MLPH_StorageHandle {
  size_t struct_size;
  const MLPH_Extension* ext;
  const MLPH_StorageApi* api;
  MLPH_Storage* storage;
} MLPH_StorageHandle;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_STORAGE_H */
