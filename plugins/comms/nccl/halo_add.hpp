// The one kernel comms/nccl needs: adding the halos that came back (halo_accumulate) into the rows
// they came from. Everything else is NCCL calls and strided copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "mlph/common.h"

namespace mlph::comms::nccl {

// `rows` rows of `width` bytes: dst (rows `pitch` bytes apart) += src (packed), f32 or f64, on `stream`.
// Returns the launch's error.
cudaError_t add_rows(void* dst, size_t pitch, const void* src, size_t width, size_t rows, MLPH_DType dtype,
                     cudaStream_t stream);

}  // namespace mlph::comms::nccl
