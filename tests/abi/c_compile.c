/* The ABI headers are C: this file must compile as strict C99 (no C++ anywhere in them). */
#include "mlph/plugin.h"

static const MLPH_Plugin* entry(void) { return 0; }

int mlph_c_compile_check(void) {
  MLPH_Tensor t;
  MLPH_BackendApi backend;
  MLPH_WorkloadApi workload;
  MLPH_CommsApi comms;
  MLPH_StorageApi storage;
  MLPH_EntryFn fn = entry;
  t.struct_size = sizeof t;
  backend.struct_size = sizeof backend;
  workload.struct_size = sizeof workload;
  comms.struct_size = sizeof comms;
  storage.struct_size = sizeof storage;
  return fn() == 0 && mlph_uniform(1, 2, 3, 4) < 1.0f && mlph_dtype_size(MLPH_DTYPE_BF16) == 2 ? 0 : 1;
}
