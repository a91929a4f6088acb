// The cuda model's steps and the protocol's hooks (model_impl.hpp's opening comment: streams, graphs).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "model_impl.hpp"

namespace mlph::cuda {
namespace {

// The loss scale and its count of good steps, as the loss-scale region holds them (fp16).
struct LossScale {
  float scale;
  int32_t good_steps;
};

// backend.profile's kind of a node, as mlperf-bench --layers names its rows (a conv is 1x1 or depthwise
// where it is one), and the FLOPs of one convolution or matmul pass.
std::string kind_of(const sdk::program::Node& n) {
  using sdk::program::OpKind;
  const sdk::program::Window& w = n.window;
  if (n.kind == OpKind::conv && w.groups > 1 && w.groups == w.in_channels) return "depthwise";
  if (n.kind == OpKind::conv && w.taps() == 1) return "1x1";
  if (n.kind == OpKind::relu || n.kind == OpKind::leaky_relu || n.kind == OpKind::tanh) return "activation";
  for (const auto& op : sdk::program::detail::kOps)
    if (op.kind == n.kind) return std::string(op.name);
  return "op";
}
// The least a node's pass moves: its inputs and output once in forward, twice in backward (read again
// with the output's gradient, the inputs' gradients written), in their planned types.
double pass_bytes(const sdk::program::Program& program, const plan::DevicePlan& plan, size_t k, bool backward) {
  const sdk::program::Node& n = program.nodes[k];
  const auto bytes = [&](int32_t v) {
    return static_cast<double>(program.value(v).numel()) *
           static_cast<double>(plan::bytes_of(plan.precision.values[static_cast<size_t>(v)]));
  };
  double total = bytes(n.output);
  for (const int32_t v : n.inputs) total += bytes(v);
  return backward ? 2 * total : total;
}
double pass_flops(const sdk::program::Node& n) {
  using sdk::program::OpKind;
  if (n.kind == OpKind::conv || n.kind == OpKind::conv_transpose) return 2.0 * n.window.macs();
  if (n.kind == OpKind::dense) return 2.0 * static_cast<double>(n.dense.batch * n.dense.in * n.dense.out);
  return 0;
}

}  // namespace

CudaModel::~CudaModel() {
  // Nothing enqueued may outlive the buffers: wait (errors are for the calls that can return them).
  cudaSetDevice(device_);
  for (runtime::Stream* s : {compute_.get(), copy_.get(), comms_stream_.get()})
    if (s) cudaStreamSynchronize(s->get());
  cudaGetLastError();
}

// ---- inputs and the step's scalars ----

// The caller may reuse the last batch's memory once the call after it returns: its copy must be done.
void CudaModel::wait_for_inputs() {
  if (!inputs_pending_) return;
  inputs_copied_->synchronize(where_, "the inputs' copy");
  inputs_pending_ = false;
}

// The batch into staging on the copy stream (overlapping the step before), then into the arena on the
// compute stream, outside any graph.
void CudaModel::copy_inputs(const MLPH_Tensor* inputs) {
  copy_->wait(where_, staging_free_->get());
  for (size_t i = 0; i < program_.inputs.size(); ++i) {
    const int32_t v = program_.inputs[i];
    const size_t bytes = static_cast<size_t>(numel(v)) * mlph_dtype_size(program_.value(v).dtype);
    check(cudaMemcpyAsync(staging_.at(staging_at_[i]), inputs[i].data, bytes, cudaMemcpyHostToDevice, copy_->get()),
          "cudaMemcpyAsync", "input '" + program_.value(v).name + "'");
  }
  inputs_copied_->record(where_, copy_->get());
  inputs_pending_ = true;
  compute_->wait(where_, inputs_copied_->get());
  for (size_t i = 0; i < program_.inputs.size(); ++i) {
    const int32_t v = program_.inputs[i];
    const size_t bytes = static_cast<size_t>(numel(v)) * mlph_dtype_size(program_.value(v).dtype);
    check(cudaMemcpyAsync(at(plan_.memory.values[static_cast<size_t>(v)]), staging_.at(staging_at_[i]), bytes,
                          cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync", "input '" + program_.value(v).name + "'");
  }
  staging_free_->record(where_, stream());
}

// micro_step and the optimizer's per-step scalars (computed on the host as the reference computes them)
// into the control block, from the next pinned slot of a ring: a slot is rewritten once its last copy ran.
void CudaModel::upload_step_scalars(const sdk::StepPlan& step) {
  const size_t slot = next_scalar_slot_++ % kScalarSlots;
  scalars_copied_[slot]->synchronize(where_, "the step's scalars");
  std::byte* out = scalars_pinned_.at<std::byte>(slot * block_.step_bytes);
  std::memcpy(out, &step.micro_step, sizeof step.micro_step);
  std::byte* scalars = out + 16;
  const sdk::program::OptimizerSpec& o = program_.optimizer;
  const uint64_t t = step.step + 1;
  const double lr = step.learning_rate;
  size_t tensor = 0;
  for (const sdk::program::Param& p : program_.params) {
    if (!p.trainable) continue;
    const double decay = o.adam.weight_decay * p.weight_decay;
    switch (o.kind) {
      case sdk::program::OptimizerKind::sgd_keras:
        break;
      case sdk::program::OptimizerKind::adam:
      case sdk::program::OptimizerKind::adamw: {
        const AdamScalars k = adam_scalars(lr, o.adam.beta1, o.adam.beta2, o.adam.eps, t, decay,
                                           o.kind == sdk::program::OptimizerKind::adamw);
        std::memcpy(scalars + tensor * sizeof k, &k, sizeof k);
        break;
      }
      case sdk::program::OptimizerKind::lamb: {
        const LambScalars k = lamb_scalars(lr, o.adam.beta1, o.adam.beta2, o.adam.eps, t, decay);
        std::memcpy(scalars + tensor * sizeof k, &k, sizeof k);
        break;
      }
    }
    ++tensor;
  }
  if (o.kind == sdk::program::OptimizerKind::sgd_keras) {
    const SgdScalars k = sgd_scalars(lr, o.momentum);
    std::memcpy(scalars, &k, sizeof k);
  }
  check(cudaMemcpyAsync(control(block_.step), out, block_.step_bytes, cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync", "the step's scalars");
  scalars_copied_[slot]->record(where_, stream());
}

// ---- the training step ----

void CudaModel::run_train(const MLPH_Tensor* inputs, const sdk::StepPlan& step) {
  runtime::use_device(where_, device_);
  wait_for_inputs();
  copy_inputs(inputs);
  upload_step_scalars(step);
  const bool update = step.apply_update;
  const std::vector<Task> tasks = train_tasks(plan_, program_, path_, update);
  runtime::Graph& graph = graphs_[update ? 1 : 0];
  const GraphPolicy::Action action = policy_.next(update);
  if (profiler_) profiler_->begin_step(stream(), action == GraphPolicy::Action::eager, action == GraphPolicy::Action::replay);
  switch (action) {
    case GraphPolicy::Action::eager:
      enqueue_train(tasks);
      policy_.ran_eagerly(update);
      break;
    case GraphPolicy::Action::capture:
      try {
        runtime::Graph::begin_capture(where_, stream());
        enqueue_train(tasks);
        graph = runtime::Graph::end_capture(where_, stream());
        policy_.captured(update);
      } catch (const sdk::Error& e) {  // the same work, eagerly, from now on
        runtime::Graph::abandon_capture(stream());
        policy_.capture_failed(e.what());
        host_->log(MLPH_LOG_WARNING, kWho,
                   (std::string("CUDA graph capture failed; the steps run without graphs from now on: ") + e.what()).c_str());
        enqueue_train(tasks);
        break;
      }
      graph.launch(where_, stream());
      break;
    case GraphPolicy::Action::replay:
      graph.launch(where_, stream());
      break;
  }
  if (profiler_) profiler_->end_step(stream());
  last_updated_ = update;
  gradients_scaled_ = settings_.compute.precision == sdk::Precision::fp16 && !update;
}

void CudaModel::enqueue_train(const std::vector<Task>& tasks) {
  for (const Task& task : tasks) run_task(task);
  // The step's results into pinned memory: the loss, and the penalty, loss scale and labels' latch
  // already in the control block.
  const cudaStream_t s = stream();
  check(cudaMemcpyAsync(control<std::byte>(block_.results) + offsetof(StepResults, loss),
                        at(plan_.memory.values[static_cast<size_t>(program_.loss)]), sizeof(float), cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync", "the loss");
  for (const plan::Region& r : plan_.memory.regions)
    if (r.kind == plan::RegionKind::loss_scale)
      check(cudaMemcpyAsync(control<std::byte>(block_.results) + offsetof(StepResults, loss_scale), arena_.at(r.offset),
                            sizeof(LossScale), cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync", "the loss scale");
  check(cudaMemcpyAsync(results_pinned_.data(), control(block_.results), block_.results_bytes, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync", "the step's results");
}

void CudaModel::run_task(const Task& task) {
  const auto k = static_cast<size_t>(task.index);
  const bool node = task.kind == Task::Kind::forward || task.kind == Task::Kind::backward;
  if (profiler_ && (node || task.kind == Task::Kind::update))
    profiler_->begin(stream(), node ? program_.nodes[k].name : "update", node ? kind_of(program_.nodes[k]) : "update",
                     task.kind == Task::Kind::forward ? "forward" : task.kind == Task::Kind::backward ? "backward" : "update",
                     node ? pass_flops(program_.nodes[k]) : 0,
                     node ? pass_bytes(program_, plan_, k, task.kind == Task::Kind::backward) : 0);
  run_one(task, k);
  if (profiler_) profiler_->end(stream());
}

void CudaModel::run_one(const Task& task, size_t k) {
  switch (task.kind) {
    case Task::Kind::forward:
      forward(k, true);
      break;
    case Task::Kind::seed_gradient:
      seed_gradient();
      break;
    case Task::Kind::backward:
      backward(k);
      break;
    case Task::Kind::reduce_bucket:
      reduce_bucket(k);
      break;
    case Task::Kind::join_buckets:
      buckets_done_->record(where_, comms_stream_->get());
      compute_->wait(where_, buckets_done_->get());
      break;
    case Task::Kind::host_allreduce:
      host_allreduce();
      break;
    case Task::Kind::update:
      update();
      break;
  }
}

// The loss's gradient: 1, or under fp16 the loss scale (read from the device, as it changes).
void CudaModel::seed_gradient() {
  const void* source = control(block_.one);
  for (const plan::Region& r : plan_.memory.regions)
    if (r.kind == plan::RegionKind::loss_scale) source = arena_.at(r.offset);
  check(cudaMemcpyAsync(at(plan_.memory.value_gradients[static_cast<size_t>(program_.loss)]), source, sizeof(float),
                        cudaMemcpyDeviceToDevice, stream()),
        "cudaMemcpyAsync", "the loss's gradient");
}

// Bucket `b` of the gradient buffer averaged over the ranks on the comms stream, once the compute
// stream has finished its last contribution (the tasks put it there).
void CudaModel::reduce_bucket(size_t b) {
  const plan::Bucket& bucket = plan_.buckets[b];
  bucket_ready_[b]->record(where_, stream());
  comms_stream_->wait(where_, bucket_ready_[b]->get());
  float* gradients = arena_.at<float>(plan_.memory.regions[static_cast<size_t>(plan_.memory.gradients)].offset);
  comms_device_->allreduce(gradients + bucket.offset, bucket.count, MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE,
                           comms_stream_->get());
}

// Without device collectives: the whole gradient buffer through pinned host memory (the step waits).
void CudaModel::host_allreduce() {
  const size_t count = plan_.memory.params.trainable_floats;
  void* gradients = arena_.at(plan_.memory.regions[static_cast<size_t>(plan_.memory.gradients)].offset);
  check(cudaMemcpyAsync(host_gradients_.data(), gradients, count * sizeof(float), cudaMemcpyDeviceToHost, stream()),
        "cudaMemcpyAsync", "the gradients");
  compute_->synchronize(where_, "the gradients");
  sdk::check(host_, comms_->api->allreduce(comms_->comm, host_gradients_.data(), count, MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE),
             std::string(kWho) + ": gradient allreduce");
  check(cudaMemcpyAsync(gradients, host_gradients_.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync", "the gradients");
}

// The update, once the gradients are averaged: fp16 unscales and counts overflows; L2 joins the
// gradients (and its penalty the loss); the optimizer (skipped on overflow), which rounds each new
// master into its half copy in the same pass (HalfCopy: no cast after the update); the loss scale.
void CudaModel::update() {
  const plan::MemoryPlan& m = plan_.memory;
  const cudaStream_t s = stream();
  auto region = [&](int32_t r) { return arena_.at<float>(m.regions[static_cast<size_t>(r)].offset); };
  float* g = region(m.gradients);
  float* w = region(m.masters);
  const auto n = static_cast<int64_t>(m.params.trainable_floats);
  void* ws = at(m.update_workspace);
  const size_t ws_bytes = m.update_workspace ? m.regions[static_cast<size_t>(m.update_workspace.region)].bytes : 0;
  LossScale* loss_scale = nullptr;
  for (const plan::Region& r : m.regions)
    if (r.kind == plan::RegionKind::loss_scale) loss_scale = arena_.at<LossScale>(r.offset);
  const double* nonfinite = loss_scale ? control<double>(block_.nonfinite) : nullptr;
  if (loss_scale)
    check(unscale_gradients(s, n, g, &loss_scale->scale, control<double>(block_.nonfinite), ws, ws_bytes),
          "unscale_gradients", "the update");
  auto* results = control<std::byte>(block_.results);
  if (block_.l2_trainable)
    check(l2_regularize(s, block_.trainable, control<double>(block_.l2), w, g,
                        reinterpret_cast<double*>(results + offsetof(StepResults, penalty)), ws, ws_bytes),
          "l2_regularize", "the update");
  if (block_.l2_state)
    check(l2_regularize(s, block_.state, control<double>(block_.state_l2), region(m.state), nullptr,
                        reinterpret_cast<double*>(results + offsetof(StepResults, state_penalty)), ws, ws_bytes),
          "l2_regularize", "the update (non-trainable parameters)");
  const auto* scalars = control<std::byte>(block_.step) + 16;
  const HalfCopy* halves = block_.has_halves ? control<HalfCopy>(block_.halves) : nullptr;
  std::vector<float*> slots;
  for (int32_t r : m.optimizer_slots) slots.push_back(region(r));
  switch (program_.optimizer.kind) {
    case sdk::program::OptimizerKind::sgd_keras:
      check(sgd_keras(s, block_.trainable, reinterpret_cast<const SgdScalars*>(scalars), halves, g, slots[0], w,
                      nonfinite), "sgd_keras", "the update");
      break;
    case sdk::program::OptimizerKind::adam:
    case sdk::program::OptimizerKind::adamw:
      check(adam(s, block_.trainable, reinterpret_cast<const AdamScalars*>(scalars), halves, g, slots[0], slots[1], w, nonfinite),
            "adam", "the update");
      break;
    case sdk::program::OptimizerKind::lamb:
      check(lamb(s, block_.trainable, reinterpret_cast<const LambScalars*>(scalars), program_.optimizer.adam.max_grad_norm,
                 halves, g,
                 slots[0], slots[1], w, at<float>(m.lamb_update), ws, ws_bytes, nonfinite),
            "lamb", "the update");
      break;
  }
  if (loss_scale)
    check(update_loss_scale(s, LossScaleRule{}, nonfinite, &loss_scale->scale, &loss_scale->good_steps),
          "update_loss_scale", "the update");
}

std::vector<CudaModel::WeightCopy> CudaModel::weight_copies() const {
  std::vector<WeightCopy> copies;
  std::vector<bool> done(program_.values.size(), false);
  for (size_t k = 0; k < program_.nodes.size(); ++k) {
    const sdk::program::Node& n = program_.nodes[k];
    if (!plan::is_weight_slot(n, 1)) continue;
    const auto w = static_cast<size_t>(n.inputs[1]);
    if (!plan_.memory.weights[w] || done[w]) continue;
    done[w] = true;
    const plan::DType type = plan_.precision.nodes[k].reads[1];
    WeightCopy copy{n.inputs[1], type == plan::DType::bf16 ? FloatType::bf16 : type == plan::DType::f16 ? FloatType::f16 : FloatType::f32};
    if (const auto& conv = plan_.nodes[k].conv; conv && conv->channels)
      copy.width = conv->channels, copy.padded_width = conv->padded_channels;
    copies.push_back(copy);
  }
  return copies;
}

// Per trainable tensor (make_tables' order), the half copy the update writes; none for the others.
std::vector<HalfCopy> CudaModel::half_copies() const {
  const plan::ParamLayout layout = plan::layout_params(program_);
  std::vector<HalfCopy> by_value(program_.values.size());
  for (const WeightCopy& c : weight_copies())
    by_value[static_cast<size_t>(c.value)] = {at(plan_.memory.weights[static_cast<size_t>(c.value)]), 0, c.type, c.width,
                                              c.padded_width};
  std::vector<HalfCopy> halves;
  for (size_t i = 0; i < program_.params.size(); ++i) {
    if (!layout.params[i].trainable) continue;
    HalfCopy h = by_value[static_cast<size_t>(program_.params[i].value)];
    h.offset = static_cast<int64_t>(layout.params[i].offset);
    halves.push_back(h);
  }
  return halves;
}

// The device's half copies of conv and dense weights (bf16, fp16), cast from the fp32 masters, which
// are in the layout their reader reads already (plan/weights.hpp): all of them, or those of `value`
// alone. After the host writes parameters (copy_in, restore); the update writes them itself.
void CudaModel::refresh_weights(int32_t value) {
  for (const WeightCopy& c : weight_copies()) {
    if (value >= 0 && c.value != value) continue;
    const auto w = static_cast<size_t>(c.value);
    const float* master = at<float>(plan_.memory.values[w]);
    void* copy = at(plan_.memory.weights[w]);
    if (c.width)  // padded: zero rows past its channels
      check(channels_copy(stream(), numel(c.value) / c.width, c.width, c.padded_width, FloatType::f32, master, c.type, copy,
                          false),
            "channels_copy", program_.value(c.value).name);
    else
      check(convert(stream(), numel(c.value), FloatType::f32, master, c.type, copy), "convert", program_.value(c.value).name);
  }
}

double CudaModel::last_loss() {
  const StepResults& r = results();
  double loss = r.loss;
  if (last_updated_) loss += r.penalty + r.state_penalty;
  return loss;
}

// Waits for the compute stream (which joined the others), then asks the comms and the labels' latch
// whether the work went well.
void CudaModel::synchronize() {
  runtime::use_device(where_, device_);
  compute_->synchronize(where_, "the model's work");
  inputs_pending_ = false;  // the compute stream waited for the copy
  if (comms_device_) comms_device_->status();
  for (const NodeRuntime& r : nodes_)
    if (r.group_device) r.group_device->status();
  for (size_t k = 0; k < nodes_.size(); ++k) {
    if (nodes_[k].label_check < 0) continue;
    const int64_t* bad = latched(nodes_[k].label_check);
    if (bad[0] < 0) continue;
    const sdk::program::Node& n = program_.nodes[k];
    sdk::fail(MLPH_INVALID_ARGUMENT, who_ + ": node '" + n.name + "': label " + std::to_string(bad[1]) +
                                         " at position " + std::to_string(bad[0]) + " of '" +
                                         program_.value(n.inputs[1]).name + "' is outside [0, " +
                                         std::to_string(n.rows.channels) + ")");
  }
}

// ---- evaluation ----

void CudaModel::run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) {
  runtime::use_device(where_, device_);
  wait_for_inputs();
  const cudaStream_t s = stream();
  for (size_t i = 0; i < program_.inputs.size(); ++i) {  // straight into the arena: the caller waits
    const int32_t v = program_.inputs[i];
    check(cudaMemcpyAsync(at(plan_.memory.values[static_cast<size_t>(v)]), inputs[i].data,
                          static_cast<size_t>(numel(v)) * mlph_dtype_size(program_.value(v).dtype), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync", "input '" + program_.value(v).name + "'");
  }
  for (const plan::Step& step : plan_.schedule.steps)
    if (step.phase == plan::Phase::forward && plan_.nodes[static_cast<size_t>(step.node)].engine != plan::Engine::alias)
      forward(static_cast<size_t>(step.node), false);
  for (size_t i = 0; i < program_.eval_outputs.size(); ++i) {
    const int32_t v = program_.eval_outputs[i];
    check(cudaMemcpyAsync(outputs[i].data, at(plan_.memory.values[static_cast<size_t>(v)]),
                          static_cast<size_t>(numel(v)) * mlph_dtype_size(program_.value(v).dtype), cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync", "eval output '" + program_.value(v).name + "'");
  }
  check(cudaMemcpyAsync(results_pinned_.data(), control(block_.results), block_.results_bytes, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync", "the labels' check");
  synchronize();
}

// ---- parameters, gradients and state ----

void CudaModel::zero_gradients() {
  runtime::use_device(where_, device_);
  const plan::Region& r = plan_.memory.regions[static_cast<size_t>(plan_.memory.gradients)];
  check(cudaMemsetAsync(arena_.at(r.offset), 0, r.bytes, stream()), "cudaMemsetAsync", "the gradients");
  gradients_scaled_ = false;
}

void* CudaModel::address_of(const sdk::ParamTensor& tensor) {
  const plan::MemoryPlan& m = plan_.memory;
  const plan::ParamSlot& slot = m.params.params[tensor.param];
  switch (tensor.kind) {
    case sdk::ParamTensor::Kind::value:
      return at(m.values[static_cast<size_t>(program_.params[tensor.param].value)]);
    case sdk::ParamTensor::Kind::gradient:
      return arena_.at(m.regions[static_cast<size_t>(m.gradients)].offset + slot.offset * sizeof(float));
    case sdk::ParamTensor::Kind::optimizer_state:
      break;
  }
  return arena_.at(m.regions[static_cast<size_t>(m.optimizer_slots[tensor.slot])].offset + slot.offset * sizeof(float));
}

namespace {
bool is_loss_scale_slot(const sdk::ParamTensor& tensor, const sdk::program::Program& p) {
  return tensor.kind == sdk::ParamTensor::Kind::optimizer_state && tensor.slot == p.optimizer.state.size();
}
}  // namespace

// fp16's loss scale travels as a state slot of every trainable parameter ("loss_scale", ABI 1.4's
// read_state/write_state): even elements the scale, odd ones its count of good steps, so that a
// checkpoint taking it resumes bit for bit. An open window's gradient sum is kept multiplied by the
// scale on the device; the caller sees it (pending_gradient) as every backend does, unscaled.
void CudaModel::copy_out(const sdk::ParamTensor& tensor, float* dst, int64_t count) {
  runtime::use_device(where_, device_);
  LossScale scale{1.0f, 0};
  if (settings_.compute.precision == sdk::Precision::fp16) {
    for (const plan::Region& r : plan_.memory.regions)
      if (r.kind == plan::RegionKind::loss_scale)
        check(cudaMemcpy(&scale, arena_.at(r.offset), sizeof scale, cudaMemcpyDeviceToHost), "cudaMemcpy", "the loss scale");
  }
  if (is_loss_scale_slot(tensor, program_)) {
    if (count < 2)
      sdk::fail(MLPH_NOT_FOUND, who_ + ": parameter '" + program_.value(program_.params[tensor.param].value).name +
                                    "' has one element: the loss scale is kept with the others");
    for (int64_t i = 0; i < count; ++i) dst[i] = i % 2 == 0 ? scale.scale : static_cast<float>(scale.good_steps);
    return;
  }
  // The device's layout (plan/weights.hpp) into the model's.
  const plan::ParamMap& map = plan_.params[tensor.param];
  std::vector<float> device(map.identity() ? 0 : static_cast<size_t>(count));
  check(cudaMemcpy(map.identity() ? dst : device.data(), address_of(tensor), static_cast<size_t>(count) * sizeof(float),
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy", "parameter '" + program_.value(program_.params[tensor.param].value).name + "'");
  if (!map.identity()) plan::to_model(map, device.data(), dst, count);
  if (tensor.kind == sdk::ParamTensor::Kind::gradient && gradients_scaled_)
    for (int64_t i = 0; i < count; ++i) dst[i] /= scale.scale;
}

void CudaModel::copy_in(const sdk::ParamTensor& tensor, const float* src, int64_t count) {
  runtime::use_device(where_, device_);
  const std::string about = "parameter '" + program_.value(program_.params[tensor.param].value).name + "'";
  LossScale* device_scale = nullptr;
  for (const plan::Region& r : plan_.memory.regions)
    if (r.kind == plan::RegionKind::loss_scale) device_scale = arena_.at<LossScale>(r.offset);
  LossScale scale{1.0f, 0};
  if (device_scale) check(cudaMemcpy(&scale, device_scale, sizeof scale, cudaMemcpyDeviceToHost), "cudaMemcpy", "the loss scale");
  if (is_loss_scale_slot(tensor, program_)) {
    if (count < 2) sdk::fail(MLPH_NOT_FOUND, who_ + ": " + about + " has one element: the loss scale is kept with the others");
    const LossScale restored{src[0], static_cast<int32_t>(src[1])};
    if (!(restored.scale > 0.0f) || !std::isfinite(restored.scale) || restored.good_steps < 0)
      sdk::fail(MLPH_INVALID_ARGUMENT, who_ + ": state 'loss_scale' of " + about + ": scale " + std::to_string(src[0]) +
                                           " and good steps " + std::to_string(src[1]) + " are not a loss scaler's");
    if (gradients_scaled_ && restored.scale != scale.scale) {  // an open window's sum follows its scale
      const plan::Region& g = plan_.memory.regions[static_cast<size_t>(plan_.memory.gradients)];
      check(scale_forward(stream(), static_cast<int64_t>(g.bytes / sizeof(float)), restored.scale / scale.scale,
                          arena_.at<float>(g.offset), arena_.at<float>(g.offset)),
            "scale_forward", "the pending gradient");
    }
    check(cudaMemcpyAsync(device_scale, &restored, sizeof restored, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync",
          "the loss scale");
    compute_->synchronize(where_, "the loss scale");
    results().loss_scale = restored.scale, results().good_steps = restored.good_steps;
    return;
  }
  std::vector<float> scaled;
  if (tensor.kind == sdk::ParamTensor::Kind::gradient && device_scale) {  // pending_gradient opens a window
    scaled.assign(src, src + count);
    for (float& v : scaled) v *= scale.scale;
    src = scaled.data();
    gradients_scaled_ = true;
  }
  std::vector<float> device;  // the model's layout into the device's (plan/weights.hpp)
  if (const plan::ParamMap& map = plan_.params[tensor.param]; !map.identity()) {
    device.resize(static_cast<size_t>(count));
    plan::to_device(map, src, device.data(), count);
    src = device.data();
  }
  check(cudaMemcpyAsync(address_of(tensor), src, static_cast<size_t>(count) * sizeof(float), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync", about);
  if (tensor.kind == sdk::ParamTensor::Kind::value) refresh_weights(program_.params[tensor.param].value);
  compute_->synchronize(where_, about);
}

}  // namespace mlph::cuda
