// For host backends that run an sdk::host::Program (host_program.hpp) node by node: everything of
// an sdk::Model but the kernels. Every value has its own buffer; gradients exist only for the values
// between a trainable parameter and the loss, the trainable parameters' all in one buffer, averaged
// over the ranks in buckets overlapped with backward (sdk::GradientBuckets). A backend derives from
// Executor<Buffer> (Buffer: std::vector<float> or one with another allocator) and supplies the
// forward and backward pass of each node, the regularization and the optimizer; the steps, the
// parameters, gradients and checkpoint state, and the checks of what the caller hands in are here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/error.hpp"
#include "mlph/sdk/gradient_buckets.hpp"
#include "mlph/sdk/host_program.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::sdk::host {

template <class Buffer>
class Executor : public Model {
 public:
  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args, MLPH_StepResult& out) final;
  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) final;
  void read_parameter(size_t index, MLPH_Tensor& dst) final;
  void write_parameter(size_t index, const MLPH_Tensor& src) final;
  void read_gradient(size_t index, MLPH_Tensor& dst) final;
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) final;
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) final;

 protected:
  // Allocates every buffer and moves the parameters' initial contents in. `who` starts every error
  // line ("reference backend"); `comms` may be null (one rank).
  Executor(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, Program program, std::string who);

  // ---- the backend's kernels ----
  virtual void forward_node(const Node& node, bool training, uint64_t step) = 0;
  // Accumulates into the gradients of the node's inputs; called only when its output has one.
  virtual void backward_node(const Node& node) = 0;
  // l2 * sum(w^2) over the parameters with an l2 (docs/ops.md), adding 2 * l2 * w to the trainable
  // ones' gradients: the penalty joins the loss.
  virtual double regularize() = 0;
  virtual void apply_optimizer(double learning_rate, uint64_t step) = 0;
  virtual void zero(float* data, int64_t n) = 0;
  // A float32 input copied, or an int16 one converted, into `dst` (n values).
  virtual void load_floats(MLPH_DType dtype, const void* src, int64_t n, float* dst) = 0;

  // ---- what the kernels read and write ----
  const ValueInfo& info(int32_t v) const { return program_.value(v); }
  int64_t numel(int32_t v) const { return info(v).numel(); }
  const float* data(int32_t v) const { return values_[static_cast<size_t>(v)].data(); }
  float* data(int32_t v) { return values_[static_cast<size_t>(v)].data(); }
  float* grad(int32_t v) const { return grads_[static_cast<size_t>(v)]; }
  const int32_t* labels(int32_t v) const { return int_values_[static_cast<size_t>(v)].data(); }
  // The labels of a softmax_cross_entropy or iou node, checked to lie in [0, C): a clear error naming
  // the node instead of a read out of bounds.
  const int32_t* checked_labels(const Node& node) const;

  const MLPH_HostApi* host_;
  const MLPH_CommsHandle* comms_;
  const std::string who_;
  Program program_;
  std::vector<Buffer> values_;                    // every float value (int16 inputs are converted on load)
  std::vector<std::vector<int32_t>> int_values_;  // per value: the int32 inputs (labels), empty for the others
  Buffer param_grads_;                            // all trainable parameters' gradients: one buffer, one allreduce
  std::vector<Buffer> other_grads_;               // gradients of the intermediate values that need one
  std::vector<float*> grads_;                     // per value: its gradient buffer, or null
  std::vector<Buffer> optimizer_state_;  // per parameter: its slots (sgd velocity; Adam m then v), empty if frozen
  Buffer lamb_update_;                   // LAMB's per-tensor update, as large as the largest parameter
  // Per node: what its backward pass needs from the last training forward (dropout mask; batch-norm
  // mean and 1/std per channel).
  std::vector<Buffer> saved_;

 private:
  std::vector<GradientBuckets::Param> allocate();
  void load_inputs(const MLPH_Tensor* inputs, size_t n);
  void backward(bool apply_update);
  const Param& param(size_t index) const;
  float* state_slot(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading);

  // With several ranks: averages param_grads_ during backward (declared last: stops before the buffer goes).
  std::unique_ptr<GradientBuckets> buckets_;
  bool accumulating_ = false;  // the last micro-batch did not end its window: param_grads_ hold a pending sum
};

template <class Buffer>
Executor<Buffer>::Executor(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, Program program, std::string who)
    : host_(host), comms_(comms), who_(std::move(who)), program_(std::move(program)) {
  if (comms_ &&
      (comms_->struct_size < MLPH_STRUCT_SIZE(MLPH_CommsHandle, comm) || !comms_->api || !comms_->api->allreduce))
    fail(MLPH_INVALID_ARGUMENT, who_ + ": the comms handle has no allreduce");
  const std::vector<GradientBuckets::Param> gradients = allocate();
  if (comms_ && !param_grads_.empty())
    buckets_ = std::make_unique<GradientBuckets>(host_, *comms_, param_grads_.data(), gradients);
}

