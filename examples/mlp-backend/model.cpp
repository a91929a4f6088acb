// The model's steps (forward, backward, the update) and where its state lives, for the SDK's protocol.
#include <algorithm>
#include <cstring>

#include "model.hpp"
#include "ops.hpp"

namespace mlp {

// One micro-batch: its gradient joins the window's sum (the SDK zeroes it when a window starts); on
// the window's last micro-batch (apply_update) the regularization and the update follow, once.
void MlpModel::run_train(const MLPH_Tensor* inputs, const mlph::sdk::StepPlan& plan) {
  load_inputs(inputs);
  forward();
  backward();
  loss_ = value(p_.loss).data[0];
  if (!plan.apply_update) return;
  loss_ += regularize();
  update(plan.learning_rate);
}

void MlpModel::run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) {
  load_inputs(inputs);
  forward();
  for (size_t i = 0; i < p_.eval_outputs.size(); ++i) {
    const Value& v = value(p_.eval_outputs[i]);
    std::memcpy(outputs[i].data, v.data.data(), v.data.size() * sizeof(float));
  }
}

void MlpModel::zero_gradients() {
  for (const Parameter& p : p_.params) std::fill(value(p.value).grad.begin(), value(p.value).grad.end(), 0.0f);
}

// A parameter's weights, its gradient (the last update's, or the window's sum so far: the
// checkpoint slot "pending_gradient") or its velocity (sgd_keras' one state slot).
float* MlpModel::host_storage(const mlph::sdk::ParamTensor& tensor) {
  Parameter& p = p_.params[tensor.param];
  switch (tensor.kind) {
    case mlph::sdk::ParamTensor::Kind::value: return value(p.value).data.data();
    case mlph::sdk::ParamTensor::Kind::gradient: return value(p.value).grad.data();
    case mlph::sdk::ParamTensor::Kind::optimizer_state: break;
  }
  return p.velocity.data();
}

// The SDK checked the inputs: float32, of the graph's shapes.
void MlpModel::load_inputs(const MLPH_Tensor* inputs) {
  for (size_t i = 0; i < p_.inputs.size(); ++i) {
    Value& v = value(p_.inputs[i]);
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
// The parameters' gradients add up over a window's micro-batches: zero_gradients starts them.
void MlpModel::backward() {
  for (Value& v : p_.values)
    if (!v.parameter) std::fill(v.grad.begin(), v.grad.end(), 0.0f);
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
