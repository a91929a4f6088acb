/* mlperf-hpc plug-in ABI: types shared by every plug-in kind.
 *
 * Rules that hold for every header in this directory (see docs/abi.md):
 *  - C only; no C++, std, Boost or fmt types cross the boundary.
 *  - Every struct passed across starts with `size_t struct_size` and `const MLPH_Extension* ext`.
 *    A receiver checks `struct_size >= MLPH_STRUCT_SIZE(T, first member it needs)` and reads nothing
 *    beyond `struct_size`.
 *  - Tables are append-only; members added in a minor version are checked for version and NULL.
 *  - Fallible calls return `MLPH_Error*` (NULL = success). Out-parameters are untouched on error.
 *    Errors are created with the host's `error_new` and owned (and freed) by the host.
 *  - No C++ exception crosses the boundary. `destroy(NULL)` is a no-op everywhere.
 */
#ifndef MLPH_COMMON_H
#define MLPH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Major: bumped when anything is removed, retyped or reordered. Minor: bumped when something is
 * appended. The core accepts plug-ins with an equal major and a minor in [MLPH_ABI_MIN_MINOR, MLPH_ABI_MINOR]
 * or newer (a newer plug-in's extra members are simply not called). */
#define MLPH_ABI_MAJOR 1
#define MLPH_ABI_MINOR 6
#define MLPH_ABI_MIN_MINOR 0

/* Size of T up to and including `member`: what a receiver requires of a struct it reads. */
#define MLPH_STRUCT_SIZE(T, member) (offsetof(T, member) + sizeof(((T*)0)->member))

/* Optional capabilities hang off a chain of extensions. A typed extension is a struct whose first
 * member is an MLPH_Extension with `type` one of MLPH_EXT_* and `struct_size` the whole struct's size
 * (ABI 1.6; PJRT's extension chain). A receiver walks the chain (mlph_find_extension), checks
 * `version` and `struct_size` as for any struct, and ignores types it does not know. */
typedef struct MLPH_Extension {
  size_t struct_size;
  uint32_t type;                     /* MLPH_EXT_* */
  uint32_t version;                  /* the extension's own version */
  const struct MLPH_Extension* next; /* NULL ends the chain */
} MLPH_Extension;

/* The extension types (ABI 1.6). Never renumbered. */
typedef enum MLPH_ExtensionType {
  MLPH_EXT_DEVICE_COLLECTIVES = 1 /* comms: stream-ordered collectives on device memory (comms.h) */
} MLPH_ExtensionType;

/* The first extension of `type` on `chain`, or NULL. A chain longer than 64 links is taken as
 * corrupt (a cycle) and ends the search. */
static inline const MLPH_Extension* mlph_find_extension(const MLPH_Extension* chain, uint32_t type) {
  int links = 0;
  for (; chain && links < 64; chain = chain->next, ++links)
    if (chain->type == type && chain->struct_size >= sizeof(MLPH_Extension)) return chain;
  return NULL;
}

/* Status codes, modelled on the abseil/gRPC canonical codes. */
typedef enum MLPH_Code {
  MLPH_OK = 0,
  MLPH_CANCELLED = 1,
  MLPH_UNKNOWN = 2,
  MLPH_INVALID_ARGUMENT = 3,
  MLPH_DEADLINE_EXCEEDED = 4,
  MLPH_NOT_FOUND = 5,
  MLPH_ALREADY_EXISTS = 6,
  MLPH_PERMISSION_DENIED = 7,
  MLPH_RESOURCE_EXHAUSTED = 8,
  MLPH_FAILED_PRECONDITION = 9,
  MLPH_ABORTED = 10,
  MLPH_OUT_OF_RANGE = 11,
  MLPH_UNIMPLEMENTED = 12,
  MLPH_INTERNAL = 13,
  MLPH_UNAVAILABLE = 14,
  MLPH_DATA_LOSS = 15
} MLPH_Code;

/* Opaque error. Created by MLPH_HostApi.error_new, owned by the host. A plug-in returns it and
 * forgets it; the host reads the code and message and frees it. */
typedef struct MLPH_Error MLPH_Error;

/* Options and configuration: UTF-8 key/value strings. Values are YAML scalars or flow sequences
 * ("0.5", "[16, 32]", "true"). Borrowed for the duration of the call unless a function says otherwise. */
typedef struct MLPH_KeyValue {
  const char* key;
  const char* value;
} MLPH_KeyValue;

typedef enum MLPH_DType {
  MLPH_DTYPE_F32 = 0,
  MLPH_DTYPE_F16 = 1,
  MLPH_DTYPE_BF16 = 2,
  MLPH_DTYPE_F64 = 3,
  MLPH_DTYPE_I8 = 4,
  MLPH_DTYPE_I16 = 5,
  MLPH_DTYPE_I32 = 6,
  MLPH_DTYPE_I64 = 7,
  MLPH_DTYPE_U8 = 8
} MLPH_DType;

typedef enum MLPH_DeviceType {
  MLPH_DEVICE_HOST = 1,
  MLPH_DEVICE_CUDA = 2,
  MLPH_DEVICE_HOST_PINNED = 3, /* host memory registered with an accelerator */
  MLPH_DEVICE_EMULATED = 4     /* ABI 1.6: a device emulated on the host, for testing device code paths */
} MLPH_DeviceType;

typedef struct MLPH_Device {
  MLPH_DeviceType type;
  int32_t id;
} MLPH_Device;

/* ABI 1.6: a device's ordered queue of work, owned by the backend that made it and opaque to everyone
 * else: for MLPH_DEVICE_CUDA a cudaStream_t. Work enqueued on a stream runs in order; a call taking a
 * stream returns once the work is enqueued. NULL means the device's default stream. */
typedef void* MLPH_Stream;

#define MLPH_MAX_DIMS 8

/* A borrowed tensor view in the spirit of DLPack's DLTensor: it never owns `data`.
 * `strides` (in elements) may be NULL for a dense row-major tensor. */
typedef struct MLPH_Tensor {
  size_t struct_size;
  const MLPH_Extension* ext;
  MLPH_DType dtype;
  int32_t ndim;
  int64_t shape[MLPH_MAX_DIMS];
  const int64_t* strides;
  MLPH_Device device;
  void* data;
} MLPH_Tensor;

typedef enum MLPH_LogLevel {
  MLPH_LOG_DEBUG = 0,
  MLPH_LOG_INFO = 1,
  MLPH_LOG_WARNING = 2,
  MLPH_LOG_ERROR = 3
} MLPH_LogLevel;

/* Services the core hands every plug-in at create time. Plug-ins never link against the core.
 * The table and everything it points to outlive every object the plug-in creates. */
typedef struct MLPH_HostApi {
  size_t struct_size;
  const MLPH_Extension* ext;
  uint32_t abi_major;
  uint32_t abi_minor;
  /* Returns a new error owned by the host; `message` is copied. Never returns NULL. */
  MLPH_Error* (*error_new)(MLPH_Code code, const char* message);
  /* `origin` names the plug-in; both strings are copied. Thread-safe. */
  void (*log)(MLPH_LogLevel level, const char* origin, const char* message);
  /* Monotonic clock in seconds. */
  double (*now_seconds)(void);
  /* For plug-ins that call other plug-ins (a workload reading through storage): inspect an error
   * another plug-in returned, then either return it onwards or free it. The message lives as long
   * as the error. */
  MLPH_Code (*error_code)(const MLPH_Error* error);
  const char* (*error_message)(const MLPH_Error* error);
  void (*error_free)(MLPH_Error* error);
} MLPH_HostApi;

/* ABI 1.6: functions that device code calls too (CUDA or HIP kernels); plain inline elsewhere. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define MLPH_HOST_DEVICE __host__ __device__
#else
#define MLPH_HOST_DEVICE
#endif

/* Counter-based random stream shared by all backends, so that dropout masks (and any other
 * randomness inside a step) are bitwise identical across backends, host or device: element `index`
 * of stream (`seed`, `stream`, `counter`) is uniform in [0, 1). SplitMix64 finalizer over the
 * combined key; integer arithmetic and one exact conversion, so every device computes it alike. */
MLPH_HOST_DEVICE static inline uint64_t mlph_mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
MLPH_HOST_DEVICE static inline float mlph_uniform(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t index) {
  uint64_t h = mlph_mix64(seed ^ mlph_mix64(stream ^ mlph_mix64(counter ^ mlph_mix64(index))));
  return (float)(h >> 40) * (1.0f / 16777216.0f); /* 24 random bits: exact in float */
}

MLPH_HOST_DEVICE static inline size_t mlph_dtype_size(MLPH_DType t) {
  switch (t) {
    case MLPH_DTYPE_F64: case MLPH_DTYPE_I64: return 8;
    case MLPH_DTYPE_F32: case MLPH_DTYPE_I32: return 4;
    case MLPH_DTYPE_F16: case MLPH_DTYPE_BF16: case MLPH_DTYPE_I16: return 2;
    case MLPH_DTYPE_I8: case MLPH_DTYPE_U8: return 1;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* MLPH_COMMON_H */