// Returns where each trainable parameter's gradient lies in param_grads_.
template <class Buffer>
std::vector<GradientBuckets::Param> Executor<Buffer>::allocate() {
  Program& p = program_;
  for (const ValueInfo& v : p.values) {
    const auto n = static_cast<size_t>(v.numel());
    values_.emplace_back(v.dtype == MLPH_DTYPE_I32 ? 0 : n, 0.0f);
    int_values_.emplace_back(v.dtype == MLPH_DTYPE_I32 ? n : 0, 0);
  }
  const size_t moments = p.optimizer.state.size();  // sgd_keras: velocity; the Adams: m, v
  size_t largest = 0;
  for (Param& param : p.params) {
    const size_t trained = param.trainable ? param.init.size() : 0;
    std::copy(param.init.begin(), param.init.end(), data(param.value));
    std::vector<float>().swap(param.init);  // the weights live in values_ from now on
    optimizer_state_.emplace_back(moments * trained, 0.0f);
    largest = std::max(largest, trained);
  }
  if (p.optimizer.kind == OptimizerKind::lamb) lamb_update_.resize(largest);
  // Trainable parameters' gradients are slices of one buffer (allocated before any pointer into it).
  const std::vector<GradientBuckets::Param> layout = gradient_layout(p);
  param_grads_.assign(layout.empty() ? 0 : layout.back().offset + layout.back().count, 0.0f);
  grads_.assign(p.values.size(), nullptr);
  auto slice = layout.begin();
  for (const Param& param : p.params)
    if (param.trainable) grads_[static_cast<size_t>(param.value)] = param_grads_.data() + (slice++)->offset;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.needs_gradient[v] && !grads_[v]) grads_[v] = other_grads_.emplace_back(values_[v].size(), 0.0f).data();
  saved_.resize(p.nodes.size());
  return layout;
}

template <class Buffer>
void Executor<Buffer>::load_inputs(const MLPH_Tensor* inputs, size_t n) {
  if (n != program_.inputs.size())
    fail(MLPH_INVALID_ARGUMENT,
         who_ + ": expected " + std::to_string(program_.inputs.size()) + " inputs, got " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = program_.inputs[i];
    const ValueInfo& v = info(id);
    if (inputs[i].struct_size < MLPH_STRUCT_SIZE(MLPH_Tensor, data) || !inputs[i].data)
      fail(MLPH_INVALID_ARGUMENT, who_ + ": input '" + v.name + "' is not a valid tensor");
    check_matches(inputs[i], v.as_value(), who_ + ": input");
    if (v.dtype == MLPH_DTYPE_I32)
      std::memcpy(int_values_[static_cast<size_t>(id)].data(), inputs[i].data,
                  static_cast<size_t>(v.numel()) * sizeof(int32_t));
    else  // float32 or int16, as the validator guarantees
      load_floats(v.dtype, inputs[i].data, v.numel(), data(id));
  }
}

// `apply_update`: this micro-batch ends the accumulation window, so its buckets are averaged over the
// ranks as backward finishes them. The parameters' gradients add up across a window: zeroed only at
// its start.
template <class Buffer>
void Executor<Buffer>::backward(bool apply_update) {
  GradientBuckets* buckets = apply_update ? buckets_.get() : nullptr;
  if (buckets) buckets->start();
  if (!accumulating_) zero(param_grads_.data(), static_cast<int64_t>(param_grads_.size()));
  accumulating_ = !apply_update;
  for (Buffer& g : other_grads_) zero(g.data(), static_cast<int64_t>(g.size()));
  if (!grad(program_.loss)) return;  // no trainable parameter reaches the loss
  grad(program_.loss)[0] = 1.0f;
  for (auto node = program_.nodes.rbegin(); node != program_.nodes.rend(); ++node) {
    if (grad(node->output)) backward_node(*node);
    if (buckets) buckets->node_done(static_cast<int64_t>(node->index));  // overlaps the allreduce of finished layers
  }
}

template <class Buffer>
void Executor<Buffer>::train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                                  MLPH_StepResult& out) {
  const StepPlan plan = read_step_args(args, who_);
  load_inputs(inputs, n_inputs);
  for (const Node& node : program_.nodes) forward_node(node, true, plan.micro_step);
  backward(plan.apply_update);
  // A NaN or Inf stays in the reported loss: the core decides what divergence means.
  const double loss = static_cast<double>(data(program_.loss)[0]);
  if (!plan.apply_update) {
    out.loss = loss;  // the gradient waits for the rest of its window
    return;
  }
  // Regularization joins after the averaging, once per update: the weights, hence 2 * l2 * w, are the
  // same on every rank and across the window.
  if (buckets_) buckets_->finish();
  out.loss = loss + regularize();
  apply_optimizer(plan.learning_rate, plan.step);
}

