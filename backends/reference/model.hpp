// The reference executor: runs a compiled graph node by node on the host, float32 throughout.
// Every value has its own buffer (no reuse: simple, and every intermediate can be inspected);
// gradients exist only for values between a trainable parameter and the loss.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/batch_norm_groups.hpp"
#include "mlph/sdk/gradient_buckets.hpp"
#include "mlph/sdk/host_program.hpp"
#include "mlph/sdk/spatial.hpp"
#include "ops.hpp"

namespace mlph::reference {

class ReferenceModel final : public sdk::Model {
 public:
  // Throws sdk::Error when the graph is invalid (see sdk::host::lower_graph). `comms` may be null.
  ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                 const MLPH_CommsHandle* comms);

  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args, MLPH_StepResult& out) override;
  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) override;
  void read_parameter(size_t index, MLPH_Tensor& dst) override;
  void write_parameter(size_t index, const MLPH_Tensor& src) override;
  void read_gradient(size_t index, MLPH_Tensor& dst) override;
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) override;
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) override;

 private:
  std::vector<sdk::GradientBuckets::Param> allocate();
  void load_inputs(const MLPH_Tensor* inputs, size_t n);
  void forward(bool training, uint64_t step);
  void forward_node(const Node& node, bool training, uint64_t step);
  void backward(bool apply_update);
  void backward_node(const Node& node);
  double regularize();
  void average_gradients();
  void apply_optimizer(double learning_rate, uint64_t step);
  const int32_t* checked_labels(const Node& node) const;
  const Param& param(size_t index) const;
  float* state_slot(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading);

  const float* data(int32_t v) const { return values_[static_cast<size_t>(v)].data(); }
  float* data(int32_t v) { return values_[static_cast<size_t>(v)].data(); }
  float* grad(int32_t v) const { return grads_[static_cast<size_t>(v)]; }
  const int32_t* labels(int32_t v) const { return int_values_[static_cast<size_t>(v)].data(); }
  int64_t numel(int32_t v) const { return static_cast<int64_t>(values_[static_cast<size_t>(v)].size()); }

  const MLPH_HostApi* host_;
  std::shared_ptr<ThreadPool> pool_;
  const MLPH_CommsHandle* comms_;
  Program program_;
  std::vector<std::vector<float>> values_;           // every float value (int16 inputs are converted on load)
  std::vector<std::vector<int32_t>> int_values_;     // per value: the int32 inputs (labels), empty for the others
  std::vector<float> param_grads_;                   // all trainable parameters' gradients: one buffer, one allreduce
  std::vector<std::vector<float>> other_grads_;      // gradients of the intermediate values that need one
  std::vector<float*> grads_;                        // per value: its gradient buffer, or null
  std::vector<std::vector<float>> optimizer_state_;  // per parameter: its slots (sgd velocity; Adam m then v), empty if frozen
  std::vector<float> lamb_update_;                   // LAMB's per-tensor update, as large as the largest parameter
  // Per node: what its backward pass needs from the last training forward (dropout mask; batch-norm mean and
  // 1/std per channel).
  std::vector<std::vector<float>> saved_;
  ConvScratch conv_scratch_;  // reused by every conv node, one at a time
  // Communicators of consecutive ranks split from the run's: batch-norm groups, a split sample's ranks.
  sdk::RankGroups rank_groups_;
  // Batch-norm groups (SyncBatchNorm): the sum over each group size's communicator.
  sdk::BatchNormGroups batch_norm_groups_;
  // The spatial ops by node index (docs/ops.md: halo_exchange, spatial_gather).
  std::map<uint64_t, sdk::spatial::HaloExchange> halos_;
  std::map<uint64_t, sdk::spatial::SpatialGather> gathers_;
  void build_spatial_op(const Node& node);
  // With several ranks: averages param_grads_ during backward (declared last: stops before the buffer goes).
  std::unique_ptr<sdk::GradientBuckets> buckets_;
  bool accumulating_ = false;  // the last micro-batch did not end its window: param_grads_ hold a pending sum
};

}  // namespace mlph::reference
