// What a comms table offers, read from the caller's side (the core, a backend): which calls a
// plug-in of an older minor has, and its device collectives (ABI 1.6): find_device_collectives and
// DeviceComm, a backend's view of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mlph/comms.h"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

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

}  // namespace mlph::sdk
