/* mlperf-hpc plug-in ABI: storage (posix, stage): listing, reading, staging bytes. */
#ifndef MLPH_STORAGE_H
#define MLPH_STORAGE_H

#include "mlph/comms.h"
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

/* What one rank's `stage` call did (ABI 1.1). Byte counts are this rank's; seconds are wall time of
 * the whole call on this rank, collectives included. */
typedef struct MLPH_StageStats {
  size_t struct_size;
  const MLPH_Extension* ext;
  uint64_t bytes_read;    /* from the source: archive bytes for packed data, else file bytes */
  uint64_t bytes_written; /* to the staging target: the files as the workload will read them */
  uint64_t files;         /* files this rank wrote */
  double seconds;
  /* How the ranks that now list the same staged files deal them out: reader `shard_index` of
   * `shard_count` takes files[shard_index::shard_count] of each listing. The staged copy is shared by
   * the ranks of a node, so this is (local_rank, local_size) (the reference's sharding after staging). */
  int32_t shard_index;
  int32_t shard_count;
} MLPH_StageStats;

typedef struct MLPH_StorageApi {
  size_t struct_size;
  const MLPH_Extension* ext;
  MLPH_Error* (*create)(const MLPH_HostApi* host, const MLPH_KeyValue* options, size_t n_options,
                        MLPH_Storage** out);
  void (*destroy)(MLPH_Storage* storage);
  /* Calls `each` for every regular file in `dir` whose name ends in `suffix` ("" = all), sorted by
   * name. A missing or unreadable directory is MLPH_NOT_FOUND naming it. */
  MLPH_Error* (*list)(MLPH_Storage* storage, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx);
  /* Reads the whole file into memory obtained from `alloc`; *size receives its length. Only a regular
   * file is read: anything else (FIFO, directory, device) is an error naming it, returned without
   * blocking. `alloc` returning NULL refuses the size (an error). */
  MLPH_Error* (*read)(MLPH_Storage* storage, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size);
  MLPH_Error* (*stats)(MLPH_Storage* storage, MLPH_IoStats* out);
  /* ABI 1.1, optional (NULL: the plug-in does not stage; callers check struct_size first).
   * Collective over `comms` (borrowed, every rank calls it): copies this rank's shard of each
   * subdirectory of `source_dir` (file number i of the sorted names goes to rank i % size; files
   * past the last multiple of size are not staged) to storage that is local to the node, then waits
   * for every rank. A subdirectory may instead hold a packed archive, which is unpacked. Sizes, and
   * checksums where the source has a manifest, are verified. The source is never modified.
   * Afterwards `list` of `source_dir/<sub>` lists the staged copies of the node's files and `read`
   * reads them; the copy is removed by `destroy`. Errors name the rank and the file; when any rank
   * fails, every rank returns an error (MLPH_ABORTED on the ranks that did not fail themselves).
   * *out (struct_size set by the caller) receives this rank's figures. */
  MLPH_Error* (*stage)(MLPH_Storage* storage, const char* source_dir, const MLPH_CommsHandle* comms,
                       MLPH_StageStats* out);
  /* ABI 1.4, optional (NULL: the plug-in leaves nothing behind; callers check struct_size first).
   * The process is about to end without destroying this instance (a signal during a long step, a
   * rank that failed and leaves at once rather than wait for its peers in MPI_Finalize): remove now
   * what `destroy` would have removed (the staged copy). May be called from another thread while
   * calls on the instance are in flight (they may fail from then on) and while `stage` runs; the
   * instance creates nothing afterwards. Nothing but the process's exit follows. */
  void (*abandon)(MLPH_Storage* storage);
  /* ABI 1.5, optional (NULL: whole files only; callers check struct_size first). Reads `bytes` bytes
   * at byte `offset` of the file into `dst` (caller-owned): a rank of a spatially split sample reads
   * only its part. As for `read`, only a regular file is read, without blocking; a range reaching
   * past the end of the file is MLPH_DATA_LOSS naming the file. */
  MLPH_Error* (*read_range)(MLPH_Storage* storage, const char* path, uint64_t offset, size_t bytes, void* dst);
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
