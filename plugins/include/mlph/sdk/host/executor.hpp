// For host backends that run an sdk::program::Program (program/program.hpp) node by node on kernels of
// their own: everything of a model but the kernels. The step protocol (the window, the state slots,
// the checks and their errors) is sdk::ModelProtocol's; here are the buffers, the one dispatch over
// the op kinds, forward and backward, the regularization and the optimizers. Every value has its own
// buffer; gradients exist only for the values between a trainable parameter and the loss, the
// trainable parameters' all in one buffer, averaged over the ranks in buckets overlapped with
// backward (sdk::GradientBuckets); batch-norm groups and the spatial ops are the SDK's.
//
// A backend supplies `Kernels`, a type of its own namespace:
//   struct Kernels {
//     using Buffer = std::vector<float>;  // every value's buffer (or a vector with another allocator)
//     ThreadPool& threads();              // what every kernel takes first (a pool, an OpenMP count...)
//     Scratch scratch;                    // what conv, conv_transpose and dense take second
//   };
// and its kernels as free functions beside it, called unqualified with threads() first, so that
// argument-dependent lookup finds them: `relu_forward(threads, n, x, y)`. forward_node and
// backward_node below are the list of what a backend implements; their signatures are those of
// backends/reference/ops.hpp. Calls resolve at compile time: no cost over calling the kernels directly.
//
// A backend that runs the executor somewhere else (a device emulated on the host, whose stream runs
// the work: tests/plugins/emulated_device) derives from it, constructs it with
// GradientAveraging::by_backend and drives run_train's stages itself: load_inputs, forward_backward,
// then with plan.apply_update its own average of parameter_gradients() over the ranks, and update.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlph/sdk/comms/rank_groups.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/host/batch_norm_groups.hpp"
#include "mlph/sdk/host/gradient_buckets.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/model/protocol.hpp"
#include "mlph/sdk/program/program.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk::host {

// Who averages the trainable parameters' gradients over the ranks when an update applies: the
// executor (in buckets overlapped with backward, over the comms' host calls), or the backend deriving
// from it, between forward_backward and update (e.g. with stream-ordered device collectives).
enum class GradientAveraging { buckets, by_backend };

template <class Kernels>
class Executor : public ModelProtocol {
 public:
  using Buffer = typename Kernels::Buffer;

  // Allocates every buffer, moves the parameters' initial contents in and splits the communicators
  // of the batch-norm groups and spatial ops (collective, as compile is). `who` starts every error
  // line ("reference backend"); `comms` may be null (one rank).
  Executor(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, program::Program program, std::string who, Kernels kernels,
           GradientAveraging averaging = GradientAveraging::buckets);

 protected:
  // ---- the protocol's hooks (sdk/model/protocol.hpp) ----
  void run_train(const MLPH_Tensor* inputs, const StepPlan& plan) override;
  double last_loss() override { return loss_; }
  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override;
  void zero_gradients() override;
  float* host_storage(const ParamTensor& tensor) override;

  // ---- run_train's stages, for a backend that drives them (GradientAveraging::by_backend) ----
  void load_inputs(const MLPH_Tensor* inputs);
  // Forward and backward of the loaded micro-batch: the loss, and its gradient added to the window's sum.
  void forward_backward(const StepPlan& plan);
  // After the average over the ranks: the regularization (into the gradient and the loss) and the optimizer.
  void update(const StepPlan& plan);
  // The trainable parameters' gradients, all in one buffer (graph order): what the ranks average.
  std::span<float> parameter_gradients() { return {param_grads_.data(), param_grads_.size()}; }

 private:
  const program::ValueInfo& info(int32_t v) const { return program_.value(v); }
  int64_t numel(int32_t v) const { return info(v).numel(); }
  float* data(int32_t v) { return values_[static_cast<size_t>(v)].data(); }
  float* grad(int32_t v) const { return grads_[static_cast<size_t>(v)]; }
  const int32_t* labels(int32_t v) const { return int_values_[static_cast<size_t>(v)].data(); }
  // The labels of a softmax_cross_entropy or iou node, checked to lie in [0, C): a clear error naming
  // the node instead of a read out of bounds.
  const int32_t* checked_labels(const program::Node& node) const;

