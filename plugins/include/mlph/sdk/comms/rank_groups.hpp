// For backends: communicators of consecutive ranks split from the run's, once per group size. A
// spatially split sample's ranks (sdk/comms/spatial.hpp) and batch norm's groups (sdk/host/batch_norm_groups.hpp)
// share them: one split per size, in the order the graph's nodes ask, on every rank alike.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "mlph/comms.h"
#include "mlph/sdk/comms/table.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

// Communicators of `size` consecutive ranks (those with the same rank / size) split from a run's
// communicator once per size: a spatially split sample's ranks, batch norm's groups.
class RankGroups {
 public:
  // `comms` (may be null: one rank) outlives this object; `who` starts the error messages.
  RankGroups(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, std::string who)
      : host_(host), comms_(comms), who_(std::move(who)) {}

  // This rank's group of `size`; null for size 1 (or less). The first call for a size is collective (a split).
  // `what` names the user, e.g. "node 'conv1.halo' (halo_exchange): grid 2x1x1".
  const MLPH_CommsHandle* group(int64_t size, const std::string& what) {
    if (size <= 1) return nullptr;
    if (const auto found = groups_.find(size); found != groups_.end()) return &found->second.handle;
    const std::string where = who_ + ": " + what;
    if (!comms_) fail(MLPH_INVALID_ARGUMENT, where + " needs " + std::to_string(size) + " ranks; this run has 1");
    if (!has_split(comms_->api)) fail(MLPH_UNIMPLEMENTED, where + " needs a comms plug-in with split (ABI 1.2)");
    MLPH_Topology topology{};
    topology.struct_size = sizeof topology;
    check(host_, comms_->api->topology(comms_->comm, &topology), where + ": topology");
    if (topology.size % size != 0)
      fail(MLPH_INVALID_ARGUMENT, where + ": " + std::to_string(size) + " ranks per group do not divide the " +
                                      std::to_string(topology.size) + " ranks of this run");
    MLPH_Comm* raw = nullptr;
    check(host_, comms_->api->split(comms_->comm, static_cast<int32_t>(topology.rank / size), topology.rank, &raw),
          where + ": split");
    Group& g = groups_.emplace(size, Group{{raw, comms_->api->destroy}, {}}).first->second;
    g.handle = {sizeof(MLPH_CommsHandle), nullptr, comms_->api, raw};
    return &g.handle;
  }

 private:
  struct Group {
    std::unique_ptr<MLPH_Comm, void (*)(MLPH_Comm*)> comm;
    MLPH_CommsHandle handle;
  };
  const MLPH_HostApi* host_;
  const MLPH_CommsHandle* comms_;
  std::string who_;
  std::map<int64_t, Group> groups_;
};

inline int32_t rank_in(const MLPH_HostApi* host, const MLPH_CommsHandle* group, const std::string& where) {
  if (!group) return 0;
  MLPH_Topology topology{};
  topology.struct_size = sizeof topology;
  check(host, group->api->topology(group->comm, &topology), where + ": topology");
  return topology.rank;
}

}  // namespace mlph::sdk