template <class Buffer>
void Executor<Buffer>::eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) {
  if (n_outputs != program_.eval_outputs.size())
    fail(MLPH_INVALID_ARGUMENT, who_ + ": expected " + std::to_string(program_.eval_outputs.size()) +
                                    " eval outputs, got " + std::to_string(n_outputs));
  for (size_t i = 0; i < n_outputs; ++i)
    check_matches(outputs[i], info(program_.eval_outputs[i]).as_value(), who_ + ": eval output");
  load_inputs(inputs, n_inputs);
  for (const Node& node : program_.nodes) forward_node(node, false, 0);
  for (size_t i = 0; i < n_outputs; ++i) {
    const int32_t v = program_.eval_outputs[i];
    if (info(v).dtype == MLPH_DTYPE_I32)
      std::memcpy(outputs[i].data, labels(v), int_values_[static_cast<size_t>(v)].size() * sizeof(int32_t));
    else
      std::memcpy(outputs[i].data, data(v), static_cast<size_t>(numel(v)) * sizeof(float));
  }
}

template <class Buffer>
const int32_t* Executor<Buffer>::checked_labels(const Node& node) const {
  const int32_t* l = labels(node.inputs[1]);
  const int64_t count = node.rows.rows, classes = node.rows.channels;
  for (int64_t i = 0; i < count; ++i)
    if (l[i] < 0 || l[i] >= classes)
      fail(MLPH_INVALID_ARGUMENT, who_ + ": node '" + node.name + "': label " + std::to_string(l[i]) + " at position " +
                                      std::to_string(i) + " of '" + info(node.inputs[1]).name + "' is outside [0, " +
                                      std::to_string(classes) + ")");
  return l;
}

template <class Buffer>
const Param& Executor<Buffer>::param(size_t index) const {
  if (index >= program_.params.size())
    fail(MLPH_OUT_OF_RANGE, who_ + ": no parameter " + std::to_string(index) + " (the graph has " +
                                std::to_string(program_.params.size()) + ")");
  return program_.params[index];
}

template <class Buffer>
void Executor<Buffer>::read_parameter(size_t index, MLPH_Tensor& dst) {
  const Param& p = param(index);
  check_matches(dst, info(p.value).as_value(), who_ + ": parameter");
  std::memcpy(dst.data, data(p.value), static_cast<size_t>(numel(p.value)) * sizeof(float));
}

template <class Buffer>
void Executor<Buffer>::write_parameter(size_t index, const MLPH_Tensor& src) {
  const Param& p = param(index);
  check_matches(src, info(p.value).as_value(), who_ + ": parameter");
  std::memcpy(data(p.value), src.data, static_cast<size_t>(numel(p.value)) * sizeof(float));
}

template <class Buffer>
void Executor<Buffer>::read_gradient(size_t index, MLPH_Tensor& dst) {
  const Param& p = param(index);
  if (!p.trainable)
    fail(MLPH_FAILED_PRECONDITION,
         who_ + ": parameter '" + info(p.value).name + "' is not trainable and has no gradient");
  check_matches(dst, info(p.value).as_value(), who_ + ": gradient");
  std::memcpy(dst.data, grad(p.value), static_cast<size_t>(numel(p.value)) * sizeof(float));
}

// The buffer behind state slot `slot` of parameter `index`, checked against `tensor` (docs/abi.md, ABI 1.4).
template <class Buffer>
float* Executor<Buffer>::state_slot(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading) {
  const Param& p = param(index);
  check_matches(tensor, info(p.value).as_value(), who_ + ": state '" + slot + "' of");
  if (!p.trainable)
    fail(MLPH_NOT_FOUND, who_ + ": parameter '" + info(p.value).name + "' is not trainable and has no state");
  if (slot == kPendingGradientSlot) {
    if (reading && !accumulating_)
      fail(MLPH_FAILED_PRECONDITION, who_ + ": no accumulation window is open: no pending gradient");
    return grad(p.value);
  }
  const std::vector<std::string>& slots = program_.optimizer.state;
  const auto found = std::find(slots.begin(), slots.end(), slot);
  if (found == slots.end()) fail(MLPH_NOT_FOUND, who_ + ": the optimizer has no state slot '" + slot + "'");
  return optimizer_state_[index].data() + (found - slots.begin()) * numel(p.value);
}

template <class Buffer>
void Executor<Buffer>::read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) {
  const float* state = state_slot(index, slot, dst, true);
  std::memcpy(dst.data, state, static_cast<size_t>(sdk::numel(dst)) * sizeof(float));
}

template <class Buffer>
void Executor<Buffer>::write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) {
  float* state = state_slot(index, slot, src, false);
  std::memcpy(state, src.data, static_cast<size_t>(sdk::numel(src)) * sizeof(float));
  if (slot == kPendingGradientSlot) accumulating_ = true;  // the next micro-batch adds to it
}

}  // namespace mlph::sdk::host
