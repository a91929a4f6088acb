// Write a comms plug-in as a C++ class; `comms_api<Impl>()` generates the C table.
#pragma once

#include <concepts>
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

// ---- Device collectives (ABI 1.6, MLPH_DeviceCollectives in comms.h: read its contract there).
//
// Plug-in side: a Comm class that has them defines, besides the host calls,
//   static constexpr MLPH_DeviceType device_type = MLPH_DEVICE_CUDA;  // the memory and streams they take
//   void bind(MLPH_Device device);                                     // device.type is device_type here
//   void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream);
//   void broadcast(void* data, size_t bytes, int32_t root, MLPH_Stream stream);
//   void allgather(const void* send, void* recv, size_t bytes_per_rank, MLPH_Stream stream);
//   void halo_exchange(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream);
//   void halo_accumulate(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream);
//   void status();  // throws the communicator's failure, returns while all is well
// and its split() returns communicators of that same class; comms_api<Impl>() then hangs the
// extension on the table's `ext` chain. Errors are thrown as for the host calls.
template <class Impl>
concept HasDeviceCollectives = requires(Impl& c, MLPH_Device device, void* data, const void* send, size_t n,
                                        MLPH_DType dtype, MLPH_ReduceOp op, int32_t root,
                                        const MLPH_HaloSpec& spec, MLPH_Stream stream) {
  { Impl::device_type } -> std::convertible_to<MLPH_DeviceType>;
  c.bind(device);
  c.allreduce(data, n, dtype, op, stream);
  c.broadcast(data, n, root, stream);
  c.allgather(send, data, n, stream);
  c.halo_exchange(data, spec, stream);
  c.halo_accumulate(data, spec, stream);
  c.status();
};

inline const char* device_type_name(MLPH_DeviceType type) {
  switch (type) {
    case MLPH_DEVICE_HOST: return "host";
    case MLPH_DEVICE_CUDA: return "cuda";
    case MLPH_DEVICE_HOST_PINNED: return "host-pinned";
    case MLPH_DEVICE_EMULATED: return "emulated";
  }
  return "unknown";
}

// Backend side: the device collectives of `api` for `type` memory, or NULL (an older or host-only
// plug-in, another device type, a malformed extension): then copy through host memory and use the
// host calls.
inline const MLPH_DeviceCollectives* find_device_collectives(const MLPH_CommsApi* api, MLPH_DeviceType type) {
  if (!api || api->struct_size < MLPH_STRUCT_SIZE(MLPH_CommsApi, ext)) return nullptr;
  const MLPH_Extension* ext = mlph_find_extension(api->ext, MLPH_EXT_DEVICE_COLLECTIVES);
  if (!ext || ext->version < 1 || ext->struct_size < MLPH_STRUCT_SIZE(MLPH_DeviceCollectives, status)) return nullptr;
  const auto* found = reinterpret_cast<const MLPH_DeviceCollectives*>(ext);
  return found->device_type == type ? found : nullptr;
}

// A backend's view of one communicator's device collectives, errors thrown as sdk::Error. Borrowed
// pointers: the communicator outlives this object. Calls on one communicator must be made in the
// same order on every rank (NCCL's rule), one at a time.
class DeviceComm {
 public:
  DeviceComm(const MLPH_HostApi* host, const MLPH_DeviceCollectives* calls, MLPH_Comm* comm)
      : host_(host), calls_(calls), comm_(comm) {}
  void bind(MLPH_Device device) const { check(host_, calls_->bind(comm_, device), "comms: bind"); }
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream) const {
    check(host_, calls_->allreduce(comm_, data, count, dtype, op, stream), "comms: device allreduce");
  }
  void broadcast(void* data, size_t bytes, int32_t root, MLPH_Stream stream) const {
    check(host_, calls_->broadcast(comm_, data, bytes, root, stream), "comms: device broadcast");
  }
  void allgather(const void* send, void* recv, size_t bytes_per_rank, MLPH_Stream stream) const {
    check(host_, calls_->allgather(comm_, send, recv, bytes_per_rank, stream), "comms: device allgather");
  }
  void halo_exchange(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) const {
    check(host_, calls_->halo_exchange(comm_, data, &spec, stream), "comms: device halo exchange");
  }
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) const {
    check(host_, calls_->halo_accumulate(comm_, data, &spec, stream), "comms: device halo accumulate");
  }
  // After synchronizing a stream that ran collectives: throws if any of them failed (a timeout, a
  // peer's error), since the data they left is then not to be used.
  void status() const { check(host_, calls_->status(comm_), "comms"); }

 private:
  const MLPH_HostApi* host_;
  const MLPH_DeviceCollectives* calls_;
  MLPH_Comm* comm_;
};

