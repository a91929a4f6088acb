// What kernels.cu, reductions.cu and own.cu share: the grid-stride wrappers that loop a body of
// eltwise.hpp & co. over its index, and their launch. nvcc only.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
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

// Body(i, args...) for every i < n. Index: uint32_t where n fits in 31 bits (HOPPER.md: 32-bit index
// arithmetic; i + the grid's stride stays below 2^32), else int64_t.
template <auto Body, class Index, class... Args>
__global__ void each_kernel(Index n, Args... args) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    Body(static_cast<int64_t>(i), args...);
}
inline constexpr int64_t kNarrowIndex = INT32_MAX;

// Vector v of a vectorized launch: VectorBody at element v * V.
template <auto VectorBody, int V, class... Args>
struct VectorStep {
  __host__ __device__ __forceinline__ static void run(int64_t v, Args... args) { VectorBody(v * V, args...); }
};

// Body(begin + t, args...) for the few t < n - begin (a vectorized launch's last elements): one block.
template <auto Body, class... Args>
__global__ void tail_kernel(int64_t begin, int64_t n, Args... args) {
  for (int64_t i = begin + threadIdx.x; i < n; i += blockDim.x) Body(i, args...);
}

// Body(r, c, args...) for every element of [rows, channels], on a 2-D grid (HOPPER.md): a block is
// kVectorLanes channel vectors (of V channels each: the body's c steps by V) by kRowsPerBlock rows, so
// a warp reads consecutive channels of one row and no thread divides an index by the channel count;
// rows beyond what grid y covers (65535 blocks) loop.
inline constexpr int kVectorLanes = 32, kRowsPerBlock = kThreads / kVectorLanes;
template <auto Body, int V, class... Args>
__global__ void each_row_vector_kernel(int64_t rows, int64_t vectors, Args... args) {
  const int64_t v = int64_t{blockIdx.x} * kVectorLanes + threadIdx.x;
  if (v >= vectors) return;
  for (int64_t r = int64_t{blockIdx.y} * kRowsPerBlock + threadIdx.y; r < rows; r += int64_t{gridDim.y} * kRowsPerBlock)
    Body(r, v * V, args...);
}
inline dim3 row_vector_grid(int64_t rows, int64_t vectors) {
  const int64_t x = (vectors + kVectorLanes - 1) / kVectorLanes;
  int64_t y = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t most = kMaxBlocks * 4 / x > 0 ? kMaxBlocks * 4 / x : 1;  // enough to fill a GPU; the rest loop
  if (y > most) y = most;
  if (y > 65535) y = 65535;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y < 1 ? 1 : y));
}

template <auto Body, class... Args>
cudaError_t each(cudaStream_t stream, int64_t n, Args... args) {
  if (n > 0 && n <= kNarrowIndex)
    each_kernel<Body, uint32_t, Args...><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<uint32_t>(n), args...);
  else if (n > 0)
    each_kernel<Body, int64_t, Args...><<<blocks_for(n), kThreads, 0, stream>>>(n, args...);
  return cudaGetLastError();
}

// VectorBody(i, args...) for i = 0, V, 2V, ... below n rounded down to V (each thread V consecutive
// elements, 16-byte accesses when the buffers are aligned: aligned_16), then Body(i, args...) for the
// last n % V. The same bits as each<Body>: the vector bodies run the scalar one on registers (eltwise.hpp).
template <auto VectorBody, auto Body, int V, class... Args>
cudaError_t each_vectorized(cudaStream_t stream, int64_t n, Args... args) {
  const int64_t vectors = n / V;
  if (vectors > 0 && vectors <= kNarrowIndex)
    each_kernel<VectorStep<VectorBody, V, Args...>::run, uint32_t, Args...>
        <<<blocks_for(vectors), kThreads, 0, stream>>>(static_cast<uint32_t>(vectors), args...);
  else if (vectors > 0)
    each_kernel<VectorStep<VectorBody, V, Args...>::run, int64_t, Args...>
        <<<blocks_for(vectors), kThreads, 0, stream>>>(vectors, args...);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (vectors * V < n) tail_kernel<Body, Args...><<<1, 32, 0, stream>>>(vectors * V, n, args...);
  return cudaGetLastError();
}

// Few channels (losses' classes, CosmoFlow's 4 input channels) would leave most of a 2-D block's
// lanes idle: one flat index then, split by a 32-bit division where it fits (HOPPER.md: no 64-bit
// division per element).
// each_vectorized where `aligned` (aligned_16 of every buffer the bodies access), each<Body> otherwise:
// the launch of every element-wise op over a stored type T (V = kLanes<T>, 16 bytes).
template <auto VectorBody, auto Body, int V, class... Args>
cudaError_t each_aligned(cudaStream_t stream, int64_t n, bool aligned, Args... args) {
  if (aligned) return each_vectorized<VectorBody, Body, V>(stream, n, args...);
  return each<Body>(stream, n, args...);
}

template <auto Body, class... Args>
__global__ void each_row_channel_flat_kernel(int64_t rows, int64_t channels, Args... args) {
  const int64_t n = rows * channels;
  const bool narrow = n <= INT32_MAX;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t r = narrow ? static_cast<int64_t>(static_cast<uint32_t>(i) / static_cast<uint32_t>(channels)) : i / channels;
    Body(r, i - r * channels, args...);
  }
}

// Body(r, c, ...) over [rows, channels] one channel at a time.
template <auto Body, class... Args>
cudaError_t each_row_channel(cudaStream_t stream, int64_t rows, int64_t channels, Args... args) {
  if (rows <= 0 || channels <= 0) return cudaGetLastError();
  if (channels < kVectorLanes / 2)
    each_row_channel_flat_kernel<Body, Args...><<<blocks_for(rows * channels), kThreads, 0, stream>>>(rows, channels, args...);
  else
    each_row_vector_kernel<Body, 1, Args...>
        <<<row_vector_grid(rows, channels), dim3(kVectorLanes, kRowsPerBlock), 0, stream>>>(rows, channels, args...);
  return cudaGetLastError();
}

// Body(r, c, ...) for c = 0, V, 2V, ... < channels (channels a multiple of V): a body that handles V
// consecutive channels (16-byte accesses for V = 4 floats).
template <auto Body, int V, class... Args>
cudaError_t each_row_vector(cudaStream_t stream, int64_t rows, int64_t channels, Args... args) {
  const int64_t vectors = channels / V;
  if (rows > 0 && vectors > 0)
    each_row_vector_kernel<Body, V, Args...>
        <<<row_vector_grid(rows, vectors), dim3(kVectorLanes, kRowsPerBlock), 0, stream>>>(rows, vectors, args...);
  return cudaGetLastError();
}

// 16-byte vectors of a stored type T: 4 floats or 8 bf16.
template <class T>
constexpr int kLanes = 16 / static_cast<int>(sizeof(T));

// Whether 16 bytes (`lanes` elements: 4 floats, 8 bf16) may be read at once at every row's channel c (a
// multiple of lanes) of each buffer.
template <class... Pointers>
bool aligned_16(int64_t channels, int64_t lanes, const Pointers*... p) {
  return channels % lanes == 0 && ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// Whether every buffer may be read 16 bytes at a time from its start (an element-wise launch: the
// vector bodies start at multiples of 4 floats; null pointers are aligned).
template <class... Pointers>
bool aligned_16(const Pointers*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

}  // namespace mlph::cuda
