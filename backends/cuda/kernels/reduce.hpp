// The shape of the deterministic reductions of reductions.cu: how a sum is cut into parts depends only
// on the problem's sizes (never on the device, the grid or timing), each part is summed in a fixed
// order, and the parts are added in order, so a sum has the same bits on every run
// (backend.deterministic) and no float atomics are used. All sums are in double, as the reference's.
//
// Channel sums  out[(s * K + k) * C + c] = sum over rows r of term(s * rows + r, c)[k], segment s of
//   `segments` (the samples, for per-sample sums; 1 otherwise): a block takes 32 channels of one part
//   of a segment's rows; its 8 row lanes each sum rows lane, lane + 8, ... of the part in order, then
//   the lanes are added 0 + 1 + ... + 7; a second kernel adds the parts in order, per (s, k, c).
// Flat sums     out[k] = sum over i < n of term(i)[k]: part p of flat_parts(n) covers
//   [n * p / parts, n * (p + 1) / parts); a block of 256 threads sums it, thread t taking elements
//   t, t + 256, ... in order, then a fixed tree (t + 128, t + 64, ... 1); the parts are added in order.
// Chunk sums    per tensor of a ChunkTable (optimizer.hpp): as flat sums, a chunk being a part, and a
//   tensor's chunks added in order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlph::cuda {

inline constexpr int kThreads = 256;       // per block, every kernel
inline constexpr int kChannelTile = 32;    // channel sums: channels per block (a warp's row of loads)
inline constexpr int kRowLanes = 8;        // channel sums: row lanes per block
inline constexpr int kMaxTermSums = 3;     // K at most (iou's counts)
inline constexpr int64_t kOptimizerChunk = 65536;  // elements per chunk of the multi-tensor kernels

// Enough blocks to fill a large GPU (about 1000), each part at least 256 rows; at most 65535 (grid y).
inline int64_t channel_parts(int64_t segments, int64_t rows, int64_t channels) {
  const int64_t tiles = (channels + kChannelTile - 1) / kChannelTile;
  int64_t parts = (1024 + tiles * segments - 1) / (tiles * segments);
  const int64_t most = (rows + 255) / 256;
  if (parts > most) parts = most;
  if (parts > 65535) parts = 65535;
  return parts < 1 ? 1 : parts;
}

// At most 1024 parts (the sequential second stage stays short), each at least 8192 elements.
inline int64_t flat_parts(int64_t n) {
  const int64_t parts = (n + 8191) / 8192;
  return parts < 1 ? 1 : parts > 1024 ? 1024 : parts;
}

// Device scratch (bytes) of the launchers that sum over channels (batch norm, channel_affine's
// backward, global_avg_pool, iou), and of those that sum a flat array (the losses, the fp16 check):
// for one call, their arguments' sizes; a model may give every call one buffer of the largest size,
// as calls on one stream run one after the other.
// `terms`: the K of the widest term summed (more than kMaxTermSums only for the depthwise conv's taps).
inline size_t channel_sums_workspace_bytes(int64_t segments, int64_t rows, int64_t channels, int terms = kMaxTermSums) {
  const int64_t sums = segments * (terms > kMaxTermSums ? terms : kMaxTermSums) * channels;
  return static_cast<size_t>(channel_parts(segments, rows, channels) * sums + sums) * sizeof(double);
}
inline size_t flat_sums_workspace_bytes(int64_t n) {
  return static_cast<size_t>((flat_parts(n) + 1) * kMaxTermSums) * sizeof(double);
}

}  // namespace mlph::cuda