namespace detail {
using CommBox = Boxed<Comm>;
inline CommBox* unbox(MLPH_Comm* c) { return reinterpret_cast<CommBox*>(c); }

// The Impl behind a communicator that takes device calls: every one of the plug-in's, split ones too.
template <class Impl>
Impl& device_impl(MLPH_Comm* c) {
  auto* impl = dynamic_cast<Impl*>(unbox(c)->impl.get());
  if (!impl) fail(MLPH_INTERNAL, "device collectives: a communicator of another class (split() must return its own)");
  return *impl;
}

template <class Impl>
MLPH_Error* device_call(MLPH_Comm* c, auto&& body) {
  return guard(unbox(c)->host, [&] { body(device_impl<Impl>(c)); });
}

template <class Impl>
inline const MLPH_DeviceCollectives device_collectives = {
    {sizeof(MLPH_DeviceCollectives), MLPH_EXT_DEVICE_COLLECTIVES, 1, nullptr},
    Impl::device_type,
    [](MLPH_Comm* c, MLPH_Device device) {
      return device_call<Impl>(c, [&](Impl& impl) {
        if (device.type != Impl::device_type)
          fail(MLPH_INVALID_ARGUMENT, std::string("bind: a ") + device_type_name(device.type) +
                                          " device, but these device collectives take " +
                                          device_type_name(Impl::device_type) + " devices");
        impl.bind(device);
      });
    },
    [](MLPH_Comm* c, void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream) {
      return device_call<Impl>(c, [&](Impl& impl) { impl.allreduce(data, count, dtype, op, stream); });
    },
    [](MLPH_Comm* c, void* data, size_t bytes, int32_t root, MLPH_Stream stream) {
      return device_call<Impl>(c, [&](Impl& impl) { impl.broadcast(data, bytes, root, stream); });
    },
    [](MLPH_Comm* c, const void* send, void* recv, size_t bytes, MLPH_Stream stream) {
      return device_call<Impl>(c, [&](Impl& impl) { impl.allgather(send, recv, bytes, stream); });
    },
    [](MLPH_Comm* c, void* data, const MLPH_HaloSpec* spec, MLPH_Stream stream) {
      return device_call<Impl>(c, [&](Impl& impl) {
        if (!spec) fail(MLPH_INVALID_ARGUMENT, "halo exchange: no MLPH_HaloSpec");
        impl.halo_exchange(data, *spec, stream);
      });
    },
    [](MLPH_Comm* c, void* data, const MLPH_HaloSpec* spec, MLPH_Stream stream) {
      return device_call<Impl>(c, [&](Impl& impl) {
        if (!spec) fail(MLPH_INVALID_ARGUMENT, "halo accumulate: no MLPH_HaloSpec");
        impl.halo_accumulate(data, *spec, stream);
      });
    },
    [](MLPH_Comm* c) { return device_call<Impl>(c, [&](Impl& impl) { impl.status(); }); },
};

// The table's extension chain: the device collectives when Impl has them, else empty.
template <class Impl>
constexpr const MLPH_Extension* comms_extensions() {
  if constexpr (HasDeviceCollectives<Impl>)
    return &device_collectives<Impl>.base;
  else
    return nullptr;
}
}  // namespace detail

template <class Impl>
const MLPH_CommsApi* comms_api() {
  using namespace detail;
  static const MLPH_CommsApi api = {
      sizeof(MLPH_CommsApi),
      comms_extensions<Impl>(),
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