  std::vector<GradientBuckets::Param> allocate();
  void build_group_ops();
  void forward_node(const program::Node& node, bool training, uint64_t step);
  void backward(bool apply_update);
  void backward_node(const program::Node& node);
  double regularize();
  void apply_optimizer(double learning_rate, uint64_t step);

  const MLPH_CommsHandle* comms_;
  program::Program program_;
  Kernels kernels_;
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
  double loss_ = 0;  // the last training step's

  // Communicators of consecutive ranks split from the run's: batch-norm groups, a split sample's ranks.
  RankGroups rank_groups_;
  BatchNormGroups batch_norm_groups_;  // SyncBatchNorm: the sum over each group size's communicator
  std::map<uint64_t, spatial::HaloExchange> halos_;     // by node index
  std::map<uint64_t, spatial::SpatialGather> gathers_;  // by node index
  // With several ranks: averages param_grads_ during backward (declared last: stops before the buffer goes).
  std::unique_ptr<GradientBuckets> buckets_;
};

template <class Kernels>
Executor<Kernels>::Executor(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, program::Program program,
                            std::string who, Kernels kernels, GradientAveraging averaging)
    : ModelProtocol(host, std::move(who), signature_of(program, program.optimizer.state)),
      comms_(comms),
      program_(std::move(program)),
      kernels_(std::move(kernels)),
      rank_groups_(host, comms, who_),
      batch_norm_groups_(host, rank_groups_, who_) {
  if (comms_ &&
      (comms_->struct_size < MLPH_STRUCT_SIZE(MLPH_CommsHandle, comm) || !comms_->api || !comms_->api->allreduce))
    fail(MLPH_INVALID_ARGUMENT, who_ + ": the comms handle has no allreduce");
  const std::vector<GradientBuckets::Param> gradients = allocate();
  build_group_ops();
  if (comms_ && !param_grads_.empty() && averaging == GradientAveraging::buckets)
    buckets_ = std::make_unique<GradientBuckets>(host_, *comms_, param_grads_.data(), gradients);
}

// Returns where each trainable parameter's gradient lies in param_grads_.
template <class Kernels>
std::vector<GradientBuckets::Param> Executor<Kernels>::allocate() {
  program::Program& p = program_;
  for (const program::ValueInfo& v : p.values) {
    const auto n = static_cast<size_t>(v.numel());
    values_.emplace_back(v.dtype == MLPH_DTYPE_I32 ? 0 : n, 0.0f);
    int_values_.emplace_back(v.dtype == MLPH_DTYPE_I32 ? n : 0, 0);
  }
  const size_t moments = p.optimizer.state.size();  // sgd_keras: velocity; the Adams: m, v
  size_t largest = 0;
  for (program::Param& param : p.params) {
    const size_t trained = param.trainable ? param.init.size() : 0;
    std::copy(param.init.begin(), param.init.end(), data(param.value));
    std::vector<float>().swap(param.init);  // the weights live in values_ from now on
    optimizer_state_.emplace_back(moments * trained, 0.0f);
    largest = std::max(largest, trained);
  }
  if (p.optimizer.kind == program::OptimizerKind::lamb) lamb_update_.resize(largest);
  // Trainable parameters' gradients are slices of one buffer (allocated before any pointer into it).
  const std::vector<GradientBuckets::Param> layout = program::gradient_layout(p);
  param_grads_.assign(layout.empty() ? 0 : layout.back().offset + layout.back().count, 0.0f);
  grads_.assign(p.values.size(), nullptr);
  auto slice = layout.begin();
  for (const program::Param& param : p.params)
    if (param.trainable) grads_[static_cast<size_t>(param.value)] = param_grads_.data() + (slice++)->offset;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.needs_gradient[v] && !grads_[v]) grads_[v] = other_grads_.emplace_back(values_[v].size(), 0.0f).data();
  saved_.resize(p.nodes.size());
  return layout;
}

