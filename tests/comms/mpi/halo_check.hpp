// Halo exchange checked against values that name their source cell: a global array of
// `global_rows x global_cols` cells with `channels` trailing values each, cell (R, C) channel ch
// holding 1000 R + 10 C + ch + 1. Halos start at -1; after the exchange each halo cell must hold its
// (wrapped) source cell, or still -1 past a non-periodic end.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "comms_fixture.hpp"
#include "mlph/sdk/comms/plugin.hpp"

namespace mlph::test {

struct HaloCase {
  int32_t grid_ndim = 1;         // 1: rows split over ranks, columns whole; 2: both split
  int32_t grid[2] = {1, 1};      // ranks along rows, columns
  int64_t interior[2] = {4, 3};  // interior rows, columns per rank
  int32_t halo[2] = {1, 0};
  bool periodic[2] = {false, false};
  int64_t channels = 2;
};

inline float source_value(int64_t row, int64_t col, int64_t ch) {
  return static_cast<float>(1000 * row + 10 * col + ch + 1);
}

// The spec of a rank's block [shape[0], shape[1], channels] (halos included) for case k.
inline MLPH_HaloSpec halo_spec(const HaloCase& k, const int64_t (&shape)[2], MLPH_DType dtype) {
  MLPH_HaloSpec spec{};
  spec.struct_size = sizeof spec;
  spec.dtype = dtype;
  spec.ndim = 3;
  spec.grid_ndim = k.grid_ndim;
  spec.shape[0] = shape[0];
  spec.shape[1] = shape[1];
  spec.shape[2] = k.channels;
  for (int d = 0; d < k.grid_ndim; ++d) {
    spec.grid[d] = k.grid[d];
    spec.halo[d] = k.halo[d];
    spec.periodic[d] = k.periodic[d];
  }
  return spec;
}

inline void check_halo_exchange(const LoadedComm& c, const HaloCase& k) {
  const int32_t coord[2] = {k.grid_ndim == 2 ? c.rank() / k.grid[1] : c.rank(),
                            k.grid_ndim == 2 ? c.rank() % k.grid[1] : 0};
  const int64_t halo[2] = {k.halo[0], k.grid_ndim == 2 ? k.halo[1] : 0};
  const int64_t shape[2] = {k.interior[0] + 2 * halo[0], k.interior[1] + 2 * halo[1]};
  const int64_t global[2] = {k.interior[0] * k.grid[0], k.interior[1] * (k.grid_ndim == 2 ? k.grid[1] : 1)};
  // The global cell local position p of dim d holds, or -1 past a non-periodic end.
  const auto source = [&](int d, int64_t p) -> int64_t {
    int64_t g = coord[d] * k.interior[d] + p - halo[d];
    if (g >= 0 && g < global[d]) return g;
    return k.periodic[d] ? (g + global[d]) % global[d] : -1;
  };
  std::vector<float> block(static_cast<size_t>(shape[0] * shape[1] * k.channels), -1.0f);
  const auto at = [&](int64_t i, int64_t j, int64_t ch) -> float& {
    return block[static_cast<size_t>((i * shape[1] + j) * k.channels + ch)];
  };
  for (int64_t i = halo[0]; i < shape[0] - halo[0]; ++i)
    for (int64_t j = halo[1]; j < shape[1] - halo[1]; ++j)
      for (int64_t ch = 0; ch < k.channels; ++ch) at(i, j, ch) = source_value(source(0, i), source(1, j), ch);

  const MLPH_HaloSpec spec = halo_spec(k, shape, MLPH_DTYPE_F32);
  ASSERT_TRUE(mlph::sdk::has_halo_exchange(c.api()));
  const auto [code, message] = LoadedComm::outcome(c.api()->halo_exchange(c.comm(), block.data(), &spec));
  ASSERT_EQ(code, MLPH_OK) << message;
  for (int64_t i = 0; i < shape[0]; ++i)
    for (int64_t j = 0; j < shape[1]; ++j)
      for (int64_t ch = 0; ch < k.channels; ++ch) {
        const int64_t row = source(0, i), col = source(1, j);
        const float expected = row < 0 || col < 0 ? -1.0f : source_value(row, col, ch);
        ASSERT_EQ(at(i, j, ch), expected) << "rank " << c.rank() << " cell (" << i << ", " << j << ") channel " << ch;
      }
}

// halo_accumulate is the transpose of halo_exchange (f64 blocks of random values a and b, halos
// included): sum over the ranks of <exchange(a), b> == sum of <a, accumulate(b)>. And every halo that
// went back to a neighbour is 0 afterwards, while those past a non-periodic end keep their value.
inline void check_halo_adjoint(const LoadedComm& c, const HaloCase& k) {
  const int64_t halo[2] = {k.halo[0], k.grid_ndim == 2 ? k.halo[1] : 0};
  const int64_t shape[2] = {k.interior[0] + 2 * halo[0], k.interior[1] + 2 * halo[1]};
  const size_t n = static_cast<size_t>(shape[0] * shape[1] * k.channels);
  const MLPH_HaloSpec spec = halo_spec(k, shape, MLPH_DTYPE_F64);
  std::vector<double> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = mlph_uniform(5, static_cast<uint64_t>(c.rank()), 0, i) - 0.5;
    b[i] = mlph_uniform(6, static_cast<uint64_t>(c.rank()), 0, i) - 0.5;
  }
  std::vector<double> exchanged = a, accumulated = b;
  ASSERT_TRUE(mlph::sdk::has_halo_accumulate(c.api()));
  auto [code, message] = LoadedComm::outcome(c.api()->halo_exchange(c.comm(), exchanged.data(), &spec));
  ASSERT_EQ(code, MLPH_OK) << message;
  std::tie(code, message) = LoadedComm::outcome(c.api()->halo_accumulate(c.comm(), accumulated.data(), &spec));
  ASSERT_EQ(code, MLPH_OK) << message;
  double dots[2] = {0, 0};
  for (size_t i = 0; i < n; ++i) dots[0] += exchanged[i] * b[i], dots[1] += a[i] * accumulated[i];
  std::tie(code, message) = LoadedComm::outcome(c.api()->allreduce(c.comm(), dots, 2, MLPH_DTYPE_F64, MLPH_REDUCE_SUM));
  ASSERT_EQ(code, MLPH_OK) << message;
  EXPECT_NEAR(dots[0], dots[1], 1e-12 * (1 + std::abs(dots[0]))) << "rank " << c.rank();
  bool any_sent = false;  // else nothing moves, and the identity passes as its own transpose
  for (int d = 0; d < k.grid_ndim; ++d) any_sent = any_sent || (k.halo[d] > 0 && (k.periodic[d] || k.grid[d] > 1));
  if (any_sent) {
    EXPECT_NE(accumulated, b) << "the halos moved";
  }
  // Dim 0 goes last (its slabs span the others' halos): a halo of it sent back is 0 at the end; one
  // past a non-periodic end keeps its value when no other dim is split (else their slabs pass through it).
  const int32_t coord = k.grid_ndim == 2 ? c.rank() / k.grid[1] : c.rank();
  const bool low_sent = k.periodic[0] || coord > 0, high_sent = k.periodic[0] || coord < k.grid[0] - 1;
  for (int64_t i = 0; i < shape[0]; ++i) {
    const bool low = i < halo[0], high = i >= shape[0] - halo[0];
    if (!low && !high) continue;
    for (int64_t j = 0; j < shape[1]; ++j) {
      const size_t at = static_cast<size_t>((i * shape[1] + j) * k.channels);
      if ((low && low_sent) || (high && high_sent)) {
        EXPECT_EQ(accumulated[at], 0.0) << "rank " << c.rank() << " halo cell (" << i << ", " << j << ") was sent";
      } else if (k.grid_ndim == 1) {
        EXPECT_EQ(accumulated[at], b[at]) << "rank " << c.rank() << " halo cell (" << i << ", " << j << ") kept";
      }
    }
  }
}

}  // namespace mlph::test
