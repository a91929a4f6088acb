// Halo exchange checked against values that name their source cell: a global array of
// `global_rows x global_cols` cells with `channels` trailing values each, cell (R, C) channel ch
// holding 1000 R + 10 C + ch + 1. Halos start at -1; after the exchange each halo cell must hold its
// (wrapped) source cell, or still -1 past a non-periodic end.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "comms_fixture.hpp"
#include "mlph/sdk/comms.hpp"

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

  MLPH_HaloSpec spec{};
  spec.struct_size = sizeof spec;
  spec.dtype = MLPH_DTYPE_F32;
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

}  // namespace mlph::test
