/* The ABI headers are C: this file must compile as strict C99 (no C++ anywhere in them). */
#include "mlph/plugin.h"

static const MLPH_Plugin* entry(void) { return 0; }

int mlph_c_compile_check(void) {
  MLPH_Tensor t;
  MLPH_BackendApi backend;
  MLPH_WorkloadApi workload;
  MLPH_CommsApi comms;
  MLPH_StorageApi storage;
  /* ABI 1.6 */
  MLPH_BackendCreateArgs create_args;
  MLPH_BackendAttributes attributes;
  MLPH_DeviceCollectives collectives;
  MLPH_Stream stream = 0;
  MLPH_EntryFn fn = entry;
  t.struct_size = sizeof t;
  backend.struct_size = sizeof backend;
  workload.struct_size = sizeof workload;
  comms.struct_size = sizeof comms;
  storage.struct_size = sizeof storage;
  create_args.struct_size = sizeof create_args;
  attributes.struct_size = sizeof attributes;
  collectives.base.struct_size = sizeof collectives;
  collectives.base.type = MLPH_EXT_DEVICE_COLLECTIVES;
  collectives.base.version = 1;
  collectives.base.next = 0;
  comms.ext = &collectives.base;
  return fn() == 0 && mlph_uniform(1, 2, 3, 4) < 1.0f && mlph_dtype_size(MLPH_DTYPE_BF16) == 2 &&
                 mlph_find_extension(comms.ext, MLPH_EXT_DEVICE_COLLECTIVES) == &collectives.base &&
                 mlph_find_extension(comms.ext, 99) == 0 && stream == 0
             ? 0
             : 1;
}
