#include "model.hpp"

#include <algorithm>
#include <cstring>

namespace mlph::reference {

ReferenceModel::ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                               const MLPH_CommsHandle* comms)
    : Executor(host, comms, sdk::host::lower_graph(graph, sdk::host::implements()), "reference backend"),
      pool_(std::move(pool)),
      rank_groups_(host, comms, who_),
      batch_norm_groups_(host, rank_groups_, who_) {
  for (const Node& node : program_.nodes) {  // splits the group communicators now: compile is collective
    if (node.kind == OpKind::batch_norm)
      batch_norm_groups_.join(node.batch_norm.group_size, "node '" + node.name + "' (batch_norm)");
    if (node.kind == OpKind::halo_exchange || node.kind == OpKind::spatial_gather) build_spatial_op(node);
  }
}

// The sample's ranks (prod(grid) consecutive ones) share a communicator, split at compile (collective).
void ReferenceModel::build_spatial_op(const Node& node) {
  const std::string where = "node '" + node.name + "' (" +
                            (node.kind == OpKind::halo_exchange ? "halo_exchange" : "spatial_gather") + "): grid " +
                            sdk::spatial::grid_text(node.grid);
  const MLPH_CommsHandle* group = rank_groups_.group(sdk::spatial::ranks(node.grid), where);
  const ValueInfo& x = program_.values[static_cast<size_t>(node.inputs[0])];
  if (node.kind == OpKind::halo_exchange)
    halos_.try_emplace(node.index, host_, group, x.shape, node.grid, node.before, node.after,
                       who_ + ": " + where);
  else
    gathers_.try_emplace(node.index, host_, group, x.shape, node.grid, who_ + ": " + where);
}

void ReferenceModel::forward_node(const Node& c, bool training, uint64_t step) {
  ThreadPool& pool = *pool_;
  const float* x = data(c.inputs[0]);
  float* y = data(c.output);
  const int64_t n = numel(c.output);
  const auto attr = static_cast<float>(c.attr);
  auto input = [&](size_t i) { return data(c.inputs[i]); };
  switch (c.kind) {
    case OpKind::log1p:
      log1p_forward(pool, n, x, y);
      break;
    case OpKind::conv_transpose:
      conv_transpose_forward(pool, conv_scratch_, c.window, x, input(1), c.has_bias() ? input(2) : nullptr, y);
      break;
    case OpKind::batch_norm:
      if (!training) {
        batch_norm_eval_forward(pool, c.rows, c.batch_norm, x, input(1), input(2), input(3), input(4), y);
        break;
      }
      saved_[c.index].resize(static_cast<size_t>(2 * c.rows.channels));
      batch_norm_train_forward(pool, c.rows, c.batch_norm, x, input(1), input(2), data(c.inputs[3]), data(c.inputs[4]),
                               saved_[c.index].data(), y, batch_norm_groups_.find(c.batch_norm.group_size));
      break;
    case OpKind::add:
      add_forward(pool, n, x, input(1), y);
      break;
    case OpKind::concat: {
      std::vector<const float*> parts;
      for (size_t i = 0; i < c.inputs.size(); ++i) parts.push_back(input(i));
      concat_forward(pool, c.rows.rows, parts, c.widths, y);
      break;
    }
    case OpKind::global_avg_pool:
      global_avg_pool_forward(pool, c.batch, c.rows.rows / c.batch, c.rows.channels, x, y);
      break;
    case OpKind::broadcast:
      broadcast_forward(pool, c.in_shape, c.out_shape, x, y);
      break;
    case OpKind::channel_affine:
      channel_affine_forward(pool, c.rows, x, input(1), input(2), y);
      break;
    case OpKind::shift_scale:
      shift_scale_forward(pool, c.rows, x, input(1), input(2), y);
      break;
    case OpKind::softmax_cross_entropy:
      y[0] =
          static_cast<float>(softmax_cross_entropy_forward(pool, c.rows, x, checked_labels(c), c.class_weights.data()));
      break;
    case OpKind::iou:
      iou_forward(pool, c.rows, c.batch, x, checked_labels(c), y);
      break;
    case OpKind::conv:
      conv_forward(pool, conv_scratch_, c.window, x, data(c.inputs[1]), c.has_bias() ? data(c.inputs[2]) : nullptr, y);
      break;
    case OpKind::leaky_relu:
      leaky_relu_forward(pool, n, attr, x, y);
      break;
    case OpKind::relu:
      relu_forward(pool, n, x, y);
      break;
    case OpKind::tanh:
      tanh_forward(pool, n, x, y);
      break;
    case OpKind::scale:
      scale_forward(pool, n, attr, x, y);
      break;
    case OpKind::max_pool:
      max_pool_forward(pool, c.window, x, y);
      break;
    case OpKind::reshape:
      copy_forward(pool, n, x, y);
      break;
    case OpKind::dense:
      dense_forward(pool, c.dense, x, data(c.inputs[1]), c.has_bias() ? data(c.inputs[2]) : nullptr, y);
      break;
    case OpKind::dropout: {
      std::vector<float>& mask = saved_[c.index];
      if (!training || c.attr == 0.0) {  // identity; an empty mask tells backward so
        mask.clear();
        copy_forward(pool, n, x, y);
        break;
      }
      mask.resize(static_cast<size_t>(n));
      dropout_mask(n, c.attr, program_.seed, c.index, step, mask.data());
      mask_forward(pool, n, mask.data(), x, y);
      break;
    }
    case OpKind::mse:
      y[0] = static_cast<float>(mse_forward(numel(c.inputs[0]), x, data(c.inputs[1])));
      break;
    case OpKind::halo_exchange:
      halos_.at(c.index).forward(x, y);
      break;
    case OpKind::spatial_gather:
      gathers_.at(c.index).forward(x, y);
      break;
    case OpKind::abs_error_sum:
      y[0] = static_cast<float>(abs_error_sum(numel(c.inputs[0]), x, data(c.inputs[1])));
      break;
  }
}

