// Write a comms plug-in as a C++ class; `comms_api<Impl>()` generates the C table.
#pragma once

#include <memory>

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
};

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
  };
  return &api;
}

}  // namespace mlph::sdk
