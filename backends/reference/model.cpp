#include "model.hpp"

#include <algorithm>
#include <cstring>

#include "mlph/sdk/comms.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::reference {
namespace {
using sdk::fail;

void zero(ThreadPool& pool, float* data, int64_t n) {
  pool.parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) { std::fill(data + begin, data + end, 0.0f); });
}

}  // namespace

ReferenceModel::ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                               const MLPH_CommsHandle* comms)
    : host_(host),
      pool_(std::move(pool)),
      comms_(comms),
      program_(sdk::host::lower_graph(graph, sdk::host::implements())),
      rank_groups_(host, comms, "reference backend"),
      batch_norm_groups_(host, rank_groups_, "reference backend") {
  if (comms_ &&
      (comms_->struct_size < MLPH_STRUCT_SIZE(MLPH_CommsHandle, comm) || !comms_->api || !comms_->api->allreduce))
    fail(MLPH_INVALID_ARGUMENT, "reference backend: the comms handle has no allreduce");
  const std::vector<sdk::GradientBuckets::Param> gradients = allocate();
  for (const Node& node : program_.nodes) {  // splits the group communicators now: compile is collective
    if (node.kind == OpKind::batch_norm)
      batch_norm_groups_.join(node.batch_norm.group_size, "node '" + node.name + "' (batch_norm)");
    if (node.kind == OpKind::halo_exchange || node.kind == OpKind::spatial_gather) build_spatial_op(node);
  }
  if (comms_ && !param_grads_.empty())
    buckets_ = std::make_unique<sdk::GradientBuckets>(host_, *comms_, param_grads_.data(), gradients);
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
                       "reference backend: " + where);
  else
    gathers_.try_emplace(node.index, host_, group, x.shape, node.grid, "reference backend: " + where);
}

// Returns where each trainable parameter's gradient lies in param_grads_.
std::vector<sdk::GradientBuckets::Param> ReferenceModel::allocate() {
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
  const std::vector<sdk::GradientBuckets::Param> layout = sdk::host::gradient_layout(p);
  param_grads_.assign(layout.empty() ? 0 : layout.back().offset + layout.back().count, 0.0f);
  grads_.assign(p.values.size(), nullptr);
  auto slice = layout.begin();
  for (const Param& param : p.params)
    if (param.trainable) grads_[static_cast<size_t>(param.value)] = param_grads_.data() + (slice++)->offset;
  const std::vector<bool> needed = sdk::host::values_needing_gradients(p);
  for (size_t v = 0; v < p.values.size(); ++v)
    if (needed[v] && !grads_[v]) grads_[v] = other_grads_.emplace_back(values_[v].size(), 0.0f).data();
  saved_.resize(p.nodes.size());
  return layout;
}

void ReferenceModel::load_inputs(const MLPH_Tensor* inputs, size_t n) {
  if (n != program_.inputs.size())
    fail(MLPH_INVALID_ARGUMENT,
         "reference backend: expected " + std::to_string(program_.inputs.size()) + " inputs, got " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = program_.inputs[i];
    const ValueInfo& info = program_.values[static_cast<size_t>(id)];
    if (inputs[i].struct_size < MLPH_STRUCT_SIZE(MLPH_Tensor, data) || !inputs[i].data)
      fail(MLPH_INVALID_ARGUMENT, "reference backend: input '" + info.name + "' is not a valid tensor");
    sdk::check_matches(inputs[i], info.as_value(), "reference backend: input");
    if (info.dtype == MLPH_DTYPE_I32) {
      std::memcpy(int_values_[static_cast<size_t>(id)].data(), inputs[i].data,
                  static_cast<size_t>(info.numel()) * sizeof(int32_t));
      continue;
    }
    float* dst = data(id);
    if (info.dtype == MLPH_DTYPE_F32) {
      std::memcpy(dst, inputs[i].data, static_cast<size_t>(numel(id)) * sizeof(float));
    } else {  // int16, as the validator guarantees
      const auto* src = static_cast<const int16_t*>(inputs[i].data);
      std::transform(src, src + numel(id), dst, [](int16_t v) { return static_cast<float>(v); });
    }
  }
}