void ReferenceModel::backward_node(const Node& c) {
  ThreadPool& pool = *pool_;
  const float* dy = grad(c.output);
  const float* x = data(c.inputs[0]);
  float* dx = grad(c.inputs[0]);
  const int64_t n = numel(c.output);
  const auto attr = static_cast<float>(c.attr);
  switch (c.kind) {
    case OpKind::log1p:
    case OpKind::abs_error_sum:
      break;  // no gradient (docs/ops.md)
    case OpKind::conv:
      if (dx) conv_backward_data(pool, conv_scratch_, c.window, data(c.inputs[1]), dy, dx);
      conv_backward_weights(pool, conv_scratch_, c.window, x, dy, grad(c.inputs[1]),
                            c.has_bias() ? grad(c.inputs[2]) : nullptr);
      break;
    case OpKind::dense:
      dense_backward(pool, c.dense, x, data(c.inputs[1]), dy, dx, grad(c.inputs[1]),
                     c.has_bias() ? grad(c.inputs[2]) : nullptr);
      break;
    case OpKind::max_pool:
      if (dx) max_pool_backward(pool, c.window, x, dy, dx);
      break;
    case OpKind::mse:
      mse_backward(numel(c.inputs[0]), x, data(c.inputs[1]), dy[0], dx, grad(c.inputs[1]));
      break;
    case OpKind::leaky_relu:
      if (dx) leaky_relu_backward(pool, n, attr, x, dy, dx);
      break;
    case OpKind::relu:
      if (dx) relu_backward(pool, n, x, dy, dx);
      break;
    case OpKind::tanh:
      if (dx) tanh_backward(pool, n, data(c.output), dy, dx);
      break;
    case OpKind::scale:
      if (dx) scale_backward(pool, n, attr, dy, dx);
      break;
    case OpKind::reshape:
      if (dx) copy_backward(pool, n, dy, dx);
      break;
    case OpKind::dropout:
      if (!dx) break;
      if (saved_[c.index].empty())
        copy_backward(pool, n, dy, dx);
      else
        mask_backward(pool, n, saved_[c.index].data(), dy, dx);
      break;
    case OpKind::conv_transpose:
      conv_transpose_backward(pool, conv_scratch_, c.window, x, data(c.inputs[1]), dy, dx, grad(c.inputs[1]),
                              c.has_bias() ? grad(c.inputs[2]) : nullptr);
      break;
    case OpKind::batch_norm:
      batch_norm_backward(pool, c.rows, x, data(c.inputs[1]), saved_[c.index].data(), dy, dx, grad(c.inputs[1]),
                          grad(c.inputs[2]), batch_norm_groups_.find(c.batch_norm.group_size));
      break;
    case OpKind::add:
      for (size_t i = 0; i < 2; ++i)
        if (float* g = grad(c.inputs[i])) copy_backward(pool, n, dy, g);
      break;
    case OpKind::concat: {
      std::vector<float*> grads;
      for (int32_t in : c.inputs) grads.push_back(grad(in));
      concat_backward(pool, c.rows.rows, grads, c.widths, dy);
      break;
    }
    case OpKind::global_avg_pool:
      if (dx) global_avg_pool_backward(pool, c.batch, c.rows.rows / c.batch, c.rows.channels, dy, dx);
      break;
    case OpKind::broadcast:
      if (dx) broadcast_backward(pool, c.in_shape, c.out_shape, dy, dx);
      break;
    case OpKind::channel_affine:
      channel_affine_backward(pool, c.rows, x, data(c.inputs[1]), dy, dx, grad(c.inputs[1]), grad(c.inputs[2]));
      break;
    case OpKind::softmax_cross_entropy:
      if (dx) softmax_cross_entropy_backward(pool, c.rows, x, labels(c.inputs[1]), c.class_weights.data(), dy[0], dx);
      break;
    case OpKind::shift_scale:
    case OpKind::iou:
      break;  // no gradient (docs/ops.md)
    case OpKind::halo_exchange:
      if (dx) halos_.at(c.index).backward(dy, dx, true);
      break;
    case OpKind::spatial_gather:
      if (dx) gathers_.at(c.index).backward(dy, dx, true);
      break;
  }
}

