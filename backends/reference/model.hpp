// The reference executor: runs a lowered graph node by node on the host, float32 throughout. Every
// value has its own buffer (no reuse: simple, and every intermediate can be inspected); the steps,
// parameters and state are the SDK's host executor's (sdk/host_executor.hpp), the ops are ops.hpp.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "mlph/sdk/batch_norm_groups.hpp"
#include "mlph/sdk/host_executor.hpp"
#include "mlph/sdk/spatial.hpp"
#include "ops.hpp"

namespace mlph::reference {

class ReferenceModel final : public sdk::host::Executor<std::vector<float>> {
 public:
  // Throws sdk::Error when the graph is invalid (see sdk::host::lower_graph). `comms` may be null.
  ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                 const MLPH_CommsHandle* comms);

 private:
  void forward_node(const Node& node, bool training, uint64_t step) override;
  void backward_node(const Node& node) override;
  double regularize() override;
  void apply_optimizer(double learning_rate, uint64_t step) override;
  void zero(float* data, int64_t n) override;
  void load_floats(MLPH_DType dtype, const void* src, int64_t n, float* dst) override;
  void build_spatial_op(const Node& node);

  std::shared_ptr<ThreadPool> pool_;
  ConvScratch conv_scratch_;  // reused by every conv node, one at a time
  // Communicators of consecutive ranks split from the run's: batch-norm groups, a split sample's ranks.
  sdk::RankGroups rank_groups_;
  // Batch-norm groups (SyncBatchNorm): the sum over each group size's communicator.
  sdk::BatchNormGroups batch_norm_groups_;
  // The spatial ops by node index (docs/ops.md: halo_exchange, spatial_gather).
  std::map<uint64_t, sdk::spatial::HaloExchange> halos_;
  std::map<uint64_t, sdk::spatial::SpatialGather> gathers_;
};

}  // namespace mlph::reference
