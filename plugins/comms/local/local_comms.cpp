// comms/local: one process, one rank. Collectives are identities (AVERAGE over one rank too).
#include <cstring>

#include "mlph/sdk/comms.hpp"

namespace {

class LocalComm final : public mlph::sdk::Comm {
 public:
  LocalComm(const MLPH_HostApi*, const mlph::sdk::Options& options) { options.allow_only({}, "comms/local"); }
  MLPH_Topology topology() override { return {sizeof(MLPH_Topology), nullptr, 0, 1, 0, 1, 1}; }
  void allreduce(void*, size_t, MLPH_DType, MLPH_ReduceOp) override {}
  void broadcast(void*, size_t, int32_t root) override {
    if (root != 0) mlph::sdk::fail(MLPH_INVALID_ARGUMENT, "comms/local: broadcast root must be 0 with one rank");
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    if (bytes) std::memcpy(recv, send, bytes);
  }
  void barrier() override {}
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_COMMS, "local", "0.1.0", "a single rank: collectives are identities",
                   mlph::sdk::comms_api<LocalComm>())
