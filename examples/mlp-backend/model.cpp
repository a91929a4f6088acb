// The model's steps: forward, backward, the update, and the copies in and out of the host's tensors.
#include <algorithm>
#include <cstring>

#include "mlph/sdk/tensor.hpp"
#include "model.hpp"
#include "ops.hpp"

namespace mlp {

using mlph::sdk::check_matches;
using mlph::sdk::fail;

MLPH_Value Value::info() const {
  MLPH_Value v{};
  v.name = name.c_str();
  v.dtype = MLPH_DTYPE_F32;
  v.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape);
  return v;
}

// One micro-batch: its gradient joins the window's sum; on the window's last micro-batch
// (apply_update) the regularization and the update follow, once.
void MlpModel::train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                          MLPH_StepResult& out) {
  const mlph::sdk::StepPlan plan = mlph::sdk::read_step_args(args, kName);
  load_inputs(inputs, n_inputs);
  forward();
  backward();
  out.loss = value(p_.loss).data[0];
  window_open_ = !plan.apply_update;
  if (window_open_) return;
  out.loss += regularize();
  update(plan.learning_rate);
}

void MlpModel::eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) {
  if (n_outputs != p_.eval_outputs.size())
    fail(MLPH_INVALID_ARGUMENT, kName + ": expected " + std::to_string(p_.eval_outputs.size()) + " eval outputs, got " +
                                    std::to_string(n_outputs));
  for (size_t i = 0; i < n_outputs; ++i) check_matches(outputs[i], value(p_.eval_outputs[i]).info(), kName + ": eval output");
  load_inputs(inputs, n_inputs);
  forward();
  for (size_t i = 0; i < n_outputs; ++i) {
    const Value& v = value(p_.eval_outputs[i]);
    std::memcpy(outputs[i].data, v.data.data(), v.data.size() * sizeof(float));
  }
}

void MlpModel::read_parameter(size_t index, MLPH_Tensor& dst) {
  const Value& v = value(param(index).value);
  check_matches(dst, v.info(), kName + ": parameter");
  std::memcpy(dst.data, v.data.data(), v.data.size() * sizeof(float));
}

void MlpModel::write_parameter(size_t index, const MLPH_Tensor& src) {
  Value& v = value(param(index).value);
  check_matches(src, v.info(), kName + ": parameter");
  std::memcpy(v.data.data(), src.data, v.data.size() * sizeof(float));
}

// The gradient the last update used (regularization included), or the window's sum so far.
void MlpModel::read_gradient(size_t index, MLPH_Tensor& dst) {
  const Parameter& p = param(index);
  const Value& v = value(p.value);
  if (!p.trainable) fail(MLPH_FAILED_PRECONDITION, kName + ": parameter '" + v.name + "' is not trainable");
  check_matches(dst, v.info(), kName + ": gradient");
  std::memcpy(dst.data, v.grad.data(), v.grad.size() * sizeof(float));
}

// The state slots docs/ops.md names: sgd_keras' "velocity", and "pending_gradient" (the sum of an open window).
std::vector<float>& MlpModel::state(size_t index, const std::string& slot, bool reading) {
  Parameter& p = param(index);
  if (!p.trainable) fail(MLPH_NOT_FOUND, kName + ": parameter '" + value(p.value).name + "' has no state");
  if (slot == "velocity") return p.velocity;
  if (slot != mlph::sdk::kPendingGradientSlot) fail(MLPH_NOT_FOUND, kName + ": no state slot '" + slot + "'");
  if (reading && !window_open_) fail(MLPH_FAILED_PRECONDITION, kName + ": no accumulation window is open");
  return value(p.value).grad;
}

void MlpModel::read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) {
  const std::vector<float>& s = state(index, slot, true);
  check_matches(dst, value(param(index).value).info(), kName + ": state");
  std::memcpy(dst.data, s.data(), s.size() * sizeof(float));
}

void MlpModel::write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) {
  std::vector<float>& s = state(index, slot, false);
  check_matches(src, value(param(index).value).info(), kName + ": state");
  std::memcpy(s.data(), src.data, s.size() * sizeof(float));
  if (slot == mlph::sdk::kPendingGradientSlot) window_open_ = true;  // the next micro-batch adds to it
}

