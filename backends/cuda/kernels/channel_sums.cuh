// The deterministic channel sums of reduce.hpp as kernels: reductions.cu's and own.cu's. nvcc only.
#pragma once

#include "grid.cuh"

namespace mlph::cuda {
namespace {

// ---- channel sums: out[(s * K + k) * C + c] = sum over a segment's rows of term(row, c)[k] ----

// Block (kChannelTile, kRowLanes) over channels [32 x, 32 x + 32) of part y of segment z's rows.
template <class Term>
__global__ void channel_partials_kernel(Term term, int64_t rows, int64_t channels, int64_t parts, double* partial) {
  constexpr int K = Term::K;
  const int lane = threadIdx.y, column = threadIdx.x;
  const int64_t c = int64_t{blockIdx.x} * kChannelTile + column, part = blockIdx.y, segment = blockIdx.z;
  const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
  double sum[K] = {};
  if (c < channels)
    for (int64_t r = begin + lane; r < end; r += kRowLanes) {
      double t[K];
      term(segment * rows + r, c, t);
      for (int k = 0; k < K; ++k) sum[k] += t[k];
    }
  __shared__ double lanes[K][kRowLanes][kChannelTile];
  for (int k = 0; k < K; ++k) lanes[k][lane][column] = sum[k];
  __syncthreads();
  if (lane != 0 || c >= channels) return;
  for (int k = 0; k < K; ++k) {
    double total = lanes[k][0][column];
    for (int l = 1; l < kRowLanes; ++l) total += lanes[k][l][column];
    partial[((segment * parts + part) * K + k) * channels + c] = total;
  }
}

// The parts added in order, one thread per output; `count_slot` (if any) gets `count` (batch norm's rows).
template <int K>
__global__ void channel_finish_kernel(const double* partial, int64_t segments, int64_t parts, int64_t channels,
                                      double* out, double* count_slot, double count) {
  const int64_t width = K * channels;
  for (int64_t i = first_index(); i < segments * width; i += grid_stride()) {
    const int64_t segment = i / width, kc = i - segment * width;
    double sum = 0;
    for (int64_t part = 0; part < parts; ++part) sum += partial[(segment * parts + part) * width + kc];
    out[i] = sum;
  }
  if (count_slot && first_index() == 0) *count_slot = count;
}

// Where a channel sum's partials go, and its sums when the caller keeps no buffer of its own.
struct ChannelScratch {
  double* partial = nullptr;
  double* sums = nullptr;
  bool fits = false;
};
inline ChannelScratch channel_scratch(void* workspace, size_t bytes, int64_t segments, int64_t rows, int64_t channels,
                                      int terms = kMaxTermSums) {
  const int64_t k = terms > kMaxTermSums ? terms : kMaxTermSums;
  auto* partial = static_cast<double*>(workspace);
  const int64_t partials = channel_parts(segments, rows, channels) * segments * k * channels;
  return {partial, partial + partials, workspace && bytes >= channel_sums_workspace_bytes(segments, rows, channels, terms)};
}

template <class Term>
cudaError_t channel_sums(cudaStream_t stream, const Term& term, int64_t segments, int64_t rows, int64_t channels,
                         double* out, void* workspace, size_t bytes, double* count_slot = nullptr, double count = 0) {
  const ChannelScratch scratch = channel_scratch(workspace, bytes, segments, rows, channels, Term::K);
  if (!scratch.fits || segments > 65535) return cudaErrorInvalidValue;
  if (channels <= 0 || segments <= 0) return cudaSuccess;
  const int64_t parts = channel_parts(segments, rows, channels);
  const dim3 grid(static_cast<unsigned>((channels + kChannelTile - 1) / kChannelTile), static_cast<unsigned>(parts),
                  static_cast<unsigned>(segments));
  channel_partials_kernel<<<grid, dim3(kChannelTile, kRowLanes), 0, stream>>>(term, rows, channels, parts,
                                                                             scratch.partial);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t outputs = segments * Term::K * channels;
  channel_finish_kernel<Term::K><<<blocks_for(outputs), kThreads, 0, stream>>>(scratch.partial, segments, parts,
                                                                              channels, out, count_slot, count);
  return cudaGetLastError();
}

}  // namespace
}  // namespace mlph::cuda
