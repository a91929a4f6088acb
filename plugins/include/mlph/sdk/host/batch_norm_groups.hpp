// For backends: the sums of batch_norm's `group_size` (SyncBatchNorm). The ranks rank / group_size
// share their statistics over a communicator of sdk::RankGroups (split once per size, shared with
// the spatial ops), and every batch norm of that size sums over it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mlph/sdk/comms/rank_groups.hpp"

namespace mlph::sdk {

// Sums per-channel statistics over the ranks of a batch-norm group, in place.
using GroupSum = std::function<void(std::vector<double>&)>;

// For the kernels: per-channel `sums` summed over the group in place, with this rank's count of
// `rows` riding along in the same allreduce; returns the group's count (`rows` without a group).
inline double sum_over_group(std::vector<double>& sums, int64_t rows, const GroupSum* group) {
  if (!group) return static_cast<double>(rows);
  sums.push_back(static_cast<double>(rows));
  (*group)(sums);
  const double m = sums.back();
  sums.pop_back();
  return m;
}

class BatchNormGroups {
 public:
  // `ranks` outlives this object; `who` starts error messages ("reference backend").
  BatchNormGroups(const MLPH_HostApi* host, RankGroups& ranks, std::string who)
      : host_(host), ranks_(ranks), who_(std::move(who)) {}

  // The sum over this rank's group of `size` ranks, null for size 1. Splits on a size's first use:
  // collective, so every rank must join the same sizes in the same order (compile, node by node).
  // `where` names the node ("node 'bn1' (batch_norm)") in errors.
  const GroupSum* join(int64_t size, const std::string& where) {
    if (size <= 1) return nullptr;
    if (auto found = sums_.find(size); found != sums_.end()) return &found->second;
    const MLPH_CommsHandle* group = ranks_.group(size, where + ": group_size " + std::to_string(size));
    // Every batch norm of this size shares the communicator: errors name the group, not a node.
    GroupSum sum = [host = host_, group,
                    context = who_ + ": batch-norm statistics allreduce over a group of " + std::to_string(size) +
                              " ranks"](std::vector<double>& sums) {
      check(host, group->api->allreduce(group->comm, sums.data(), sums.size(), MLPH_DTYPE_F64, MLPH_REDUCE_SUM),
            context);
    };
    return &sums_.emplace(size, std::move(sum)).first->second;
  }
  // The sum of a joined group size; null for size 1 (or one never joined).
  const GroupSum* find(int64_t size) const {
    const auto found = sums_.find(size);
    return found == sums_.end() ? nullptr : &found->second;
  }

 private:
  const MLPH_HostApi* host_;
  RankGroups& ranks_;
  std::string who_;
  std::map<int64_t, GroupSum> sums_;
};

}  // namespace mlph::sdk
