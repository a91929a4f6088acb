// One process, one rank: collectives are identities (AVERAGE over one rank too); the halo exchange
// (and its transpose, halo_accumulate) wraps periodic dims onto this rank and leaves the others' halos
// untouched. comms/local is this (../local); comms/nccl runs on it when no MPI launcher started the process.
#pragma once

#include <cstring>
#include <string>
#include <utility>

#include "mlph/sdk/comms/plugin.hpp"

namespace mlph::comms {

class LocalComm : public mlph::sdk::Comm {
 public:
  explicit LocalComm(std::string name = "comms/local") : name_(std::move(name)) {}
  LocalComm(const MLPH_HostApi*, const mlph::sdk::Options& options) { options.allow_only({}, "comms/local"); }
  MLPH_Topology topology() override { return {sizeof(MLPH_Topology), nullptr, 0, 1, 0, 1, 1}; }
  void allreduce(void*, size_t, MLPH_DType, MLPH_ReduceOp) override {}
  void broadcast(void*, size_t, int32_t root) override {
    if (root != 0) mlph::sdk::fail(MLPH_INVALID_ARGUMENT, name_ + ": broadcast root must be 0 with one rank");
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    if (bytes) std::memcpy(recv, send, bytes);
  }
  void barrier() override {}
  void halo_exchange(void* data, const MLPH_HaloSpec& spec) override {
    mlph::sdk::halo::exchange(data, spec, 0, 1, name_, wrap);
  }
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec) override {
    mlph::sdk::halo::accumulate(data, spec, 0, 1, name_, wrap);
  }
  std::unique_ptr<mlph::sdk::Comm> split(int32_t, int32_t) override { return std::make_unique<LocalComm>(name_); }

 private:
  // One rank: both neighbours of a periodic dim are this rank itself.
  static void wrap(int32_t, mlph::sdk::halo::Transfer& t) {
    if (t.low >= 0) t.from_low = t.to_high;
    if (t.high >= 0) t.from_high = t.to_low;
  }

  std::string name_ = "comms/local";
};

}  // namespace mlph::comms