// The batch-norm groups and the spatial ops' communicators, split node by node (collective: every
// rank compiles the same graph).
template <class Kernels>
void Executor<Kernels>::build_group_ops() {
  for (const program::Node& node : program_.nodes) {
    if (node.kind == program::OpKind::batch_norm)
      batch_norm_groups_.join(node.batch_norm.group_size, "node '" + node.name + "' (batch_norm)");
    if (node.kind != program::OpKind::halo_exchange && node.kind != program::OpKind::spatial_gather) continue;
    const bool halo = node.kind == program::OpKind::halo_exchange;
    const std::string where = "node '" + node.name + "' (" + (halo ? "halo_exchange" : "spatial_gather") +
                              "): grid " + spatial::grid_text(node.grid);
    const MLPH_CommsHandle* group = rank_groups_.group(spatial::ranks(node.grid), where);
    const program::ValueInfo& x = info(node.inputs[0]);
    if (halo)
      halos_.try_emplace(node.index, host_, group, x.shape, node.grid, node.before, node.after, who_ + ": " + where);
    else
      gathers_.try_emplace(node.index, host_, group, x.shape, node.grid, who_ + ": " + where);
  }
}

template <class Kernels>
void Executor<Kernels>::load_inputs(const MLPH_Tensor* inputs) {
  for (size_t i = 0; i < program_.inputs.size(); ++i) {
    const int32_t id = program_.inputs[i];
    const int64_t n = numel(id);
    switch (info(id).dtype) {  // float32, int16 or int32, as the validator guarantees
      case MLPH_DTYPE_I32:
        std::memcpy(int_values_[static_cast<size_t>(id)].data(), inputs[i].data, static_cast<size_t>(n) * sizeof(int32_t));
        break;
      case MLPH_DTYPE_I16:
        int16_to_float(kernels_.threads(), n, static_cast<const int16_t*>(inputs[i].data), data(id));
        break;
      default:
        copy_forward(kernels_.threads(), n, static_cast<const float*>(inputs[i].data), data(id));
    }
  }
}

template <class Kernels>
void Executor<Kernels>::run_train(const MLPH_Tensor* inputs, const StepPlan& plan) {
  load_inputs(inputs);
  forward_backward(plan);
  if (!plan.apply_update) return;  // the gradient waits for the rest of its window
  if (buckets_) buckets_->finish();
  update(plan);
}

template <class Kernels>
void Executor<Kernels>::forward_backward(const StepPlan& plan) {
  for (const program::Node& node : program_.nodes) forward_node(node, true, plan.micro_step);
  backward(plan.apply_update);
  loss_ = static_cast<double>(data(program_.loss)[0]);
}

// Regularization joins after the averaging, once per update: the weights, hence 2 * l2 * w, are the
// same on every rank and across the window.
template <class Kernels>
void Executor<Kernels>::update(const StepPlan& plan) {
  loss_ += regularize();
  apply_optimizer(plan.learning_rate, plan.step);
}

template <class Kernels>
void Executor<Kernels>::run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) {
  load_inputs(inputs);
  for (const program::Node& node : program_.nodes) forward_node(node, false, 0);
  for (size_t i = 0; i < program_.eval_outputs.size(); ++i) {
    const int32_t v = program_.eval_outputs[i];
    if (info(v).dtype == MLPH_DTYPE_I32)
      std::memcpy(outputs[i].data, labels(v), int_values_[static_cast<size_t>(v)].size() * sizeof(int32_t));
    else
      std::memcpy(outputs[i].data, data(v), static_cast<size_t>(numel(v)) * sizeof(float));
  }
}

template <class Kernels>
void Executor<Kernels>::zero_gradients() {
  fill_zero(kernels_.threads(), static_cast<int64_t>(param_grads_.size()), param_grads_.data());
}

template <class Kernels>
float* Executor<Kernels>::host_storage(const ParamTensor& tensor) {
  const program::Param& p = program_.params[tensor.param];
  switch (tensor.kind) {
    case ParamTensor::Kind::value:
      return data(p.value);
    case ParamTensor::Kind::gradient:
      return grad(p.value);
    case ParamTensor::Kind::optimizer_state:
      break;
  }
  return optimizer_state_[tensor.param].data() + static_cast<int64_t>(tensor.slot) * numel(p.value);
}