Parameter& MlpModel::param(size_t index) {
  if (index >= p_.params.size())
    fail(MLPH_OUT_OF_RANGE, kName + ": no parameter " + std::to_string(index) + " (the graph has " +
                                std::to_string(p_.params.size()) + ")");
  return p_.params[index];
}

void MlpModel::load_inputs(const MLPH_Tensor* inputs, size_t n) {
  if (n != p_.inputs.size())
    fail(MLPH_INVALID_ARGUMENT,
         kName + ": expected " + std::to_string(p_.inputs.size()) + " inputs, got " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    Value& v = value(p_.inputs[i]);
    if (inputs[i].struct_size < MLPH_STRUCT_SIZE(MLPH_Tensor, data) || !inputs[i].data)
      fail(MLPH_INVALID_ARGUMENT, kName + ": input '" + v.name + "' is not a valid tensor");
    check_matches(inputs[i], v.info(), kName + ": input");
    std::memcpy(v.data.data(), inputs[i].data, v.data.size() * sizeof(float));
  }
}

void MlpModel::forward() {
  for (const Node& node : p_.nodes) forward_node(node);
}

void MlpModel::forward_node(const Node& node) {
  const Value& x = value(node.inputs[0]);
  Value& y = value(node.output);
  switch (node.op) {
    case Op::dense: {
      const Value& w = value(node.inputs[1]);
      const float* b = node.inputs.size() > 2 ? value(node.inputs[2]).data.data() : nullptr;
      dense_forward(x.shape[0], w.shape[0], w.shape[1], x.data.data(), w.data.data(), b, y.data.data());
      break;
    }
    case Op::relu:
      relu_forward(x.size(), x.data.data(), y.data.data());
      break;
    case Op::tanh:
      tanh_forward(x.size(), x.data.data(), y.data.data());
      break;
    case Op::scale:
      scale_forward(x.size(), node.factor, x.data.data(), y.data.data());
      break;
    case Op::mse:
      y.data[0] = mse_forward(x.size(), x.data.data(), value(node.inputs[1]).data.data());
      break;
  }
}

// Every value gets a gradient (graph inputs too: simpler than tracking which need one, and unread).
// The parameters' gradients are zeroed only when a window starts, so its micro-batches add up.
void MlpModel::backward() {
  for (Value& v : p_.values)
    if (!v.parameter || !window_open_) std::fill(v.grad.begin(), v.grad.end(), 0.0f);
  value(p_.loss).grad[0] = 1.0f;
  for (auto node = p_.nodes.rbegin(); node != p_.nodes.rend(); ++node) backward_node(*node);
}

void MlpModel::backward_node(const Node& node) {
  Value& x = value(node.inputs[0]);
  const Value& y = value(node.output);
  switch (node.op) {
    case Op::dense: {
      Value& w = value(node.inputs[1]);
      float* db = node.inputs.size() > 2 ? value(node.inputs[2]).grad.data() : nullptr;
      dense_backward(x.shape[0], w.shape[0], w.shape[1], x.data.data(), w.data.data(), y.grad.data(), x.grad.data(),
                     w.grad.data(), db);
      break;
    }
    case Op::relu:
      relu_backward(x.size(), x.data.data(), y.grad.data(), x.grad.data());
      break;
    case Op::tanh:
      tanh_backward(x.size(), y.data.data(), y.grad.data(), x.grad.data());
      break;
    case Op::scale:
      scale_backward(x.size(), node.factor, y.grad.data(), x.grad.data());
      break;
    case Op::mse: {
      Value& t = value(node.inputs[1]);
      mse_backward(x.size(), x.data.data(), t.data.data(), y.grad[0], x.grad.data(), t.grad.data());
      break;
    }
  }
}

double MlpModel::regularize() {
  double penalty = 0;
  for (const Parameter& p : p_.params) {
    if (p.l2 == 0) continue;
    Value& w = value(p.value);
    penalty += l2_regularize(w.size(), p.l2, w.data.data(), p.trainable ? w.grad.data() : nullptr);
  }
  return penalty;
}

void MlpModel::update(double learning_rate) {
  for (Parameter& p : p_.params) {
    if (!p.trainable) continue;
    Value& w = value(p.value);
    sgd_keras_update(w.size(), learning_rate, p_.momentum, w.grad.data(), p.velocity.data(), w.data.data());
  }
}

}  // namespace mlp
