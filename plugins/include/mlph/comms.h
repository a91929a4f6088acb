/* mlperf-hpc plug-in ABI: communication between ranks (local, mpi, nccl). */
#ifndef MLPH_COMMS_H
#define MLPH_COMMS_H

#include "mlph/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MLPH_Comm MLPH_Comm;

typedef enum MLPH_ReduceOp { MLPH_REDUCE_SUM = 0, MLPH_REDUCE_AVERAGE = 1, MLPH_REDUCE_MAX = 2 } MLPH_ReduceOp;

typedef struct MLPH_Topology {
  size_t struct_size;
  const MLPH_Extension* ext;
  int32_t rank;
  int32_t size;
  int32_t local_rank;
  int32_t local_size; /* ranks on this node */
  int32_t nodes;
} MLPH_Topology;

typedef struct MLPH_CommsApi {
  size_t struct_size;
  const MLPH_Extension* ext;
  /* `timeout_s` bounds every collective: a dead or hung peer becomes MLPH_DEADLINE_EXCEEDED or
   * MLPH_UNAVAILABLE naming the rank, never a hang. */
  MLPH_Error* (*create)(const MLPH_HostApi* host, const MLPH_KeyValue* options, size_t n_options,
                        MLPH_Comm** out);
  void (*destroy)(MLPH_Comm* comm);
  MLPH_Error* (*topology)(MLPH_Comm* comm, MLPH_Topology* out);
  /* In place over `count` elements of host memory. */
  MLPH_Error* (*allreduce)(MLPH_Comm* comm, void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op);
  MLPH_Error* (*broadcast)(MLPH_Comm* comm, void* data, size_t bytes, int32_t root);
  /* `recv` holds size * bytes_per_rank bytes, rank-major. */
  MLPH_Error* (*allgather)(MLPH_Comm* comm, const void* send, void* recv, size_t bytes_per_rank);
  MLPH_Error* (*barrier)(MLPH_Comm* comm);
} MLPH_CommsApi;

/* What a backend receives at compile time: the table and the communicator, both borrowed. */
typedef struct MLPH_CommsHandle {
  size_t struct_size;
  const MLPH_Extension* ext;
  const MLPH_CommsApi* api;
  MLPH_Comm* comm;
} MLPH_CommsHandle;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_COMMS_H */
