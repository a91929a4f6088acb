// Sums for losses, norms and per-channel statistics: vectors of floats over short blocks (register
// speed, and a float sum of a few hundred terms loses nothing measurable), each block's result added in
// double, the parts of the threads added in order. Repeatable for a fixed thread count; the reference
// sums in double throughout, so the two agree to float rounding.
#pragma once

#include <vector>

#include "sve.hpp"

namespace mlph::a64fx {

// sum over i < n of term(predicate, i) (an svfloat32_t of the lanes from i), in double.
template <class Term>
double flat_sum(Threads t, int64_t n, Term&& term) {
  constexpr int64_t kBlock = 4096;
  const int64_t parts = part_count(t, n, kMinChunk);
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  parallel_items(t, parts, [&](int64_t part) {
    const int64_t end = n * (part + 1) / parts, lanes = vector_lanes();
    double sum = 0;
    for (int64_t b = n * part / parts; b < end; b += kBlock) {
      const int64_t stop = std::min(end, b + kBlock);
      svfloat32_t acc = svdup_n_f32(0.0f);
      for (int64_t i = b; i < stop; i += lanes) {
        const svbool_t pg = lanes_from(i, stop);
        acc = svadd_m(pg, acc, term(pg, i));
      }
      sum += static_cast<double>(svaddv(svptrue_b32(), acc));
    }
    partial[static_cast<size_t>(part)] = sum;
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// K (1 or 2) per-channel sums over the rows of [rows, channels]: sums[k * channels + c] = sum over r of
// the k-th term. term(predicate, r, c, s0, s1) adds the terms of row r, channels from c, into s0 (and s1).
template <int K, class Term>
std::vector<double> channel_sums(Threads t, RowsByChannels s, Term&& term) {
  static_assert(K == 1 || K == 2);
  constexpr int64_t kBlockRows = 256;
  const int64_t parts = part_count(t, s.rows, std::max<int64_t>(kBlockRows, kMinChunk / std::max<int64_t>(s.channels, 1)));
  const int64_t width = K * s.channels;
  std::vector<double> partial(static_cast<size_t>(parts * width), 0.0);
  parallel_items(t, parts, [&](int64_t part) {
    std::vector<float> block(static_cast<size_t>(width));
    double* sums = partial.data() + part * width;
    const int64_t end = s.rows * (part + 1) / parts;
    for (int64_t r0 = s.rows * part / parts; r0 < end; r0 += kBlockRows) {
      const int64_t r1 = std::min(end, r0 + kBlockRows);
      for (int64_t c = 0; c < s.channels; c += vector_lanes()) {
        const svbool_t pg = lanes_from(c, s.channels);
        svfloat32_t s0 = svdup_n_f32(0.0f), s1 = svdup_n_f32(0.0f);
        for (int64_t r = r0; r < r1; ++r) term(pg, r, c, s0, s1);
        svst1(pg, block.data() + c, s0);
        if constexpr (K == 2) svst1(pg, block.data() + s.channels + c, s1);
      }
      for (int64_t i = 0; i < width; ++i) sums[i] += block[static_cast<size_t>(i)];
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t i = 0; i < width; ++i) total[static_cast<size_t>(i)] += partial[static_cast<size_t>(part * width + i)];
  return total;
}

}  // namespace mlph::a64fx
