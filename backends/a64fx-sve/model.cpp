#include "model.hpp"

#include <cmath>

namespace mlph::a64fx {
namespace {
using sdk::fail;

const std::string kName = "a64fx-sve backend";

// The SDK's lowering of every op but the spatial ones (halo_exchange, spatial_gather); batch norm over
// several ranks is refused too.
Program lowered(const MLPH_Graph& graph) {
  Program p = sdk::host::lower_graph(graph, sdk::host::implements({OpKind::halo_exchange, OpKind::spatial_gather}));
  for (const Node& node : p.nodes)
    if (node.kind == OpKind::batch_norm && node.batch_norm.group_size != 1)
      fail(MLPH_UNIMPLEMENTED, kName + ": node '" + node.name + "' (batch_norm): group_size " +
                                   std::to_string(node.batch_norm.group_size) +
                                   " (batch norm over several ranks, SyncBatchNorm) is not supported yet; "
                                   "the reference backend runs it");
  return p;
}

}  // namespace

SveModel::SveModel(const MLPH_HostApi* host, Threads threads, const MLPH_Graph& graph, const MLPH_CommsHandle* comms)
    : Executor(host, comms, lowered(graph), kName), threads_(threads) {}

void SveModel::forward_node(const Node& c, bool training, uint64_t step) {
  const Threads t = threads_;
  const float* x = data(c.inputs[0]);
  float* y = data(c.output);
  const int64_t n = numel(c.output);
  const auto attr = static_cast<float>(c.attr);
  auto input = [&](size_t i) { return data(c.inputs[i]); };
  auto bias = [&]() { return c.has_bias() ? input(2) : nullptr; };
  switch (c.kind) {
    case OpKind::log1p:
      log1p_forward(t, n, x, y);
      break;
    case OpKind::conv:
      conv_forward(t, conv_scratch_, c.window, x, input(1), bias(), y);
      break;
    case OpKind::conv_transpose:
      conv_transpose_forward(t, conv_scratch_, c.window, x, input(1), bias(), y);
      break;
    case OpKind::leaky_relu:
      leaky_relu_forward(t, n, attr, x, y);
      break;
    case OpKind::relu:
      relu_forward(t, n, x, y);
      break;
    case OpKind::tanh:
      tanh_forward(t, n, x, y);
      break;
    case OpKind::scale:
      scale_forward(t, n, attr, x, y);
      break;
    case OpKind::max_pool:
      max_pool_forward(t, c.window, x, y);
      break;
    case OpKind::reshape:
      copy(t, n, x, y);
      break;
    case OpKind::dense:
      dense_forward(t, dense_partial_, c.dense, x, input(1), bias(), y);
      break;
    case OpKind::dropout: {
      Buffer& mask = saved_[c.index];
      if (!training || c.attr == 0.0) {  // identity; an empty mask tells backward so
        mask.clear();
        copy(t, n, x, y);
        break;
      }
      mask.resize(static_cast<size_t>(n));
      dropout_mask(t, n, c.attr, program_.seed, c.index, step, mask.data());
      mask_forward(t, n, mask.data(), x, y);
      break;
    }
    case OpKind::mse:
      y[0] = static_cast<float>(mse_forward(t, numel(c.inputs[0]), x, input(1)));
      break;
    case OpKind::abs_error_sum:
      y[0] = static_cast<float>(abs_error_sum(t, numel(c.inputs[0]), x, input(1)));
      break;
    case OpKind::batch_norm:
      if (!training) {
        batch_norm_eval_forward(t, c.rows, c.batch_norm, x, input(1), input(2), input(3), input(4), y);
        break;
      }
      saved_[c.index].resize(static_cast<size_t>(2 * c.rows.channels));
      batch_norm_train_forward(t, c.rows, c.batch_norm, x, input(1), input(2), data(c.inputs[3]), data(c.inputs[4]),
                               saved_[c.index].data(), y);
      break;
    case OpKind::add:
      add_forward(t, n, x, input(1), y);
      break;
    case OpKind::concat: {
      std::vector<const float*> parts;
      for (size_t i = 0; i < c.inputs.size(); ++i) parts.push_back(input(i));
      concat_forward(t, c.rows.rows, parts, c.widths, y);
      break;
    }
    case OpKind::global_avg_pool:
      global_avg_pool_forward(t, c.batch, c.rows.rows / c.batch, c.rows.channels, x, y);
      break;
    case OpKind::broadcast:
      broadcast_forward(t, c.in_shape, c.out_shape, x, y);
      break;
    case OpKind::channel_affine:
      channel_affine_forward(t, c.rows, x, input(1), input(2), y);
      break;
    case OpKind::shift_scale:
      shift_scale_forward(t, c.rows, x, input(1), input(2), y);
      break;
    case OpKind::softmax_cross_entropy:
      y[0] = static_cast<float>(softmax_cross_entropy_forward(t, c.rows, x, checked_labels(c), c.class_weights.data()));
      break;
    case OpKind::iou:
      iou_forward(t, c.rows, c.batch, x, checked_labels(c), y);
      break;
    case OpKind::halo_exchange:
    case OpKind::spatial_gather:
      fail(MLPH_INTERNAL, who_ + ": node '" + c.name + "': the spatial ops were refused at compile");
  }
}

void SveModel::backward_node(const Node& c) {
  const Threads t = threads_;
  const float* dy = grad(c.output);
  const float* x = data(c.inputs[0]);
  float* dx = grad(c.inputs[0]);
  const int64_t n = numel(c.output);
  const auto attr = static_cast<float>(c.attr);
  auto grad_of = [&](size_t i) { return i < c.inputs.size() ? grad(c.inputs[i]) : nullptr; };
  switch (c.kind) {
    case OpKind::log1p:
    case OpKind::abs_error_sum:
    case OpKind::shift_scale:
    case OpKind::iou:
      break;  // no gradient (docs/ops.md)
    case OpKind::conv:
      if (dx) conv_backward_data(t, conv_scratch_, c.window, data(c.inputs[1]), dy, dx);
      conv_backward_weights(t, conv_scratch_, c.window, x, dy, grad_of(1), c.has_bias() ? grad_of(2) : nullptr);
      break;
    case OpKind::conv_transpose:
      conv_transpose_backward(t, conv_scratch_, c.window, x, data(c.inputs[1]), dy, dx, grad_of(1),
                              c.has_bias() ? grad_of(2) : nullptr);
      break;
    case OpKind::dense:
      dense_backward(t, c.dense, x, data(c.inputs[1]), dy, dx, grad_of(1), c.has_bias() ? grad_of(2) : nullptr);
      break;
    case OpKind::max_pool:
      if (dx) max_pool_backward(t, c.window, x, dy, dx);
      break;
    case OpKind::mse:
      mse_backward(t, numel(c.inputs[0]), x, data(c.inputs[1]), dy[0], dx, grad_of(1));
      break;
    case OpKind::leaky_relu:
      if (dx) leaky_relu_backward(t, n, attr, x, dy, dx);
      break;
    case OpKind::relu:
      if (dx) relu_backward(t, n, x, dy, dx);
      break;
    case OpKind::tanh:
      if (dx) tanh_backward(t, n, data(c.output), dy, dx);
      break;
    case OpKind::scale:
      if (dx) scale_backward(t, n, attr, dy, dx);
      break;
    case OpKind::reshape:
      if (dx) scale_backward(t, n, 1.0f, dy, dx);
      break;
    case OpKind::dropout:
      if (!dx) break;
      if (saved_[c.index].empty())
        scale_backward(t, n, 1.0f, dy, dx);
      else
        mask_backward(t, n, saved_[c.index].data(), dy, dx);
      break;
    case OpKind::batch_norm:
      batch_norm_backward(t, c.rows, x, data(c.inputs[1]), saved_[c.index].data(), dy, dx, grad_of(1), grad_of(2));
      break;
    case OpKind::add:
      for (size_t i = 0; i < 2; ++i)
        if (float* g = grad_of(i)) scale_backward(t, n, 1.0f, dy, g);
      break;
    case OpKind::concat: {
      std::vector<float*> grads;
      for (size_t i = 0; i < c.inputs.size(); ++i) grads.push_back(grad_of(i));
      concat_backward(t, c.rows.rows, grads, c.widths, dy);
      break;
    }
    case OpKind::global_avg_pool:
      if (dx) global_avg_pool_backward(t, c.batch, c.rows.rows / c.batch, c.rows.channels, dy, dx);
      break;
    case OpKind::broadcast:
      if (dx) broadcast_backward(t, c.in_shape, c.out_shape, dy, dx);
      break;
    case OpKind::channel_affine:
      channel_affine_backward(t, c.rows, x, data(c.inputs[1]), dy, dx, grad_of(1), grad_of(2));
      break;
    case OpKind::softmax_cross_entropy:
      if (dx) softmax_cross_entropy_backward(t, c.rows, x, labels(c.inputs[1]), c.class_weights.data(), dy[0], dx);
      break;
    case OpKind::halo_exchange:
    case OpKind::spatial_gather:
      fail(MLPH_INTERNAL, who_ + ": node '" + c.name + "': the spatial ops were refused at compile");
  }
}

// Keras kernel_regularizer: l2 * sum(w^2) joins the loss, 2 * l2 * w the gradient.
double SveModel::regularize() {
  double penalty = 0;
  for (const Param& p : program_.params) {
    if (p.l2 == 0.0) continue;
    penalty += p.l2 * sum_of_squares(threads_, numel(p.value), data(p.value));
    if (p.trainable) l2_backward(threads_, numel(p.value), p.l2, data(p.value), grad(p.value));
  }
  return penalty;
}

void SveModel::apply_optimizer(double learning_rate, uint64_t step) {
  const OptimizerSpec& opt = program_.optimizer;
  const uint64_t t = step + 1;
  // LAMB clips by the norm of all trainable gradients together (one buffer: param_grads_).
  float clip = 1.0f;
  if (opt.kind == OptimizerKind::lamb) {
    const double norm = std::sqrt(sum_of_squares(threads_, static_cast<int64_t>(param_grads_.size()), param_grads_.data()));
    if (norm > opt.adam.max_grad_norm) clip = static_cast<float>(norm / opt.adam.max_grad_norm);
  }
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const Param& p = program_.params[i];
    if (!p.trainable) continue;
    const int64_t n = numel(p.value);
    float* m = optimizer_state_[i].data();
    const double decay = opt.adam.weight_decay * p.weight_decay;
    switch (opt.kind) {
      case OptimizerKind::sgd_keras:
        sgd_keras_update(threads_, n, learning_rate, opt.momentum, grad(p.value), m, data(p.value));
        break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw:
        adam_update(threads_, n, learning_rate, opt.adam, t, decay, opt.kind == OptimizerKind::adamw, grad(p.value), m,
                    m + n, data(p.value));
        break;
      case OptimizerKind::lamb:
        lamb_update(threads_, n, learning_rate, opt.adam, t, decay, clip, grad(p.value), m, m + n, data(p.value),
                    lamb_update_.data());
        break;
    }
  }
}

void SveModel::zero(float* data, int64_t n) { fill_zero(threads_, n, data); }

void SveModel::load_floats(MLPH_DType dtype, const void* src, int64_t n, float* dst) {
  if (dtype == MLPH_DTYPE_F32)
    copy(threads_, n, static_cast<const float*>(src), dst);
  else  // int16
    int16_to_float(threads_, n, static_cast<const int16_t*>(src), dst);
}

}  // namespace mlph::a64fx
