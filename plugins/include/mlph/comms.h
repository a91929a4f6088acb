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

/* ABI 1.1: the halo exchange that spatial partitioning needs.
 *
 * Every rank holds one block of a global row-major array. The first `grid_ndim` (k) dims are split
 * over a k-dim Cartesian grid of ranks, `grid[0] x ... x grid[k-1]` == the communicator's size, in
 * row-major rank order: rank = ((c0 * grid[1] + c1) * grid[2] + c2) ... for grid coordinates c.
 * The trailing dims (d >= k, e.g. channels) are whole on every rank and contiguous.
 *
 * The local block `shape` includes the halos: along a partitioned dim d it is
 * halo[d] + interior + halo[d], with interior >= halo[d]. The exchange fills each halo with the
 * neighbour's interior cells next to it: the low halo of dim d with the last halo[d] interior
 * slices of the rank at c[d] - 1, the high halo with the first ones of the rank at c[d] + 1.
 * Dims are exchanged in order 0..k-1, each slab spanning the full extent (halos included) of the
 * other dims, so edge and corner halos are filled too. At the ends of a dim that is not periodic the
 * halo is left untouched; a periodic dim wraps (with grid[d] == 1 a rank wraps onto itself).
 * Collective over all ranks; host memory; in place. */
typedef struct MLPH_HaloSpec {
  size_t struct_size;
  const MLPH_Extension* ext;
  MLPH_DType dtype;
  int32_t ndim;                    /* dims of the local block, 1..MLPH_MAX_DIMS */
  int32_t grid_ndim;               /* k: the leading dims partitioned over ranks, 1..ndim */
  int64_t shape[MLPH_MAX_DIMS];    /* the local block, halos included */
  int32_t grid[MLPH_MAX_DIMS];     /* ranks along each partitioned dim */
  int32_t halo[MLPH_MAX_DIMS];     /* halo width on each side of each partitioned dim (0: none) */
  int32_t periodic[MLPH_MAX_DIMS]; /* nonzero: the dim wraps around */
} MLPH_HaloSpec;

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
  /* ABI 1.1 (callers check struct_size and NULL: 1.0 plug-ins lack it). `data` is the local block
   * described by `spec` (see MLPH_HaloSpec); its halos are overwritten. */
  MLPH_Error* (*halo_exchange)(MLPH_Comm* comm, void* data, const MLPH_HaloSpec* spec);
  /* ABI 1.2 (callers check struct_size and NULL). Collective over `comm`: the ranks passing the same
   * `color` (>= 0) form a new communicator, ordered by `key` then by rank, with the parent's options
   * (timeouts); e.g. batch-norm groups. *out is owned by the caller, freed with destroy before the
   * parent. */
  MLPH_Error* (*split)(MLPH_Comm* comm, int32_t color, int32_t key, MLPH_Comm** out);
  /* ABI 1.5 (callers check struct_size and NULL). The transpose of halo_exchange, for the backward
   * pass of a spatially split convolution: every halo that halo_exchange fills from a neighbour is
   * sent back to that neighbour, which adds it to the interior cells it was copied from, and is then
   * set to 0. Dims go in reverse order (k-1..0), so edge and corner halos travel back the way they
   * came. Halos at the ends of a non-periodic dim are left untouched. dtype f32 or f64. Collective
   * over all ranks; host memory; in place. */
  MLPH_Error* (*halo_accumulate)(MLPH_Comm* comm, void* data, const MLPH_HaloSpec* spec);
} MLPH_CommsApi;

/* ABI 1.6: collectives on a device's memory, ordered on the caller's stream (NCCL's model). A comms
 * plug-in that has them hangs this struct on its MLPH_CommsApi's `ext` chain (`base.type`
 * MLPH_EXT_DEVICE_COLLECTIVES, `base.version` 1, `base.struct_size` sizeof this struct); a backend
 * finds it with mlph_find_extension and falls back to host collectives (copying through host memory)
 * without it. Every communicator of the plug-in, split ones included, takes these calls.
 *
 *  - `bind` comes first, once per communicator: collective over its ranks, it makes the communicator
 *    ready for `device` (e.g. an NCCL communicator on that GPU). Binding again to the same device is a
 *    no-op; to another one is MLPH_FAILED_PRECONDITION. A device of another type than `device_type`
 *    is MLPH_INVALID_ARGUMENT.
 *  - Each collective is enqueued on `stream` (the backend's; see MLPH_Stream) after the work already
 *    there, and returns once enqueued: `data`, `send` and `recv` are device memory that must stay
 *    valid until the stream has run the collective. Semantics, dtypes and argument checks are those
 *    of the host calls of the same name (MLPH_CommsApi); errors found at enqueue are returned at once.
 *  - Every collective is bounded by the communicator's timeout (comms.timeout_s): one that does not
 *    complete in time (a dead or hung peer) is aborted so that the stream drains rather than hangs,
 *    and the communicator is failed. `status` returns that failure (MLPH_DEADLINE_EXCEEDED or
 *    MLPH_UNAVAILABLE, naming the rank where it is known) or NULL while all is well: a backend asks
 *    after each synchronization of a stream that ran collectives, since the data they left is then
 *    not to be used. A failed communicator fails every later call. */
typedef struct MLPH_DeviceCollectives {
  MLPH_Extension base;
  MLPH_DeviceType device_type; /* the memory and streams these calls take, e.g. MLPH_DEVICE_CUDA */
  MLPH_Error* (*bind)(MLPH_Comm* comm, MLPH_Device device);
  MLPH_Error* (*allreduce)(MLPH_Comm* comm, void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op,
                           MLPH_Stream stream);
  MLPH_Error* (*broadcast)(MLPH_Comm* comm, void* data, size_t bytes, int32_t root, MLPH_Stream stream);
  MLPH_Error* (*allgather)(MLPH_Comm* comm, const void* send, void* recv, size_t bytes_per_rank,
                           MLPH_Stream stream);
  MLPH_Error* (*halo_exchange)(MLPH_Comm* comm, void* data, const MLPH_HaloSpec* spec, MLPH_Stream stream);
  MLPH_Error* (*halo_accumulate)(MLPH_Comm* comm, void* data, const MLPH_HaloSpec* spec, MLPH_Stream stream);
  MLPH_Error* (*status)(MLPH_Comm* comm);
} MLPH_DeviceCollectives;

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