template <class Kernels>
const int32_t* Executor<Kernels>::checked_labels(const program::Node& node) const {
  const int32_t* l = labels(node.inputs[1]);
  const int64_t count = node.rows.rows, classes = node.rows.channels;
  for (int64_t i = 0; i < count; ++i)
    if (l[i] < 0 || l[i] >= classes)
      fail(MLPH_INVALID_ARGUMENT, who_ + ": node '" + node.name + "': label " + std::to_string(l[i]) + " at position " +
                                      std::to_string(i) + " of '" + info(node.inputs[1]).name + "' is outside [0, " +
                                      std::to_string(classes) + ")");
  return l;
}

template <class Kernels>
void Executor<Kernels>::forward_node(const program::Node& c, bool training, uint64_t step) {
  using program::OpKind;
  auto&& t = kernels_.threads();
  auto& scratch = kernels_.scratch;
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
      conv_forward(t, scratch, c.window, x, input(1), bias(), y);
      break;
    case OpKind::conv_transpose:
      conv_transpose_forward(t, scratch, c.window, x, input(1), bias(), y);
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
      copy_forward(t, n, x, y);
      break;
    case OpKind::dense:
      dense_forward(t, scratch, c.dense, x, input(1), bias(), y);
      break;
    case OpKind::dropout: {
      Buffer& mask = saved_[c.index];
      if (!training || c.attr == 0.0) {  // identity; an empty mask tells backward so
        mask.clear();
        copy_forward(t, n, x, y);
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
      batch_norm_train_forward(t, c.rows, c.batch_norm, x, input(1), input(2), input(3), input(4),
                               saved_[c.index].data(), y, batch_norm_groups_.find(c.batch_norm.group_size));
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
      halos_.at(c.index).forward(x, y);
      break;
    case OpKind::spatial_gather:
      gathers_.at(c.index).forward(x, y);
      break;
  }
}

// `apply_update`: this micro-batch ends the accumulation window, so its buckets are averaged over the
// ranks as backward finishes them. The parameters' gradients add up across a window (the protocol
// zeroes them when one starts); the other values' start from zero every time.
template <class Kernels>
void Executor<Kernels>::backward(bool apply_update) {
  GradientBuckets* buckets = apply_update ? buckets_.get() : nullptr;
  if (buckets) buckets->start();
  for (Buffer& g : other_grads_) fill_zero(kernels_.threads(), static_cast<int64_t>(g.size()), g.data());
  if (!grad(program_.loss)) return;  // no trainable parameter reaches the loss
  grad(program_.loss)[0] = 1.0f;
  for (auto node = program_.nodes.rbegin(); node != program_.nodes.rend(); ++node) {
    if (grad(node->output)) backward_node(*node);
    if (buckets) buckets->node_done(static_cast<int64_t>(node->index));  // overlaps the allreduce of finished layers
  }
}

// Accumulates into the gradients of the node's inputs; called only when its output has one.
template <class Kernels>
void Executor<Kernels>::backward_node(const program::Node& c) {
  using program::OpKind;
  auto&& t = kernels_.threads();
  auto& scratch = kernels_.scratch;
  const float* dy = grad(c.output);
  const float* x = data(c.inputs[0]);
  float* dx = grad(c.inputs[0]);
  const int64_t n = numel(c.output);
  const auto attr = static_cast<float>(c.attr);
  auto input = [&](size_t i) { return data(c.inputs[i]); };
  auto grad_of = [&](size_t i) { return i < c.inputs.size() ? grad(c.inputs[i]) : nullptr; };
  auto bias_grad = [&]() { return c.has_bias() ? grad_of(2) : nullptr; };
  switch (c.kind) {
    case OpKind::log1p:
    case OpKind::abs_error_sum:
    case OpKind::shift_scale:
    case OpKind::iou:
      break;  // no gradient (docs/ops.md)
    case OpKind::conv:
      if (dx) conv_backward_data(t, scratch, c.window, input(1), dy, dx);
      conv_backward_weights(t, scratch, c.window, x, dy, grad_of(1), bias_grad());
      break;
    case OpKind::conv_transpose:
      conv_transpose_backward(t, scratch, c.window, x, input(1), dy, dx, grad_of(1), bias_grad());
      break;
    case OpKind::dense:
      dense_backward(t, c.dense, x, input(1), dy, dx, grad_of(1), bias_grad());
      break;
    case OpKind::max_pool:
      if (dx) max_pool_backward(t, c.window, x, dy, dx);
      break;
    case OpKind::mse:
      mse_backward(t, numel(c.inputs[0]), x, input(1), dy[0], dx, grad_of(1));
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
      if (dx) copy_backward(t, n, dy, dx);
      break;
    case OpKind::dropout:
      if (!dx) break;
      if (saved_[c.index].empty())
        copy_backward(t, n, dy, dx);
      else
        mask_backward(t, n, saved_[c.index].data(), dy, dx);
      break;
    case OpKind::batch_norm:
      batch_norm_backward(t, c.rows, x, input(1), saved_[c.index].data(), dy, dx, grad_of(1), grad_of(2),
                          batch_norm_groups_.find(c.batch_norm.group_size));
      break;
    case OpKind::add:
      for (size_t i = 0; i < 2; ++i)
        if (float* g = grad_of(i)) copy_backward(t, n, dy, g);
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
      channel_affine_backward(t, c.rows, x, input(1), dy, dx, grad_of(1), grad_of(2));
      break;
    case OpKind::softmax_cross_entropy:
      if (dx) softmax_cross_entropy_backward(t, c.rows, x, labels(c.inputs[1]), c.class_weights.data(), dy[0], dx);
      break;
    case OpKind::halo_exchange:
      if (dx) halos_.at(c.index).backward(dy, dx, true);
      break;
    case OpKind::spatial_gather:
      if (dx) gathers_.at(c.index).backward(dy, dx, true);
      break;
  }
}

// Keras kernel_regularizer: l2 * sum(w^2) joins the loss, 2 * l2 * w the gradient.
template <class Kernels>
double Executor<Kernels>::regularize() {
  double penalty = 0;
  for (const program::Param& p : program_.params) {
    if (p.l2 == 0.0) continue;
    penalty += l2_penalty(kernels_.threads(), numel(p.value), p.l2, data(p.value));
    if (p.trainable) l2_backward(kernels_.threads(), numel(p.value), p.l2, data(p.value), grad(p.value));
  }
  return penalty;
}

template <class Kernels>
void Executor<Kernels>::apply_optimizer(double learning_rate, uint64_t step) {
  auto&& threads = kernels_.threads();
  const program::OptimizerSpec& opt = program_.optimizer;
  const uint64_t t = step + 1;
  // LAMB clips by the norm of all trainable gradients together (one buffer: param_grads_).
  float clip = 1.0f;
  if (opt.kind == program::OptimizerKind::lamb) {
    const double norm = l2_norm(threads, static_cast<int64_t>(param_grads_.size()), param_grads_.data());
    if (norm > opt.adam.max_grad_norm) clip = static_cast<float>(norm / opt.adam.max_grad_norm);
  }
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const program::Param& p = program_.params[i];
    if (!p.trainable) continue;
    const int64_t n = numel(p.value);
    float* m = optimizer_state_[i].data();
    const double decay = opt.adam.weight_decay * p.weight_decay;
    switch (opt.kind) {
      case program::OptimizerKind::sgd_keras:
        sgd_keras_update(threads, n, learning_rate, opt.momentum, grad(p.value), m, data(p.value));
        break;
      case program::OptimizerKind::adam:
      case program::OptimizerKind::adamw:
        adam_update(threads, n, learning_rate, opt.adam, t, decay, opt.kind == program::OptimizerKind::adamw, grad(p.value), m,
                    m + n, data(p.value));
        break;
      case program::OptimizerKind::lamb:
        lamb_update(threads, n, learning_rate, opt.adam, t, decay, clip, grad(p.value), m, m + n, data(p.value),
                    lamb_update_.data());
        break;
    }
  }
}

}  // namespace mlph::sdk::host
