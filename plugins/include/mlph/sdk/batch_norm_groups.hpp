// For backends: the communicators of batch_norm's `group_size` (SyncBatchNorm). The ranks
// rank / group_size share their statistics; each group size is split once from the run's
// communicator, and every batch norm of that size sums over it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlph/comms.h"
#include "mlph/sdk/comms.hpp"
#include "mlph/sdk/error.hpp"

namespace mlph::sdk {

// Sums per-channel statistics over the ranks of a batch-norm group, in place.
using GroupSum = std::function<void(std::vector<double>&)>;

class BatchNormGroups {
 public:
  // `comms` may be null (one rank); `who` starts error messages ("reference backend").
  BatchNormGroups(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, std::string who)
      : host_(host), comms_(comms), who_(std::move(who)) {}

  // The sum over this rank's group of `size` ranks, null for size 1. Splits on a size's first use:
  // collective, so every rank must join the same sizes in the same order (compile, node by node).
  // `where` names the node ("node 'bn1' (batch_norm)") in errors.
  const GroupSum* join(int64_t size, const std::string& where) {
    if (size <= 1) return nullptr;
    if (auto found = groups_.find(size); found != groups_.end()) return &found->second.sum;
    const std::string what = who_ + ": " + where + ": group_size " + std::to_string(size);
    if (!comms_) fail(MLPH_INVALID_ARGUMENT, what + " needs that many ranks; this run has 1");
    if (!has_split(comms_->api)) fail(MLPH_UNIMPLEMENTED, what + " needs a comms plug-in with split (ABI 1.2)");
    MLPH_Topology topology{};
    topology.struct_size = sizeof topology;
    check(host_, comms_->api->topology(comms_->comm, &topology), what + ": topology");
    if (topology.size % size != 0)
      fail(MLPH_INVALID_ARGUMENT, what + " does not divide the " + std::to_string(topology.size) + " ranks");
    MLPH_Comm* raw = nullptr;
    check(host_, comms_->api->split(comms_->comm, static_cast<int32_t>(topology.rank / size), topology.rank, &raw),
          what + ": split");
    Group group{{raw, comms_->api->destroy}, {}};
    // Every batch norm of this size shares the communicator: errors name the group, not a node.
    group.sum = [host = host_, api = comms_->api, comm = raw,
                 context = who_ + ": batch-norm statistics allreduce over a group of " + std::to_string(size) +
                           " ranks"](std::vector<double>& sums) {
      check(host, api->allreduce(comm, sums.data(), sums.size(), MLPH_DTYPE_F64, MLPH_REDUCE_SUM), context);
    };
    return &groups_.emplace(size, std::move(group)).first->second.sum;
  }
  // The sum of a joined group size; null for size 1 (or one never joined).
  const GroupSum* find(int64_t size) const {
    const auto found = groups_.find(size);
    return found == groups_.end() ? nullptr : &found->second.sum;
  }

 private:
  struct Group {
    std::unique_ptr<MLPH_Comm, void (*)(MLPH_Comm*)> comm;
    GroupSum sum;
  };
  const MLPH_HostApi* host_;
  const MLPH_CommsHandle* comms_;
  std::string who_;
  std::map<int64_t, Group> groups_;
};

}  // namespace mlph::sdk