// Keras kernel_regularizer: l2 * sum(w^2) joins the loss, 2 * l2 * w the gradient.
double ReferenceModel::regularize() {
  double penalty = 0;
  for (const Param& p : program_.params) {
    if (p.l2 == 0.0) continue;
    penalty += l2_penalty(numel(p.value), p.l2, data(p.value));
    if (p.trainable) l2_backward(numel(p.value), p.l2, data(p.value), grad(p.value));
  }
  return penalty;
}

void ReferenceModel::apply_optimizer(double learning_rate, uint64_t step) {
  const OptimizerSpec& opt = program_.optimizer;
  const uint64_t t = step + 1;
  // LAMB clips by the norm of all trainable gradients together (one buffer: param_grads_).
  float clip = 1.0f;
  if (opt.kind == OptimizerKind::lamb) {
    const double norm = l2_norm(*pool_, static_cast<int64_t>(param_grads_.size()), param_grads_.data());
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
        sgd_keras_update(n, learning_rate, opt.momentum, grad(p.value), m, data(p.value));
        break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw:
        adam_update(*pool_, n, learning_rate, opt.adam, t, decay, opt.kind == OptimizerKind::adamw, grad(p.value), m,
                    m + n, data(p.value));
        break;
      case OptimizerKind::lamb:
        lamb_update(*pool_, n, learning_rate, opt.adam, t, decay, clip, grad(p.value), m, m + n, data(p.value),
                    lamb_update_.data());
        break;
    }
  }
}

void ReferenceModel::zero(float* data, int64_t n) {
  pool_->parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) { std::fill(data + begin, data + end, 0.0f); });
}

void ReferenceModel::load_floats(MLPH_DType dtype, const void* src, int64_t n, float* dst) {
  if (dtype == MLPH_DTYPE_F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {  // int16
    const auto* from = static_cast<const int16_t*>(src);
    std::transform(from, from + n, dst, [](int16_t v) { return static_cast<float>(v); });
  }
}

}  // namespace mlph::reference
