// comms/nccl's halo adding kernel: see halo_add.hpp.
#include <algorithm>

#include "halo_add.hpp"

namespace mlph::comms::nccl {
namespace {

template <class T>
__global__ void add_rows_kernel(T* dst, size_t pitch, const T* src, size_t width, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i / width * pitch + i % width] += src[i];
}

template <class T>
cudaError_t launch(void* dst, size_t pitch, const void* src, size_t width, size_t rows, cudaStream_t stream) {
  const size_t n = rows * (width / sizeof(T));
  if (n == 0) return cudaSuccess;
  constexpr unsigned threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<size_t>((n + threads - 1) / threads, 4096));
  add_rows_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(dst), pitch / sizeof(T),
                                                      static_cast<const T*>(src), width / sizeof(T), n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rows(void* dst, size_t pitch, const void* src, size_t width, size_t rows, MLPH_DType dtype,
                     cudaStream_t stream) {
  if (dtype == MLPH_DTYPE_F64) return launch<double>(dst, pitch, src, width, rows, stream);
  return launch<float>(dst, pitch, src, width, rows, stream);
}

}  // namespace mlph::comms::nccl
