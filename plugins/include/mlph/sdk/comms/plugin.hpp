// Write a comms plug-in as a C++ class; `comms_api<Impl>()` generates the C table. The halo geometry
// its halo_exchange and halo_accumulate follow is halo.hpp's (included).
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>

#include "mlph/comms.h"
#include "mlph/sdk/comms/halo.hpp"
#include "mlph/sdk/comms/table.hpp"
#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/util/plugin.hpp"

namespace mlph::sdk {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual MLPH_Topology topology() = 0;
  virtual void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t bytes, int32_t root) = 0;
  virtual void allgather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  virtual void barrier() = 0;
  // See MLPH_HaloSpec; `halo::exchange` (halo.hpp) does the geometry, the plug-in moves the bytes.
  virtual void halo_exchange(void* data, const MLPH_HaloSpec& spec) = 0;
  // See MLPH_CommsApi.split: a communicator of the ranks with the same color.
  virtual std::unique_ptr<Comm> split(int32_t color, int32_t key) = 0;
  // See MLPH_CommsApi.halo_accumulate (ABI 1.5): `halo::accumulate` (halo.hpp), over the same transport as
  // halo_exchange. A plug-in without it says so.
  virtual void halo_accumulate(void*, const MLPH_HaloSpec&) {
    fail(MLPH_UNIMPLEMENTED, "this comms plug-in has no halo_accumulate (ABI 1.5)");
  }
};

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
