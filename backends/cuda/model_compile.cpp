// The cuda model's compile (model_impl.hpp's opening comment lists the steps).
#include <algorithm>
#include <cstring>

#include "mlph/sdk/program/lower.hpp"
#include "model_impl.hpp"

namespace mlph::cuda {
namespace {

constexpr const char* kLossScaleSlot = "loss_scale";

// The state slots a checkpoint takes: the optimizer's, and under fp16 the loss scaler's (see copy_out).
std::vector<std::string> state_slots(const sdk::program::Program& p, const Settings& settings) {
  std::vector<std::string> slots = p.optimizer.state;
  if (settings.compute.precision == sdk::Precision::fp16) slots.emplace_back(kLossScaleSlot);
  return slots;
}

bool reads_labels(const sdk::program::Node& n) {
  return n.kind == sdk::program::OpKind::softmax_cross_entropy || n.kind == sdk::program::OpKind::iou;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

std::unique_ptr<sdk::Model> compile_model(const MLPH_Graph& graph, const MLPH_CommsHandle* comms,
                                          const ModelSetup& setup) {
  return std::make_unique<CudaModel>(sdk::program::lower_graph(graph, plan::implemented()), comms, setup);
}

CudaModel::CudaModel(sdk::program::Program program, const MLPH_CommsHandle* comms, const ModelSetup& setup)
    : ModelProtocol(setup.host, kWho, sdk::signature_of(program, state_slots(program, setup.settings))),
      where_(runtime::Context::for_device(setup.device, setup.device_name)),
      device_(setup.device),
      settings_(setup.settings),
      program_(std::move(program)),
      comms_(comms),
      rank_groups_(setup.host, comms, kWho),
      policy_(false) {
  runtime::use_device(where_, device_);
  compute_ = std::make_unique<runtime::Stream>(where_);
  copy_ = std::make_unique<runtime::Stream>(where_);
  comms_stream_ = std::make_unique<runtime::Stream>(where_);
  bind_comms();  // collective: first, so that a rank failing below does not leave the others in it
  make_tables();
  cudnn_ = std::make_unique<runtime::CudnnHandle>(where_, stream());
  cublaslt_ = std::make_unique<runtime::CublasLtHandle>(where_);
  if (!settings_.profile_dir.empty()) profiler_ = std::make_unique<runtime::Profiler>(where_, settings_.profile_dir, device_);
  plan_device();
  if (profiler_) profiler_->write_find();

  arena_ = runtime::DeviceBuffer(where_, plan_.memory.arena_bytes, "the model's arena");
  lay_out_control_block();
  Layout staging;
  for (int32_t v : program_.inputs)
    staging_at_.push_back(staging.take(static_cast<size_t>(numel(v)) * plan::bytes_of(plan_.precision.values[static_cast<size_t>(v)])));
  staging_ = runtime::DeviceBuffer(where_, staging.bytes, "the inputs' staging");
  results_pinned_ = runtime::PinnedBuffer(where_, block_.results_bytes, "the step's results");
  scalars_pinned_ = runtime::PinnedBuffer(where_, kScalarSlots * block_.step_bytes, "the step's scalars");
  for (size_t i = 0; i < kScalarSlots; ++i) scalars_copied_.push_back(std::make_unique<runtime::Event>(where_));
  inputs_copied_ = std::make_unique<runtime::Event>(where_);
  staging_free_ = std::make_unique<runtime::Event>(where_);
  buckets_done_ = std::make_unique<runtime::Event>(where_);
  for (size_t b = 0; b < plan_.buckets.size(); ++b) bucket_ready_.push_back(std::make_unique<runtime::Event>(where_));
  if (path_ == CommsPath::host)
    host_gradients_ = runtime::PinnedBuffer(where_, plan_.memory.params.trainable_floats * sizeof(float),
                                            "the gradients' host copy (host collectives)");

  upload_control_block();
  upload_parameters();
  refresh_weights();
  for (size_t k = 0; k < nodes_.size(); ++k)  // the cuBLASLt bias epilogue's vector, now that it has a place
    if (nodes_[k].dense && bias_in_epilogue(k))
      nodes_[k].gemms[0].set_bias(where_, at<float>(plan_.memory.nodes[k].reads[2]), node_about(k));
  policy_ = GraphPolicy(settings_.graphs && path_ != CommsPath::host);
  compute_->synchronize(where_, "compile");
}

std::string CudaModel::node_about(size_t k) const { return "node '" + program_.nodes[k].name + "'"; }

// cuBLASLt adds a dense node's bias in its epilogue where D is fp32; on a half D our kernel adds it
// to y as stored (the epilogue's fp32 bias with a half D is not among the combinations relied on).
bool CudaModel::bias_in_epilogue(size_t k) const {
  return program_.nodes[k].has_bias() && plan_.precision.nodes[k].writes == plan::DType::f32;
}

// ---- the plan, the libraries' algorithms, the workspaces ----

void CudaModel::check_memory(size_t arena, const char* when) const {
  const runtime::MemoryInfo memory = runtime::memory_info(where_);
  if (arena > memory.free)
    where_.fail(MLPH_RESOURCE_EXHAUSTED, std::string("the model needs ") + runtime::gib(arena) + " of device memory (" +
                                             when + ") and the device has " + runtime::gib(memory.free) + " free of " +
                                             runtime::gib(memory.total) + ": use a smaller batch");
}

void CudaModel::plan_device() {
  const plan::Options options{settings_.compute.precision, settings_.compute.deterministic, settings_.workspace_bytes,
                              plan::kBucketBytes, settings_.pointwise, {settings_.own_batch_norm, settings_.own_depthwise, settings_.pool_chain},
                              settings_.fold_taps};
  plan_ = plan::make_plan(program_, options);
  check_memory(plan_.memory.arena_bytes, "its arena, before workspaces");
  const size_t free = runtime::memory_info(where_).free - plan_.memory.arena_bytes;
  plan_.algorithms = plan::algorithm_rule(options.precision, options.deterministic, options.workspace_cap, free);

  nodes_.resize(program_.nodes.size());
  plan::Workspaces workspaces;
  workspaces.forward.assign(nodes_.size(), 0);
  workspaces.backward.assign(nodes_.size(), 0);
  for (size_t k = 0; k < nodes_.size(); ++k) {
    switch (plan_.nodes[k].engine) {
      case plan::Engine::cudnn_conv:
      case plan::Engine::cudnn_conv_transpose:
        make_conv(k);
        break;
      case plan::Engine::cudnn_batch_norm:
        make_batch_norm(k);
        break;
      case plan::Engine::cublaslt_dense:
        make_dense(k);
        break;
      default:
        break;
    }
    own_workspaces(k);
    NodeRuntime& r = nodes_[k];
    size_t library_forward = 0, library_backward = 0;
    if (r.conv) {
      // conv: forward runs the forward pass; conv_transpose: backward data. Backward runs the other two.
      const bool transpose = plan_.nodes[k].conv->transpose;
      const auto forward_pass = static_cast<size_t>(transpose ? runtime::ConvPass::backward_data : runtime::ConvPass::forward);
      for (size_t pass = 0; pass < 3; ++pass) {
        if (r.conv_algo[pass] < 0) continue;
        const size_t bytes = runtime::workspace_bytes(where_, cudnn_->get(), *r.conv, static_cast<runtime::ConvPass>(pass),
                                                      r.conv_algo[pass], node_about(k));
        (pass == forward_pass ? library_forward : library_backward) =
            std::max(pass == forward_pass ? library_forward : library_backward, bytes);
      }
    }
    if (r.dense) {  // a chunked dw's partials come first in the backward workspace
      const size_t partials = plan::align_up(plan_.nodes[k].dense->partial_bytes(), plan::kAlignment);
      library_forward = r.gemms[0].workspace();
      library_backward = std::max(r.gemms[1].workspace(), partials + r.gemms[2].workspace());
    }
    workspaces.forward[k] = std::max(library_forward, r.forward_own);
    workspaces.backward[k] = std::max(library_backward, r.backward_own);
  }
  workspaces.update = update_workspace();
  plan_ = plan::make_plan(program_, options, workspaces, free);
  check_memory(plan_.memory.arena_bytes, "its arena with the libraries' workspaces");
}

void CudaModel::make_conv(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::ConvPlan& c = *plan_.nodes[k].conv;
  const plan::NodePrecision& precision = plan_.precision.nodes[k];
  const std::string about = node_about(k);
  NodeRuntime& r = nodes_[k];
  r.conv.emplace();
  runtime::ConvDescriptors& d = *r.conv;
  d.x = runtime::TensorDescriptor(where_, c.explicit_padding ? c.padded : c.in, precision.data, about);
  d.y = runtime::TensorDescriptor(where_, c.out, precision.data, about);
  d.w = runtime::FilterDescriptor(where_, c.filter, precision.data, about);
  for (auto& pass : d.pass) pass = runtime::ConvolutionDescriptor(where_, c, runtime::cudnn_math(precision.math), about);

  // The passes this node runs: its forward, and in backward dx (when its input needs one) and dw.
  using runtime::ConvPass;
  const bool backward = plan_.schedule.backward[k] >= 0;
  const bool dx = backward && program_.needs_gradient[static_cast<size_t>(n.inputs[0])];
  const bool dw = backward && program_.needs_gradient[static_cast<size_t>(n.inputs[1])];
  bool runs[3] = {};
  runs[static_cast<size_t>(c.transpose ? ConvPass::backward_data : ConvPass::forward)] = true;
  if (dx) runs[static_cast<size_t>(c.transpose ? ConvPass::forward : ConvPass::backward_data)] = true;
  if (dw) runs[static_cast<size_t>(ConvPass::backward_filter)] = true;

  const plan::AlgorithmRule& rule = plan_.algorithms;
  for (size_t p = 0; p < 3; ++p) {
    if (!runs[p]) continue;
    const auto pass = static_cast<ConvPass>(p);
    // Compile once per shape: a conv whose descriptors equal an earlier one's takes its choice.
    const plan::ConvKey key = plan::conv_key(c, precision.data, precision.math, static_cast<int>(p));
    if (const auto known = chosen_.find(key); known != chosen_.end()) {
      d.pass[p].set_math(where_, known->second.math, about);
      r.conv_algo[p] = known->second.algo;
      continue;
    }
    runtime::ConvCandidates found = runtime::find_algorithms(where_, cudnn_->get(), d, pass, rule.deterministic, about);
    // The workspace each needs, asked with its math type (the heuristic's lists need not carry it).
    for (size_t i = 0; i < found.candidates.size(); ++i) {
      plan::Candidate& candidate = found.candidates[i];
      if (!candidate.ok) continue;
      d.pass[p].set_math(where_, found.math[i], about);
      try {
        candidate.workspace = runtime::workspace_bytes(where_, cudnn_->get(), d, pass, candidate.algo, about);
      } catch (const sdk::Error&) {  // listed but not usable here
        candidate.ok = false;
      }
    }
    const int chosen = plan::choose(rule, found.candidates);
    if (profiler_) profiler_->found(n.name, pass, found, rule, chosen);
    if (chosen < 0)
      plan::fail_node(n, std::string("cuDNN offers no ") + runtime::name_of(pass) + " algorithm within the rule (" +
                             std::to_string(found.candidates.size()) + " candidates; " +
                             (rule.deterministic ? "deterministic, " : "") +
                             (rule.math == plan::MathMode::fma ? "TF32 off, " : "") + "workspace at most " +
                             mib(rule.workspace_cap) + ")");
    d.pass[p].set_math(where_, found.math[static_cast<size_t>(chosen)], about);
    r.conv_algo[p] = found.candidates[static_cast<size_t>(chosen)].algo;
    chosen_.emplace(key, ChosenAlgorithm{r.conv_algo[p], found.math[static_cast<size_t>(chosen)]});
  }
}

void CudaModel::make_batch_norm(size_t k) {
  NodeRuntime& r = nodes_[k];
  r.bn_x.emplace(where_, plan_.nodes[k].batch_norm->x, plan::DType::f32, node_about(k));
  r.bn_params.emplace(runtime::TensorDescriptor::batch_norm_parameters(where_, *r.bn_x, node_about(k)));
}

void CudaModel::make_dense(size_t k) {
  const sdk::program::Node& n = program_.nodes[k];
  const plan::DensePlan& dense = *plan_.nodes[k].dense;
  const plan::NodePrecision& precision = plan_.precision.nodes[k];
  NodeRuntime& r = nodes_[k];
  r.dense = true;
  const bool backward = plan_.schedule.backward[k] >= 0;
  const plan::Gemm* gemms[3] = {&dense.forward, &dense.backward_data, &dense.backward_weights};
  const bool runs[3] = {true, backward && program_.needs_gradient[static_cast<size_t>(n.inputs[0])],
                        backward && program_.needs_gradient[static_cast<size_t>(n.inputs[1])]};
  static const char* const passes[3] = {" (forward)", " (backward data)", " (backward weights)"};
  for (size_t g = 0; g < 3; ++g) {
    if (!runs[g]) continue;
    runtime::Matmul::Setup s;
    s.gemm = *gemms[g];
    s.operands = precision.data;
    // D: y as the node writes it, dx as its gradient is stored (plan/memory.cpp), dw into the fp32 gradient buffer.
    const plan::DType outputs[3] = {precision.writes, plan_.precision.values[static_cast<size_t>(n.inputs[0])],
                                    plan::DType::f32};
    s.output = outputs[g];
    s.math = precision.math;
    s.bias = g == 0 && bias_in_epilogue(k);
    s.rule = &plan_.algorithms;
    r.gemms[g] = runtime::Matmul(where_, cublaslt_->get(), s, node_about(k) + passes[g]);
  }
}

// Our kernels' scratch at the node's forward and backward steps (reduce.hpp's sizes).
void CudaModel::own_workspaces(size_t k) {
  using sdk::program::OpKind;
  const sdk::program::Node& n = program_.nodes[k];
  NodeRuntime& r = nodes_[k];
  const int64_t rows = n.rows.rows, channels = n.rows.channels;
  const auto c = static_cast<size_t>(channels);
  switch (n.kind) {
    case OpKind::conv:
      if (plan_.nodes[k].engine == plan::Engine::depthwise) {  // dw's (and db's) channel sums
        r.backward_own = depthwise_workspace_bytes(depthwise_shape(n.window, n.has_bias()));
        break;
      }
      [[fallthrough]];
    case OpKind::conv_transpose:
    case OpKind::dense:
      if (n.has_bias()) {  // the bias gradient: a channel sum of dy
        const int64_t out_channels = program_.value(n.output).shape.back();
        r.backward_own = channel_sums_workspace_bytes(1, numel(n.output) / out_channels, out_channels);
      }
      break;
    case OpKind::batch_norm: {
      const size_t sums = plan::align_up((2 * c + 1) * sizeof(double), plan::kAlignment);
      const size_t channel_sums = channel_sums_workspace_bytes(1, rows, channels);
      // stats, scale_shift | sums, coefficients (or the parameters' gradients cuDNN must write somewhere)
      r.forward_own = sums + plan::align_up(2 * c * sizeof(float), plan::kAlignment) + channel_sums;
      r.backward_own = sums + plan::align_up(3 * c * sizeof(float), plan::kAlignment) + channel_sums;
      break;
    }
    case OpKind::channel_affine:
      r.backward_own = channel_sums_workspace_bytes(1, rows, channels);
      break;
    case OpKind::global_avg_pool:
      r.forward_own = channel_sums_workspace_bytes(n.batch, rows / n.batch, channels);
      break;
    case OpKind::mse:
    case OpKind::abs_error_sum:
      r.forward_own = flat_sums_workspace_bytes(numel(n.inputs[0]));
      break;
    case OpKind::softmax_cross_entropy:
      r.forward_own = flat_sums_workspace_bytes(rows);
      break;
    case OpKind::iou:
      r.forward_own = channel_sums_workspace_bytes(n.batch, rows / n.batch, channels);
      break;
    default:
      break;
  }
}

size_t CudaModel::update_workspace() const {
  const plan::ParamLayout layout = plan::layout_params(program_);
  size_t bytes = 0;
  if (settings_.compute.precision == sdk::Precision::fp16)
    bytes = flat_sums_workspace_bytes(static_cast<int64_t>(layout.trainable_floats));
  auto multi_tensor = [](const ChunkTable& t) {
    return multi_tensor_workspace_bytes(static_cast<int64_t>(t.chunks.size()),
                                        static_cast<int32_t>(t.first_chunk.size()) - 1);
  };
  return std::max({bytes, multi_tensor(trainable_chunks_), multi_tensor(state_chunks_)});
}

// ---- the control block: constants, the step's scalars, chunk tables, results ----

void CudaModel::lay_out_control_block() {
  Layout l;
  block_.one = l.take(sizeof(float));
  size_t scalars = 0;
  const auto tensors = static_cast<size_t>(trainable_chunks_.first_chunk.size() - 1);
  switch (program_.optimizer.kind) {
    case sdk::program::OptimizerKind::sgd_keras:
      scalars = sizeof(SgdScalars);
      break;
    case sdk::program::OptimizerKind::adam:
    case sdk::program::OptimizerKind::adamw:
      scalars = tensors * sizeof(AdamScalars);
      break;
    case sdk::program::OptimizerKind::lamb:
      scalars = tensors * sizeof(LambScalars);
      break;
  }
  block_.step_bytes = plan::align_up(16 + scalars, plan::kAlignment);  // micro_step, then the optimizer's
  block_.step = l.take(block_.step_bytes);
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const sdk::program::Node& n = program_.nodes[k];
    if (!reads_labels(n)) continue;
    nodes_[k].label_check = label_checks_++;
    nodes_[k].label_first = l.take(sizeof(int64_t));
    if (n.kind == sdk::program::OpKind::softmax_cross_entropy)
      nodes_[k].class_weights = l.take(n.class_weights.size() * sizeof(float));
  }
  block_.results_bytes = sizeof(StepResults) + 2 * sizeof(int64_t) * static_cast<size_t>(label_checks_);
  block_.results = l.take(block_.results_bytes);
  block_.nonfinite = l.take(sizeof(double));
  auto table = [&](const ChunkTable& t, size_t& chunks, size_t& first, size_t& l2, DeviceChunks& device) {
    chunks = l.take(t.chunks.size() * sizeof(Chunk));
    first = l.take(t.first_chunk.size() * sizeof(int64_t));
    l2 = l.take((t.first_chunk.size() - 1) * sizeof(double));
    device.count = static_cast<int64_t>(t.chunks.size());
    device.tensors = static_cast<int32_t>(t.first_chunk.size() - 1);
  };
  table(trainable_chunks_, block_.chunks, block_.first_chunk, block_.l2, block_.trainable);
  table(state_chunks_, block_.state_chunks, block_.state_first_chunk, block_.state_l2, block_.state);
  block_.has_halves = !weight_copies().empty();
  if (block_.has_halves) block_.halves = l.take(static_cast<size_t>(block_.trainable.tensors) * sizeof(HalfCopy));
  control_ = runtime::DeviceBuffer(where_, l.bytes, "the model's control block");
  block_.trainable.chunks = control<Chunk>(block_.chunks);
  block_.trainable.first_chunk = control<int64_t>(block_.first_chunk);
  block_.state.chunks = control<Chunk>(block_.state_chunks);
  block_.state.first_chunk = control<int64_t>(block_.state_first_chunk);
}

void CudaModel::upload_control_block() {
  std::vector<std::byte> image(control_.size());
  auto put = [&](size_t offset, const void* data, size_t bytes) {
    if (bytes) std::memcpy(image.data() + offset, data, bytes);
  };
  const float one = 1.0f;
  put(block_.one, &one, sizeof one);
  StepResults results;
  results.loss_scale = settings_.compute.precision == sdk::Precision::fp16 ? settings_.loss_scale : 1.0f;
  put(block_.results, &results, sizeof results);
  const std::vector<int64_t> no_bad_label(2 * static_cast<size_t>(label_checks_), -1);
  put(block_.results + sizeof(StepResults), no_bad_label.data(), no_bad_label.size() * sizeof(int64_t));
  for (size_t k = 0; k < nodes_.size(); ++k)
    if (program_.nodes[k].kind == sdk::program::OpKind::softmax_cross_entropy)
      put(nodes_[k].class_weights, program_.nodes[k].class_weights.data(), program_.nodes[k].class_weights.size() * sizeof(float));
  auto table = [&](const ChunkTable& t, const std::vector<double>& l2, size_t chunks, size_t first, size_t at) {
    put(chunks, t.chunks.data(), t.chunks.size() * sizeof(Chunk));
    put(first, t.first_chunk.data(), t.first_chunk.size() * sizeof(int64_t));
    put(at, l2.data(), l2.size() * sizeof(double));
  };
  table(trainable_chunks_, l2_, block_.chunks, block_.first_chunk, block_.l2);
  table(state_chunks_, state_l2_, block_.state_chunks, block_.state_first_chunk, block_.state_l2);
  if (block_.has_halves) {
    const std::vector<HalfCopy> halves = half_copies();
    put(block_.halves, halves.data(), halves.size() * sizeof(HalfCopy));
  }
  check(cudaMemcpyAsync(control_.data(), image.data(), image.size(), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync", "the control block");
  std::memcpy(results_pinned_.data(), image.data() + block_.results, block_.results_bytes);
  compute_->synchronize(where_, "the control block");  // `image` goes
}

void CudaModel::upload_parameters() {
  const plan::MemoryPlan& m = plan_.memory;
  std::vector<int32_t> persistent = {m.masters, m.state, m.gradients};
  persistent.insert(persistent.end(), m.optimizer_slots.begin(), m.optimizer_slots.end());
  for (int32_t region : persistent)  // the padding between parameters stays zero, as do the slots
    check(cudaMemsetAsync(arena_.at(m.regions[static_cast<size_t>(region)].offset), 0,
                          m.regions[static_cast<size_t>(region)].bytes, stream()),
          "cudaMemsetAsync", "the parameters");
  std::vector<std::vector<float>> device(program_.params.size());  // in the device's layout (plan/weights.hpp)
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const sdk::program::Param& p = program_.params[i];
    const float* init = p.init.data();
    if (const plan::ParamMap& map = plan_.params[i]; !map.identity()) {
      device[i].resize(p.init.size());
      plan::to_device(map, init, device[i].data(), static_cast<int64_t>(p.init.size()));
      init = device[i].data();
    }
    check(cudaMemcpyAsync(at(m.values[static_cast<size_t>(p.value)]), init, p.init.size() * sizeof(float),
                          cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync", "parameter '" + program_.value(p.value).name + "'");
  }
  for (const plan::Region& r : m.regions)
    if (r.kind == plan::RegionKind::loss_scale) {
      const StepResults& start = results();
      const struct {
        float scale;
        int32_t good_steps;
      } scale{start.loss_scale, 0};
      check(cudaMemcpyAsync(arena_.at(r.offset), &scale, sizeof scale, cudaMemcpyHostToDevice, stream()),
            "cudaMemcpyAsync", "the loss scale");
    }
  compute_->synchronize(where_, "uploading the parameters");
  for (sdk::program::Param& p : program_.params) std::vector<float>().swap(p.init);  // on the device from now on
}

// ---- comms ----

void CudaModel::bind_comms() {
  int32_t ranks = 1;
  const MLPH_DeviceCollectives* calls = nullptr;
  if (comms_) {
    MLPH_Topology topology{};
    topology.struct_size = sizeof topology;
    sdk::check(host_, comms_->api->topology(comms_->comm, &topology), std::string(kWho) + ": comms topology");
    ranks = topology.size;
    calls = sdk::find_device_collectives(comms_->api, MLPH_DEVICE_CUDA);
  }
  path_ = comms_path(ranks, calls != nullptr);
  const MLPH_Device device{MLPH_DEVICE_CUDA, device_};
  if (path_ == CommsPath::device) {
    comms_device_.emplace(host_, calls, comms_->comm);
    comms_device_->bind(device);
  }
  // Batch-norm groups (SyncBatchNorm): split node by node, as every rank compiles the same graph.
  std::map<const MLPH_CommsHandle*, bool> bound;
  for (size_t k = 0; k < program_.nodes.size(); ++k) {
    const sdk::program::Node& n = program_.nodes[k];
    if (n.kind != sdk::program::OpKind::batch_norm || n.batch_norm.group_size <= 1) continue;
    nodes_.resize(program_.nodes.size());
    NodeRuntime& r = nodes_[k];
    r.group = rank_groups_.group(n.batch_norm.group_size,
                                 node_about(k) + " (batch_norm): group_size " + std::to_string(n.batch_norm.group_size));
    if (path_ != CommsPath::device) continue;
    r.group_device.emplace(host_, calls, r.group->comm);
    if (!bound[r.group]) r.group_device->bind(device), bound[r.group] = true;
  }
}

// The optimizer's and L2's tensors, trainable and not, as chunk tables over their blocks.
void CudaModel::make_tables() {
  const plan::ParamLayout layout = plan::layout_params(program_);
  std::vector<TensorSlice> trainable, state;
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const plan::ParamSlot& slot = layout.params[i];
    const double l2 = program_.params[i].l2;
    (slot.trainable ? trainable : state).push_back({static_cast<int64_t>(slot.offset), static_cast<int64_t>(slot.count)});
    (slot.trainable ? l2_ : state_l2_).push_back(l2);
    (slot.trainable ? block_.l2_trainable : block_.l2_state) |= l2 != 0.0;
  }
  trainable_chunks_ = make_chunks(trainable, kOptimizerChunk);
  state_chunks_ = make_chunks(state, kOptimizerChunk);
}

}  // namespace mlph::cuda
