// Host loops that run the cuda kernels' bodies the way the launchers of backends/cuda/kernels do:
// a body over every index, and the three deterministic sums of reductions.cu in their exact order
// (backends/cuda/kernels/reduce.hpp describes it). The CPU test composes bodies with these, so what
// it compares with the reference is what the device computes, up to the libm and fma differences
// kernel.hpp lists; a GPU check can compare the device's sums with these bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/optimizer.hpp"
#include "kernels/reduce.hpp"
#include "mlph/test/random.hpp"

namespace mlph::cuda::test {

// The kernels' tests draw their inputs from [-2, 2) unless they say otherwise.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float low = -2.0f, float high = 2.0f) {
  return ::mlph::test::random_floats(n, seed, low, high);
}

template <class F>
void each(int64_t n, F&& body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

// A vectorized element-wise launch (grid.cuh each_vectorized): V elements at a time from 0, then the
// last n % V one by one with the scalar body.
template <int V, class Vector, class Scalar>
void each_vectorized(int64_t n, Vector&& vector, Scalar&& scalar) {
  const int64_t head = n / V * V;
  for (int64_t i = 0; i < head; i += V) vector(i);
  for (int64_t i = head; i < n; ++i) scalar(i);
}

template <class F>
void each_row_channel(int64_t rows, int64_t channels, F&& body) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) body(r, c);
}

// out[(s * K + k) * C + c]: per (segment, part, channel) 8 row lanes summed each in order, the lanes
// added 0..7, then the parts added in order (channel_partials_kernel, channel_finish_kernel).
template <class Term>
std::vector<double> channel_sums(const Term& term, int64_t segments, int64_t rows, int64_t channels) {
  constexpr int K = Term::K;
  const int64_t parts = channel_parts(segments, rows, channels);
  std::vector<double> out(static_cast<size_t>(segments * K * channels), 0.0);
  for (int64_t s = 0; s < segments; ++s)
    for (int64_t c = 0; c < channels; ++c) {
      std::vector<double> partial(static_cast<size_t>(parts * K));
      for (int64_t part = 0; part < parts; ++part) {
        const int64_t begin = rows * part / parts, end = rows * (part + 1) / parts;
        double lanes[kRowLanes][K] = {};
        for (int lane = 0; lane < kRowLanes; ++lane)
          for (int64_t r = begin + lane; r < end; r += kRowLanes) {
            double t[K];
            term(s * rows + r, c, t);
            for (int k = 0; k < K; ++k) lanes[lane][k] += t[k];
          }
        for (int k = 0; k < K; ++k) {
          double total = lanes[0][k];
          for (int lane = 1; lane < kRowLanes; ++lane) total += lanes[lane][k];
          partial[static_cast<size_t>(part * K + k)] = total;
        }
      }
      for (int k = 0; k < K; ++k) {
        double sum = 0;
        for (int64_t part = 0; part < parts; ++part) sum += partial[static_cast<size_t>(part * K + k)];
        out[static_cast<size_t>((s * K + k) * channels + c)] = sum;
      }
    }
  return out;
}

// One block's sum of [begin, end): thread t takes begin + t, + 256, ..., then the tree (block_sum).
template <int K, class F>
std::vector<double> block_sum(int64_t begin, int64_t end, F&& term) {
  std::vector<double> threads(static_cast<size_t>(K * kThreads), 0.0);  // [k][t]
  for (int t = 0; t < kThreads; ++t)
    for (int64_t i = begin + t; i < end; i += kThreads) {
      double v[K];
      term(i, v);
      for (int k = 0; k < K; ++k) threads[static_cast<size_t>(k * kThreads + t)] += v[k];
    }
  for (int stride = kThreads / 2; stride > 0; stride /= 2)
    for (int t = 0; t < stride; ++t)
      for (int k = 0; k < K; ++k)
        threads[static_cast<size_t>(k * kThreads + t)] += threads[static_cast<size_t>(k * kThreads + t + stride)];
  std::vector<double> sums(K);
  for (int k = 0; k < K; ++k) sums[static_cast<size_t>(k)] = threads[static_cast<size_t>(k * kThreads)];
  return sums;
}

// The K sums of term(i, t) over i < n: flat_parts(n) blocks, then the parts in order (flat_sums).
template <class Term>
std::vector<double> flat_sums(const Term& term, int64_t n) {
  constexpr int K = Term::K;
  const int64_t parts = flat_parts(n);
  std::vector<double> sums(K, 0.0);
  std::vector<std::vector<double>> partial;
  for (int64_t part = 0; part < parts; ++part)
    partial.push_back(block_sum<K>(n * part / parts, n * (part + 1) / parts, [&](int64_t i, double* t) { term(i, t); }));
  for (const std::vector<double>& p : partial)
    for (int k = 0; k < K; ++k) sums[static_cast<size_t>(k)] += p[static_cast<size_t>(k)];
  return sums;
}

// Per chunk, the K sums of term(i, tensor, t) (chunk_partials_kernel): [chunk][k].
template <int K, class F>
std::vector<double> chunk_sums(const ChunkTable& table, F&& term) {
  std::vector<double> partial;
  for (const Chunk& chunk : table.chunks)
    for (double s : block_sum<K>(chunk.begin, chunk.end, [&](int64_t i, double* t) { term(i, chunk.tensor, t); }))
      partial.push_back(s);
  return partial;
}

}  // namespace mlph::cuda::test
