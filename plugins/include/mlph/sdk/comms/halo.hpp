// The geometry of MLPH_HaloSpec (comms.h), for comms plug-ins: which neighbours, which slabs go out
// and come back, in which order. A plug-in moves the bytes (`move`); host and device transports
// follow the same steps, so their geometry is one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mlph/comms.h"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

namespace halo {

// Throws INVALID_ARGUMENT naming what in `spec` does not fit a communicator of `size` ranks.
inline void validate(const MLPH_HaloSpec& spec, int32_t size, const std::string& who) {
  const auto bad = [&](const std::string& what) { fail(MLPH_INVALID_ARGUMENT, who + ": halo exchange: " + what); };
  if (spec.struct_size < MLPH_STRUCT_SIZE(MLPH_HaloSpec, periodic)) bad("MLPH_HaloSpec is too small (an older ABI?)");
  if (spec.ndim < 1 || spec.ndim > MLPH_MAX_DIMS) bad("ndim " + std::to_string(spec.ndim) + " is not in 1..8");
  if (spec.grid_ndim < 1 || spec.grid_ndim > spec.ndim)
    bad("grid_ndim " + std::to_string(spec.grid_ndim) + " is not in 1..ndim");
  if (mlph_dtype_size(spec.dtype) == 0) bad("unknown dtype");
  int64_t ranks = 1;
  for (int32_t d = 0; d < spec.ndim; ++d) {
    if (spec.shape[d] < 1) bad("shape[" + std::to_string(d) + "] is " + std::to_string(spec.shape[d]));
    if (d >= spec.grid_ndim) continue;
    if (spec.grid[d] < 1) bad("grid[" + std::to_string(d) + "] is " + std::to_string(spec.grid[d]));
    if (spec.halo[d] < 0 || spec.shape[d] < 3LL * spec.halo[d])
      bad("dim " + std::to_string(d) + " of " + std::to_string(spec.shape[d]) + " cannot hold two halos of " +
          std::to_string(spec.halo[d]) + " around an interior at least as wide");
    ranks *= spec.grid[d];
  }
  if (ranks != size)
    bad("the grid has " + std::to_string(ranks) + " cells but the communicator " + std::to_string(size) + " ranks");
}

// Row-major grid coordinate of `rank` along dim d.
inline int32_t coordinate(const MLPH_HaloSpec& spec, int32_t rank, int32_t d) {
  for (int32_t e = spec.grid_ndim - 1; e > d; --e) rank /= spec.grid[e];
  return rank % spec.grid[d];
}

// The rank one step (`delta` = -1 or +1) along dim d, or -1 past a non-periodic end.
inline int32_t neighbour(const MLPH_HaloSpec& spec, int32_t rank, int32_t d, int32_t delta) {
  const int32_t c = coordinate(spec, rank, d), n = spec.grid[d];
  int32_t to = c + delta;
  if (to < 0 || to >= n) {
    if (!spec.periodic[d]) return -1;
    to = (to + n) % n;
  }
  int32_t stride = 1;
  for (int32_t e = spec.grid_ndim - 1; e > d; --e) stride *= spec.grid[e];
  return rank + (to - c) * stride;
}

// Slices [first, first + count) of dim d with everything else whole, copied to or from a packed buffer.
struct Slab {
  int64_t outer = 1;   // product of the dims before d
  size_t chunk = 0;    // bytes of one dim-d slice times `count`
  size_t slice = 0;    // bytes of one dim-d slice
  int64_t extent = 0;  // shape[d]
  size_t bytes() const { return static_cast<size_t>(outer) * chunk; }
};

inline Slab slab(const MLPH_HaloSpec& spec, int32_t d, int64_t count) {
  Slab s;
  s.slice = mlph_dtype_size(spec.dtype);
  for (int32_t e = 0; e < d; ++e) s.outer *= spec.shape[e];
  for (int32_t e = d + 1; e < spec.ndim; ++e) s.slice *= static_cast<size_t>(spec.shape[e]);
  s.extent = spec.shape[d];
  s.chunk = s.slice * static_cast<size_t>(count);
  return s;
}

inline void pack(const Slab& s, const std::byte* data, int64_t first, std::byte* out) {
  for (int64_t o = 0; o < s.outer; ++o)
    std::memcpy(out + o * s.chunk, data + (o * s.extent + first) * static_cast<int64_t>(s.slice), s.chunk);
}

inline void unpack(const Slab& s, const std::byte* in, int64_t first, std::byte* data) {
  for (int64_t o = 0; o < s.outer; ++o)
    std::memcpy(data + (o * s.extent + first) * static_cast<int64_t>(s.slice), in + o * s.chunk, s.chunk);
}

// Adds a packed slab into slices [first, first + count) of dim d (f32 or f64).
inline void unpack_add(const Slab& s, const std::byte* in, int64_t first, std::byte* data, MLPH_DType dtype) {
  const auto add = [&]<class T>(T*) {
    const size_t n = s.chunk / sizeof(T);
    for (int64_t o = 0; o < s.outer; ++o) {
      const auto* src = reinterpret_cast<const T*>(in + o * s.chunk);
      auto* dst = reinterpret_cast<T*>(data + (o * s.extent + first) * static_cast<int64_t>(s.slice));
      for (size_t i = 0; i < n; ++i) dst[i] += src[i];
    }
  };
  if (dtype == MLPH_DTYPE_F64) add(static_cast<double*>(nullptr));
  else add(static_cast<float*>(nullptr));
}

inline void zero(const Slab& s, int64_t first, std::byte* data) {
  for (int64_t o = 0; o < s.outer; ++o)
    std::memset(data + (o * s.extent + first) * static_cast<int64_t>(s.slice), 0, s.chunk);
}

// The packed slabs of one dim: what goes to each neighbour and what comes back from it.
struct Transfer {
  int32_t low = -1, high = -1;  // neighbour ranks, -1 past a non-periodic end
  std::vector<std::byte> to_low, to_high, from_low, from_high;
};

inline Transfer transfer(const MLPH_HaloSpec& spec, int32_t rank, int32_t d, size_t bytes) {
  Transfer t;
  t.low = neighbour(spec, rank, d, -1);
  t.high = neighbour(spec, rank, d, +1);
  for (auto* buffer : {&t.to_low, &t.to_high, &t.from_low, &t.from_high}) buffer->resize(bytes);
  return t;
}

// The bytes `rank` sends in one exchange (as many come back): a slab per neighbour per dim.
inline size_t bytes_sent(const MLPH_HaloSpec& spec, int32_t rank) {
  size_t total = 0;
  for (int32_t d = 0; d < spec.grid_ndim; ++d) {
    if (spec.halo[d] == 0) continue;
    const size_t faces = (neighbour(spec, rank, d, -1) >= 0) + (neighbour(spec, rank, d, +1) >= 0);
    total += faces * slab(spec, d, spec.halo[d]).bytes();
  }
  return total;
}

// One dim of an exchange or of its transpose: the neighbours, and the first slice along `dim` (of
// `slab`'s count) of the face read for each neighbour and of the one written from each. Host and
// device transports follow the same steps, so their geometry is one.
struct Step {
  int32_t dim = 0;
  Slab slab;
  int32_t low = -1, high = -1;  // neighbour ranks, -1 past a non-periodic end
  int64_t to_low = 0, to_high = 0, from_low = 0, from_high = 0;
};

// The exchange: dims 0..k-1; the interior slices next to each face go out, the halos are filled.
inline std::vector<Step> exchange_steps(const MLPH_HaloSpec& spec, int32_t rank) {
  std::vector<Step> steps;
  for (int32_t d = 0; d < spec.grid_ndim; ++d) {
    const int64_t h = spec.halo[d];
    if (h == 0) continue;
    const Slab s = slab(spec, d, h);
    steps.push_back({d, s, neighbour(spec, rank, d, -1), neighbour(spec, rank, d, +1), h, s.extent - 2 * h, 0,
                     s.extent - h});
  }
  return steps;
}

// The transpose: dims k-1..0; each halo goes back to the neighbour whose interior slices the exchange
// copied into it, which adds it there (from_low/from_high are where the adding goes).
inline std::vector<Step> accumulate_steps(const MLPH_HaloSpec& spec, int32_t rank) {
  std::vector<Step> steps;
  for (int32_t d = spec.grid_ndim - 1; d >= 0; --d) {
    const int64_t h = spec.halo[d];
    if (h == 0) continue;
    const Slab s = slab(spec, d, h);
    steps.push_back({d, s, neighbour(spec, rank, d, -1), neighbour(spec, rank, d, +1), 0, s.extent - h, h,
                     s.extent - 2 * h});
  }
  return steps;
}

// Throws INVALID_ARGUMENT unless halo_accumulate can add `spec`'s dtype.
inline void validate_accumulate(const MLPH_HaloSpec& spec, int32_t size, const std::string& who) {
  validate(spec, size, who);
  if (spec.dtype != MLPH_DTYPE_F32 && spec.dtype != MLPH_DTYPE_F64)
    fail(MLPH_INVALID_ARGUMENT, who + ": halo accumulate: dtype must be f32 or f64");
}

// Exchanges dim by dim: packs the interior slices next to each face, lets `move(dim, transfer)` deliver
// to_low/to_high and fill from_low/from_high (only for neighbours >= 0), and unpacks into the halos.
template <class Move>
void exchange(void* data, const MLPH_HaloSpec& spec, int32_t rank, int32_t size, const std::string& who, Move&& move) {
  validate(spec, size, who);
  auto* bytes = static_cast<std::byte*>(data);
  for (const Step& step : exchange_steps(spec, rank)) {
    const Slab& s = step.slab;
    Transfer t = transfer(spec, rank, step.dim, s.bytes());
    pack(s, bytes, step.to_low, t.to_low.data());
    pack(s, bytes, step.to_high, t.to_high.data());
    move(step.dim, t);
    if (t.low >= 0) unpack(s, t.from_low.data(), step.from_low, bytes);
    if (t.high >= 0) unpack(s, t.from_high.data(), step.from_high, bytes);
  }
}

// The transpose of exchange, over the same `move`: dims in reverse order; each halo goes back to the
// neighbour whose interior slices exchange copied into it, which adds it there; a halo sent back is
// zeroed (its contribution now lives with its owner, and the earlier dims' slabs span it).
template <class Move>
void accumulate(void* data, const MLPH_HaloSpec& spec, int32_t rank, int32_t size, const std::string& who,
                Move&& move) {
  validate_accumulate(spec, size, who);
  auto* bytes = static_cast<std::byte*>(data);
  for (const Step& step : accumulate_steps(spec, rank)) {
    const Slab& s = step.slab;
    Transfer t = transfer(spec, rank, step.dim, s.bytes());
    pack(s, bytes, step.to_low, t.to_low.data());
    pack(s, bytes, step.to_high, t.to_high.data());
    move(step.dim, t);
    if (t.low >= 0) zero(s, step.to_low, bytes);
    if (t.high >= 0) zero(s, step.to_high, bytes);
    if (t.low >= 0) unpack_add(s, t.from_low.data(), step.from_low, bytes, spec.dtype);
    if (t.high >= 0) unpack_add(s, t.from_high.data(), step.from_high, bytes, spec.dtype);
  }
}

}  // namespace halo

}  // namespace mlph::sdk
