// The step protocol of a compiled model, once for every backend, host or device: what the ABI asks of
// train_step, eval_step and the parameter, gradient and state calls (backend.h, docs/abi.md), with
// every check of what the caller hands in and their one-line errors. A backend derives from
// ModelProtocol and supplies its memory and its steps through a few hooks:
//
//   run_train(inputs, plan)   forward and backward of one micro-batch, adding its gradient to the
//                             trainable parameters' gradients (the accumulation window's sum); with
//                             plan.apply_update then: average the sum over the ranks, regularize, update
//   last_loss()               the loss of the last run_train (regularization included when it
//                             updated), even after a run_eval since
//   run_eval(inputs, outputs) the forward pass in evaluation mode, into the caller's host outputs
//   zero_gradients()          the window's sum starts again from zero
//   host_storage(tensor)      where a parameter, its gradient or an optimizer slot lives, for a
//                             backend whose memory the host addresses (the copies are then memcpy)
//   copy_out / copy_in        instead of host_storage: a device backend's copies to and from the
//                             caller's host float32 buffer
//   synchronize()             waits for the work enqueued so far (a device backend's stream)
//
// An asynchronous (device) backend's run_train may only enqueue its work: the inputs stay readable
// until the next call on the model returns (ABI 1.6), the protocol calls synchronize() before
// last_loss(), before every copy and only when the caller wants the loss now (StepArgs.defer_loss
// unset), and an error the work meets is thrown by the next hook that waits. run_eval returns with
// the outputs written. A host backend implements none of synchronize, copy_out and copy_in.
//
// The window: a micro-batch with apply_update unset leaves the window open, and the next micro-batch
// adds to its sum instead of starting a new one. `pending_gradient` (a state slot, ABI 1.4) is that
// sum: read with no window open it is MLPH_FAILED_PRECONDITION; written, it opens the window.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/graph/validate.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

// What a caller sees of a compiled graph: the values it feeds and reads, and the parameters' state.
struct ModelSignature {
  struct Param {
    GraphValue value;
    bool trainable = true;
  };
  std::vector<GraphValue> inputs, eval_outputs;
  std::vector<Param> params;
  std::vector<std::string> optimizer_state;  // the optimizer's state slots (op_schema.hpp), in order
};

// The signature of any checked graph (ValidGraph, sdk::program::Program: values, params with `value`
// and `trainable`, inputs, eval_outputs) whose optimizer keeps the slots `optimizer_state`.
template <class Graph>
ModelSignature signature_of(const Graph& g, std::vector<std::string> optimizer_state) {
  ModelSignature s;
  const auto value = [&](int32_t v) { return g.values[static_cast<size_t>(v)]; };
  for (int32_t v : g.inputs) s.inputs.push_back(value(v));
  for (int32_t v : g.eval_outputs) s.eval_outputs.push_back(value(v));
  for (const auto& p : g.params) s.params.push_back({value(p.value), p.trainable});
  s.optimizer_state = std::move(optimizer_state);
  return s;
}
inline ModelSignature signature_of(const ValidGraph& g) {
  const schema::Optimizer* optimizer = schema::find_optimizer(g.optimizer.name);
  return signature_of(g, optimizer ? std::vector<std::string>(optimizer->state.begin(), optimizer->state.end())
                                   : std::vector<std::string>{});
}

// A parameter's tensor that the protocol copies: its value, its gradient (between updates: the one
// the last update used; in an open window: the window's sum, `pending_gradient`), or slot
// `slot` of the optimizer's state (an index into ModelSignature::optimizer_state).
struct ParamTensor {
  enum class Kind { value, gradient, optimizer_state };
  Kind kind;
  size_t param;
  size_t slot = 0;
};

