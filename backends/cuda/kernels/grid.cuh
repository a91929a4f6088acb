// What kernels.cu and reductions.cu share: the grid-stride wrappers that loop a body of
// eltwise.hpp & co. over its index, and their launch. nvcc only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reduce.hpp"

namespace mlph::cuda {

// Grid-stride: enough blocks to cover n once, at most kMaxBlocks (each thread then takes several).
inline constexpr int64_t kMaxBlocks = 8192;
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t first_index() { return int64_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t{gridDim.x} * blockDim.x; }

// Body(i, args...) for every i < n.
template <auto Body, class... Args>
__global__ void each_kernel(int64_t n, Args... args) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) Body(i, args...);
}

// Body(r, c, args...) for every element of [rows, channels].
template <auto Body, class... Args>
__global__ void each_row_channel_kernel(int64_t rows, int64_t channels, Args... args) {
  const int64_t n = rows * channels;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t r = i / channels;
    Body(r, i - r * channels, args...);
  }
}

template <auto Body, class... Args>
cudaError_t each(cudaStream_t stream, int64_t n, Args... args) {
  if (n > 0) each_kernel<Body, Args...><<<blocks_for(n), kThreads, 0, stream>>>(n, args...);
  return cudaGetLastError();
}

template <auto Body, class... Args>
cudaError_t each_row_channel(cudaStream_t stream, int64_t rows, int64_t channels, Args... args) {
  if (rows > 0 && channels > 0)
    each_row_channel_kernel<Body, Args...><<<blocks_for(rows * channels), kThreads, 0, stream>>>(rows, channels,
                                                                                                  args...);
  return cudaGetLastError();
}

}  // namespace mlph::cuda