void ReferenceModel::forward(bool training, uint64_t step) {
  for (const Node& node : program_.nodes) forward_node(node, training, step);
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

// `apply_update`: this micro-batch ends the accumulation window, so its buckets are averaged over the
// ranks as backward finishes them. The parameters' gradients add up across a window: zeroed only at
// its start.
void ReferenceModel::backward(bool apply_update) {
  sdk::GradientBuckets* buckets = apply_update ? buckets_.get() : nullptr;
  if (buckets) buckets->start();
  if (!accumulating_) zero(*pool_, param_grads_.data(), static_cast<int64_t>(param_grads_.size()));
  accumulating_ = !apply_update;
  for (std::vector<float>& g : other_grads_) zero(*pool_, g.data(), static_cast<int64_t>(g.size()));
  if (!grad(program_.loss)) return;  // no trainable parameter reaches the loss
  grad(program_.loss)[0] = 1.0f;
  for (auto node = program_.nodes.rbegin(); node != program_.nodes.rend(); ++node) {
    if (grad(node->output)) backward_node(*node);
    if (buckets) buckets->node_done(static_cast<int64_t>(node->index));  // overlaps the allreduce of finished layers
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

// Waits for the bucket allreduces that backward started (see GradientBuckets).
void ReferenceModel::average_gradients() {
  if (buckets_) buckets_->finish();
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

void ReferenceModel::train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                                MLPH_StepResult& out) {
  const sdk::StepPlan plan = sdk::read_step_args(args, "reference backend");
  load_inputs(inputs, n_inputs);
  forward(true, plan.micro_step);
  backward(plan.apply_update);
  // A NaN or Inf stays in the reported loss: the core decides what divergence means.
  const double loss = static_cast<double>(data(program_.loss)[0]);
  if (!plan.apply_update) {
    out.loss = loss;  // the gradient waits for the rest of its window
    return;
  }
  // Regularization joins after the averaging, once per update: the weights, hence 2 * l2 * w, are the
  // same on every rank and across the window.
  average_gradients();
  out.loss = loss + regularize();
  apply_optimizer(plan.learning_rate, plan.step);
}

void ReferenceModel::eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) {
  if (n_outputs != program_.eval_outputs.size())
    fail(MLPH_INVALID_ARGUMENT, "reference backend: expected " + std::to_string(program_.eval_outputs.size()) +
                                    " eval outputs, got " + std::to_string(n_outputs));
  for (size_t i = 0; i < n_outputs; ++i)
    sdk::check_matches(outputs[i], program_.values[static_cast<size_t>(program_.eval_outputs[i])].as_value(),
                       "reference backend: eval output");
  load_inputs(inputs, n_inputs);
  forward(false, 0);
  for (size_t i = 0; i < n_outputs; ++i) {
    const int32_t v = program_.eval_outputs[i];
    if (program_.values[static_cast<size_t>(v)].dtype == MLPH_DTYPE_I32)
      std::memcpy(outputs[i].data, labels(v), int_values_[static_cast<size_t>(v)].size() * sizeof(int32_t));
    else
      std::memcpy(outputs[i].data, data(v), static_cast<size_t>(numel(v)) * sizeof(float));
  }
}

// The labels of a softmax_cross_entropy or iou node, checked to lie in [0, C): a clear error naming the node
// instead of a read out of bounds.
const int32_t* ReferenceModel::checked_labels(const Node& c) const {
  const int32_t* l = labels(c.inputs[1]);
  const int64_t count = c.rows.rows, classes = c.rows.channels;
  for (int64_t i = 0; i < count; ++i)
    if (l[i] < 0 || l[i] >= classes)
      fail(MLPH_INVALID_ARGUMENT, "reference backend: node '" + c.name + "': label " + std::to_string(l[i]) +
                                      " at position " + std::to_string(i) + " of '" +
                                      program_.values[static_cast<size_t>(c.inputs[1])].name + "' is outside [0, " +
                                      std::to_string(classes) + ")");
  return l;
}

const Param& ReferenceModel::param(size_t index) const {
  if (index >= program_.params.size())
    fail(MLPH_OUT_OF_RANGE, "reference backend: no parameter " + std::to_string(index) + " (the graph has " +
                                std::to_string(program_.params.size()) + ")");
  return program_.params[index];
}

void ReferenceModel::read_parameter(size_t index, MLPH_Tensor& dst) {
  const Param& p = param(index);
  sdk::check_matches(dst, program_.values[static_cast<size_t>(p.value)].as_value(), "reference backend: parameter");
  std::memcpy(dst.data, data(p.value), static_cast<size_t>(numel(p.value)) * sizeof(float));
}

void ReferenceModel::write_parameter(size_t index, const MLPH_Tensor& src) {
  const Param& p = param(index);
  sdk::check_matches(src, program_.values[static_cast<size_t>(p.value)].as_value(), "reference backend: parameter");
  std::memcpy(data(p.value), src.data, static_cast<size_t>(numel(p.value)) * sizeof(float));
}

void ReferenceModel::read_gradient(size_t index, MLPH_Tensor& dst) {
  const Param& p = param(index);
  if (!p.trainable)
    fail(MLPH_FAILED_PRECONDITION, "reference backend: parameter '" +
                                       program_.values[static_cast<size_t>(p.value)].name +
                                       "' is not trainable and has no gradient");
  sdk::check_matches(dst, program_.values[static_cast<size_t>(p.value)].as_value(), "reference backend: gradient");
  std::memcpy(dst.data, grad(p.value), static_cast<size_t>(numel(p.value)) * sizeof(float));
}

// The buffer behind state slot `slot` of parameter `index`, checked against `tensor` (docs/abi.md, ABI 1.4).
float* ReferenceModel::state_slot(size_t index, const std::string& slot, const MLPH_Tensor& tensor, bool reading) {
  const Param& p = param(index);
  const ValueInfo& value = program_.values[static_cast<size_t>(p.value)];
  sdk::check_matches(tensor, value.as_value(), "reference backend: state '" + slot + "' of");
  if (!p.trainable)
    fail(MLPH_NOT_FOUND, "reference backend: parameter '" + value.name + "' is not trainable and has no state");
  if (slot == sdk::kPendingGradientSlot) {
    if (reading && !accumulating_)
      fail(MLPH_FAILED_PRECONDITION, "reference backend: no accumulation window is open: no pending gradient");
    return grad(p.value);
  }
  const std::vector<std::string>& slots = program_.optimizer.state;
  const auto found = std::find(slots.begin(), slots.end(), slot);
  if (found == slots.end())
    fail(MLPH_NOT_FOUND, "reference backend: the optimizer has no state slot '" + slot + "'");
  return optimizer_state_[index].data() + (found - slots.begin()) * numel(p.value);
}

void ReferenceModel::read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) {
  const float* state = state_slot(index, slot, dst, true);
  std::memcpy(dst.data, state, static_cast<size_t>(sdk::numel(dst)) * sizeof(float));
}

void ReferenceModel::write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) {
  float* state = state_slot(index, slot, src, false);
  std::memcpy(state, src.data, static_cast<size_t>(sdk::numel(src)) * sizeof(float));
  if (slot == sdk::kPendingGradientSlot) accumulating_ = true;  // the next micro-batch adds to it
}

}  // namespace mlph::reference