class ModelProtocol : public Model {
 public:
  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args, MLPH_StepResult& out) final;
  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) final;
  void read_parameter(size_t index, MLPH_Tensor& dst) final;
  void write_parameter(size_t index, const MLPH_Tensor& src) final;
  void read_gradient(size_t index, MLPH_Tensor& dst) final;
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) final;
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) final;
  std::optional<double> read_loss() final;

 protected:
  // `who` starts every error line ("reference backend").
  ModelProtocol(const MLPH_HostApi* host, std::string who, ModelSignature signature)
      : host_(host), who_(std::move(who)), signature_(std::move(signature)) {}

  // ---- the backend's hooks (see the top of this file) ----
  // `inputs` are checked: one per graph input, of its dtype and shape, dense, in host memory.
  virtual void run_train(const MLPH_Tensor* inputs, const StepPlan& plan) = 0;
  virtual double last_loss() = 0;
  // `outputs` are checked as the inputs are.
  virtual void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) = 0;
  virtual void zero_gradients() = 0;
  virtual float* host_storage(const ParamTensor& tensor);
  virtual void copy_out(const ParamTensor& tensor, float* dst, int64_t count);
  virtual void copy_in(const ParamTensor& tensor, const float* src, int64_t count);
  virtual void synchronize() {}

  const MLPH_HostApi* host_;
  const std::string who_;
  const ModelSignature signature_;

 private:
  void check_inputs(const MLPH_Tensor* inputs, size_t n) const;
  const ModelSignature::Param& param(size_t index) const;
  ParamTensor state_tensor(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading) const;
  void copy_to_caller(const ParamTensor& tensor, MLPH_Tensor& dst);
  void copy_from_caller(const ParamTensor& tensor, const MLPH_Tensor& src);

  bool window_open_ = false;      // the last micro-batch did not end its window: the gradients hold its sum
  bool trained_ = false;          // a train_step has run (read_loss has something to wait for)
  std::optional<double> loss_;    // the last step's loss, once read
};

inline void ModelProtocol::check_inputs(const MLPH_Tensor* inputs, size_t n) const {
  const std::vector<GraphValue>& expected = signature_.inputs;
  if (n != expected.size())
    fail(MLPH_INVALID_ARGUMENT,
         who_ + ": expected " + std::to_string(expected.size()) + " inputs, got " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (inputs[i].struct_size < MLPH_STRUCT_SIZE(MLPH_Tensor, data) || !inputs[i].data)
      fail(MLPH_INVALID_ARGUMENT, who_ + ": input '" + expected[i].name + "' is not a valid tensor");
    check_matches(inputs[i], expected[i].as_value(), who_ + ": input");
  }
}

inline void ModelProtocol::train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                                      MLPH_StepResult& out) {
  const StepPlan plan = read_step_args(args, who_, host_);
  check_inputs(inputs, n_inputs);
  if (!window_open_) zero_gradients();
  trained_ = false;  // a step that throws leaves no loss to read
  loss_.reset();
  run_train(inputs, plan);
  trained_ = true;
  window_open_ = !plan.apply_update;
  // A NaN or Inf stays in the reported loss: the core decides what divergence means.
  out.loss = plan.defer_loss ? std::nan("") : *read_loss();
}

inline std::optional<double> ModelProtocol::read_loss() {
  if (!trained_) return std::nullopt;
  if (!loss_) {
    synchronize();
    loss_ = last_loss();
  }
  return loss_;
}

inline void ModelProtocol::eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs,
                                     size_t n_outputs) {
  const std::vector<GraphValue>& expected = signature_.eval_outputs;
  if (n_outputs != expected.size())
    fail(MLPH_INVALID_ARGUMENT, who_ + ": expected " + std::to_string(expected.size()) + " eval outputs, got " +
                                    std::to_string(n_outputs));
  for (size_t i = 0; i < n_outputs; ++i) check_matches(outputs[i], expected[i].as_value(), who_ + ": eval output");
  check_inputs(inputs, n_inputs);
  run_eval(inputs, outputs);
}

