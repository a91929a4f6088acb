// The a64fx-sve executor: runs a lowered graph node by node on the SVE kernels. Every value has its
// own buffer, aligned to A64FX's 256-byte cache lines; gradients exist only for values between a
// trainable parameter and the loss. Data parallelism averages the parameters' gradients in buckets
// overlapped with backward (sdk::GradientBuckets), as the reference does.
#pragma once

#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/gradient_buckets.hpp"
#include "mlph/sdk/host_program.hpp"

namespace mlph::a64fx {

// std::allocator with A64FX's cache-line alignment: no vector straddles a line it need not.
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{256};
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  friend bool operator==(const LineAligned&, const LineAligned&) { return true; }
};
using Buffer = std::vector<float, LineAligned<float>>;

class SveModel final : public sdk::Model {
 public:
  // Throws sdk::Error when the graph is invalid or uses what this backend does not run. `comms` may be null.
  SveModel(const MLPH_HostApi* host, Threads threads, const MLPH_Graph& graph, const MLPH_CommsHandle* comms);

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
  void apply_optimizer(double learning_rate, uint64_t step);
  const int32_t* checked_labels(const Node& node) const;
  const Param& param(size_t index) const;
  float* state_slot(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading);

  const float* data(int32_t v) const { return values_[static_cast<size_t>(v)].data(); }
  float* data(int32_t v) { return values_[static_cast<size_t>(v)].data(); }
  float* grad(int32_t v) const { return grads_[static_cast<size_t>(v)]; }
  const int32_t* labels(int32_t v) const { return int_values_[static_cast<size_t>(v)].data(); }
  int64_t numel(int32_t v) const { return program_.values[static_cast<size_t>(v)].numel(); }
  const ValueInfo& info(int32_t v) const { return program_.values[static_cast<size_t>(v)]; }

  const MLPH_HostApi* host_;
  Threads threads_;
  const MLPH_CommsHandle* comms_;
  Program program_;
  std::vector<Buffer> values_;                    // every float value (int16 inputs are converted on load)
  std::vector<std::vector<int32_t>> int_values_;  // per value: the int32 inputs (labels), empty for the others
  Buffer param_grads_;                            // all trainable parameters' gradients: one buffer, one allreduce
  std::vector<Buffer> other_grads_;               // gradients of the intermediate values that need one
  std::vector<float*> grads_;                     // per value: its gradient buffer, or null
  std::vector<Buffer> optimizer_state_;           // per parameter: sgd velocity or Adam m then v (empty if frozen)
  Buffer lamb_update_;                            // LAMB's per-tensor update, as large as the largest parameter
  std::vector<Buffer> saved_;                     // per node: dropout mask; batch-norm mean and 1/std
  ConvScratch conv_scratch_;                      // reused by every conv node, one at a time
  std::vector<float> dense_partial_;              // the dense forward's partial sums
  std::unique_ptr<sdk::GradientBuckets> buckets_;  // declared last: stops before the buffer goes
  bool accumulating_ = false;  // the last micro-batch did not end its window: param_grads_ hold a pending sum
};

}  // namespace mlph::a64fx
