// Write a comms plug-in as a C++ class; `comms_api<Impl>()` generates the C table.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mlph/comms.h"
#include "mlph/sdk/error.hpp"
#include "mlph/sdk/options.hpp"
#include "mlph/sdk/plugin.hpp"

namespace mlph::sdk {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual MLPH_Topology topology() = 0;
  virtual void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t bytes, int32_t root) = 0;
  virtual void allgather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  virtual void barrier() = 0;
  // See MLPH_HaloSpec; `halo::exchange` below does the geometry, the plug-in moves the bytes.
  virtual void halo_exchange(void* data, const MLPH_HaloSpec& spec) = 0;
  // See MLPH_CommsApi.split: a communicator of the ranks with the same color.
  virtual std::unique_ptr<Comm> split(int32_t color, int32_t key) = 0;
  // See MLPH_CommsApi.halo_accumulate (ABI 1.5): `halo::accumulate` below, over the same transport as
  // halo_exchange. A plug-in without it says so.
  virtual void halo_accumulate(void*, const MLPH_HaloSpec&) {
    fail(MLPH_UNIMPLEMENTED, "this comms plug-in has no halo_accumulate (ABI 1.5)");
  }
};

// Whether a comms table has halo_exchange (ABI 1.1): 1.0 plug-ins' tables end before it.
inline bool has_halo_exchange(const MLPH_CommsApi* api) {
  return api && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_CommsApi, halo_exchange) && api->halo_exchange;
}
// Whether a comms table has split (ABI 1.2).
inline bool has_split(const MLPH_CommsApi* api) {
  return api && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_CommsApi, split) && api->split;
}
// Whether a comms table has halo_accumulate (ABI 1.5).
inline bool has_halo_accumulate(const MLPH_CommsApi* api) {
  return api && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_CommsApi, halo_accumulate) && api->halo_accumulate;
}

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

// Exchanges dim by dim: packs the interior slices next to each face, lets `move(dim, transfer)` deliver
// to_low/to_high and fill from_low/from_high (only for neighbours >= 0), and unpacks into the halos.
template <class Move>
void exchange(void* data, const MLPH_HaloSpec& spec, int32_t rank, int32_t size, const std::string& who, Move&& move) {
  validate(spec, size, who);
  auto* bytes = static_cast<std::byte*>(data);
  for (int32_t d = 0; d < spec.grid_ndim; ++d) {
    const int64_t h = spec.halo[d];
    if (h == 0) continue;
    const Slab s = slab(spec, d, h);
    Transfer t = transfer(spec, rank, d, s.bytes());
    pack(s, bytes, h, t.to_low.data());                  // the first interior slices
    pack(s, bytes, s.extent - 2 * h, t.to_high.data());  // the last interior slices
    move(d, t);
    if (t.low >= 0) unpack(s, t.from_low.data(), 0, bytes);
    if (t.high >= 0) unpack(s, t.from_high.data(), s.extent - h, bytes);
  }
}

// The transpose of exchange, over the same `move`: dims in reverse order; each halo goes back to the
// neighbour whose interior slices exchange copied into it, which adds it there; a halo sent back is
// zeroed (its contribution now lives with its owner, and the earlier dims' slabs span it).
template <class Move>
void accumulate(void* data, const MLPH_HaloSpec& spec, int32_t rank, int32_t size, const std::string& who,
                Move&& move) {
  validate(spec, size, who);
  if (spec.dtype != MLPH_DTYPE_F32 && spec.dtype != MLPH_DTYPE_F64)
    fail(MLPH_INVALID_ARGUMENT, who + ": halo accumulate: dtype must be f32 or f64");
  auto* bytes = static_cast<std::byte*>(data);
  for (int32_t d = spec.grid_ndim - 1; d >= 0; --d) {
    const int64_t h = spec.halo[d];
    if (h == 0) continue;
    const Slab s = slab(spec, d, h);
    Transfer t = transfer(spec, rank, d, s.bytes());
    pack(s, bytes, 0, t.to_low.data());              // the low halo: the low neighbour's last interior slices
    pack(s, bytes, s.extent - h, t.to_high.data());  // the high halo: the high neighbour's first ones
    move(d, t);
    if (t.low >= 0) zero(s, 0, bytes);
    if (t.high >= 0) zero(s, s.extent - h, bytes);
    if (t.low >= 0) unpack_add(s, t.from_low.data(), h, bytes, spec.dtype);
    if (t.high >= 0) unpack_add(s, t.from_high.data(), s.extent - 2 * h, bytes, spec.dtype);
  }
}

}  // namespace halo

namespace detail {
using CommBox = Boxed<Comm>;
inline CommBox* unbox(MLPH_Comm* c) { return reinterpret_cast<CommBox*>(c); }
}  // namespace detail

template <class Impl>
const MLPH_CommsApi* comms_api() {
  using namespace detail;
  static const MLPH_CommsApi api = {
      sizeof(MLPH_CommsApi),
      nullptr,
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Comm** out) {
        return guard(host, [&] {
          auto box = std::make_unique<CommBox>(CommBox{host, std::make_unique<Impl>(host, Options(kv, n))});
          *out = reinterpret_cast<MLPH_Comm*>(box.release());
        });
      },
      [](MLPH_Comm* c) { delete unbox(c); },
      [](MLPH_Comm* c, MLPH_Topology* out) {
        return guard(unbox(c)->host, [&] { *out = unbox(c)->impl->topology(); });
      },
      [](MLPH_Comm* c, void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) {
        return guard(unbox(c)->host, [&] { unbox(c)->impl->allreduce(data, count, dtype, op); });
      },
      [](MLPH_Comm* c, void* data, size_t bytes, int32_t root) {
        return guard(unbox(c)->host, [&] { unbox(c)->impl->broadcast(data, bytes, root); });
      },
      [](MLPH_Comm* c, const void* send, void* recv, size_t bytes) {
        return guard(unbox(c)->host, [&] { unbox(c)->impl->allgather(send, recv, bytes); });
      },
      [](MLPH_Comm* c) { return guard(unbox(c)->host, [&] { unbox(c)->impl->barrier(); }); },
      [](MLPH_Comm* c, void* data, const MLPH_HaloSpec* spec) {
        return guard(unbox(c)->host, [&] {
          if (!spec) fail(MLPH_INVALID_ARGUMENT, "halo exchange: no MLPH_HaloSpec");
          unbox(c)->impl->halo_exchange(data, *spec);
        });
      },
      [](MLPH_Comm* c, int32_t color, int32_t key, MLPH_Comm** out) {
        return guard(unbox(c)->host, [&] {
          if (color < 0) fail(MLPH_INVALID_ARGUMENT, "split: color " + std::to_string(color) + " is negative");
          auto box = std::make_unique<CommBox>(CommBox{unbox(c)->host, unbox(c)->impl->split(color, key)});
          *out = reinterpret_cast<MLPH_Comm*>(box.release());
        });
      },
      [](MLPH_Comm* c, void* data, const MLPH_HaloSpec* spec) {
        return guard(unbox(c)->host, [&] {
          if (!spec) fail(MLPH_INVALID_ARGUMENT, "halo accumulate: no MLPH_HaloSpec");
          unbox(c)->impl->halo_accumulate(data, *spec);
        });
      },
  };
  return &api;
}

}  // namespace mlph::sdk