inline const ModelSignature::Param& ModelProtocol::param(size_t index) const {
  if (index >= signature_.params.size())
    fail(MLPH_OUT_OF_RANGE, who_ + ": no parameter " + std::to_string(index) + " (the graph has " +
                                std::to_string(signature_.params.size()) + ")");
  return signature_.params[index];
}

inline void ModelProtocol::copy_to_caller(const ParamTensor& tensor, MLPH_Tensor& dst) {
  synchronize();
  copy_out(tensor, static_cast<float*>(dst.data), numel(dst));
}

inline void ModelProtocol::copy_from_caller(const ParamTensor& tensor, const MLPH_Tensor& src) {
  synchronize();
  copy_in(tensor, static_cast<const float*>(src.data), numel(src));
}

inline void ModelProtocol::read_parameter(size_t index, MLPH_Tensor& dst) {
  check_matches(dst, param(index).value.as_value(), who_ + ": parameter");
  copy_to_caller({ParamTensor::Kind::value, index}, dst);
}

inline void ModelProtocol::write_parameter(size_t index, const MLPH_Tensor& src) {
  check_matches(src, param(index).value.as_value(), who_ + ": parameter");
  copy_from_caller({ParamTensor::Kind::value, index}, src);
}

inline void ModelProtocol::read_gradient(size_t index, MLPH_Tensor& dst) {
  const ModelSignature::Param& p = param(index);
  if (!p.trainable)
    fail(MLPH_FAILED_PRECONDITION, who_ + ": parameter '" + p.value.name + "' is not trainable and has no gradient");
  check_matches(dst, p.value.as_value(), who_ + ": gradient");
  copy_to_caller({ParamTensor::Kind::gradient, index}, dst);
}

// State slot `slot` of parameter `index`, checked against `tensor` (docs/abi.md, ABI 1.4).
inline ParamTensor ModelProtocol::state_tensor(size_t index, const std::string& slot, const MLPH_Tensor& tensor,
                                               bool reading) const {
  const ModelSignature::Param& p = param(index);
  check_matches(tensor, p.value.as_value(), who_ + ": state '" + slot + "' of");
  if (!p.trainable)
    fail(MLPH_NOT_FOUND, who_ + ": parameter '" + p.value.name + "' is not trainable and has no state");
  if (slot == kPendingGradientSlot) {
    if (reading && !window_open_)
      fail(MLPH_FAILED_PRECONDITION, who_ + ": no accumulation window is open: no pending gradient");
    return {ParamTensor::Kind::gradient, index};
  }
  const std::vector<std::string>& slots = signature_.optimizer_state;
  const auto found = std::find(slots.begin(), slots.end(), slot);
  if (found == slots.end()) fail(MLPH_NOT_FOUND, who_ + ": the optimizer has no state slot '" + slot + "'");
  return {ParamTensor::Kind::optimizer_state, index, static_cast<size_t>(found - slots.begin())};
}

inline void ModelProtocol::read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) {
  copy_to_caller(state_tensor(index, slot, dst, true), dst);
}

inline void ModelProtocol::write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) {
  copy_from_caller(state_tensor(index, slot, src, false), src);
  if (slot == kPendingGradientSlot) window_open_ = true;  // the next micro-batch adds to it
}

inline float* ModelProtocol::host_storage(const ParamTensor&) {
  fail(MLPH_INTERNAL, who_ + ": the backend gives neither host_storage nor copy_out and copy_in");
}

inline void ModelProtocol::copy_out(const ParamTensor& tensor, float* dst, int64_t count) {
  std::memcpy(dst, host_storage(tensor), static_cast<size_t>(count) * sizeof(float));
}

inline void ModelProtocol::copy_in(const ParamTensor& tensor, const float* src, int64_t count) {
  std::memcpy(host_storage(tensor), src, static_cast<size_t>(count) * sizeof(float));
}

}  // namespace mlph::sdk
