// The onednn-cpu model: compiles a graph into ops (ops_dnnl.cpp, ops_loops.cpp) over values in
// oneDNN memory, and runs train and eval steps. Parameters stay in the graph layout (fp32 masters,
// their gradients one flat buffer: one allreduce, a simple optimizer); activations live in the
// layouts oneDNN picks and meet the graph layout only at the edges.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "mlph/sdk/model/protocol.hpp"
#include "onednn_backend.hpp"
#include "ops.hpp"
#include "optimizer.hpp"

namespace mlph::onednn {
namespace {
using sdk::fail;

const std::string kName = "onednn-cpu backend";

using Builder = std::function<std::unique_ptr<Op>(Net&, const NodeView&)>;

// The ops this backend implements, and how each is built (conv and batch_norm: with their fusion;
// the spatial ops: with the sample's communicator).
const std::map<std::string, Builder, std::less<>>& builders() {
  static const std::map<std::string, Builder, std::less<>> table = {
      {"log1p", make_log1p},
      {"conv", nullptr},
      {"conv_transpose", make_conv_transpose},
      {"leaky_relu", make_eltwise},
      {"relu", make_eltwise},
      {"tanh", make_eltwise},
      {"scale", make_eltwise},
      {"max_pool", make_max_pool},
      {"global_avg_pool", make_global_avg_pool},
      {"reshape", make_reshape},
      {"dense", make_dense},
      {"dropout", make_dropout},
      {"batch_norm", nullptr},
      {"add", make_add},
      {"concat", make_concat},
      {"broadcast", make_broadcast},
      {"channel_affine", make_channel_affine},
      {"shift_scale", make_shift_scale},
      {"mse", make_mse},
      {"abs_error_sum", make_abs_error_sum},
      {"softmax_cross_entropy", make_softmax_cross_entropy},
      {"iou", make_iou},
      {"halo_exchange", nullptr},
      {"spatial_gather", nullptr},
  };
  return table;
}

const sdk::Implements& implemented() {
  static const sdk::Implements names = [] {
    sdk::Implements i;
    for (const auto& entry : builders()) i.ops.push_back(entry.first);
    i.optimizers = optimizer_names();
    return i;
  }();
  return names;
}

struct ParamInfo {
  int32_t value;
  double l2, weight_decay;
  bool trainable;
  size_t grad_offset;  // into the flat gradient buffer (trainable only)
};

class OnednnModel final : public sdk::ModelProtocol {
 public:
  // The activations' memory as compiled (values other than inputs and parameters).
  ActivationMemory activation_memory() const {
    ActivationMemory m;
    std::set<const void*> seen_values, seen_grads;
    for (size_t v = 0; v < net_.values.size(); ++v) {
      const Value& value = net_.values[v];
      const bool input = std::count(graph_.inputs.begin(), graph_.inputs.end(), int32_t(v)) > 0;
      if (value.is_param || input || !value.mem) continue;
      m.bf16[value.name] = type_of(value.mem.get_desc()) == memory::data_type::bf16;
      if (seen_values.insert(value.mem.get_data_handle()).second) m.value_bytes += value.mem.get_desc().get_size();
      if (value.grad && seen_grads.insert(value.grad.get_data_handle()).second)
        m.gradient_bytes += value.grad.get_desc().get_size();
    }
    return m;
  }
  const std::vector<std::string>& conv_rewrites() const { return net_.conv_rewrites; }

  OnednnModel(const MLPH_HostApi* host, const BackendOptions& options, sdk::ValidGraph graph,
              const MLPH_CommsHandle* comms)
      : ModelProtocol(host, kName, sdk::signature_of(graph)),
        options_(options),
        graph_(std::move(graph)),
        rank_groups_(host, comms, kName),
        batch_norm_groups_(host, rank_groups_, kName) {
    net_.bf16_convolutions = options.bf16;
    net_.pad_input_channels = options.pad_input_channels;
    use_threads();
    optimizer_ = optimizer_config(graph_.optimizer);
    setup_comms(comms);
    copy_values();
    plan_gradients();
    define_inputs_and_params();
    build_ops();
    define_outputs();
    net_.scratchpad.allocate(net_.engine);
  }

 private:
  // ---- the SDK's step protocol (mlph/sdk/model/protocol.hpp): the steps, and where the state lives ----
  void run_train(const MLPH_Tensor* inputs, const sdk::StepPlan& plan) override {
    use_threads();
    load_inputs(inputs);
    forward({true, plan.micro_step, graph_.seed});
    backward();
    net_.stream.wait();
    loss_ = double(static_cast<float*>(net_.at(graph_.loss).mem.get_data_handle())[0]);
    if (!plan.apply_update) return;  // the gradient waits for the rest of its window
    loss_ += regularize();  // once per update, with the weights every rank shares
    if (comms_ && !grads_.empty())
      sdk::check(host_, comms_->api->allreduce(comms_->comm, grads_.data(), grads_.size(), MLPH_DTYPE_F32,
                                               MLPH_REDUCE_AVERAGE),
                 kName + ": gradient allreduce");
    apply_optimizer(optimizer_, slots_, plan.learning_rate, plan.step, optimizer_scratch_);
  }
  double last_loss() override { return loss_; }

  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override {
    use_threads();
    load_inputs(inputs);
    forward({false, 0, graph_.seed});
    net_.run(eval_pre_);
    net_.stream.wait();
    for (size_t i = 0; i < eval_plain_.size(); ++i)
      std::memcpy(outputs[i].data, eval_plain_[i].get_data_handle(), eval_plain_[i].get_desc().get_size());
  }

  // The parameters' gradients add up over an accumulation window: zeroed only at its start.
  void zero_gradients() override { std::fill(grads_.begin(), grads_.end(), 0.0f); }

  // Parameters stay in the graph layout (fp32 masters), their gradients in one flat buffer.
  float* host_storage(const sdk::ParamTensor& tensor) override {
    const ParamInfo& p = params_[tensor.param];
    switch (tensor.kind) {
      case sdk::ParamTensor::Kind::value:
        return static_cast<float*>(net_.at(p.value).mem.get_data_handle());
      case sdk::ParamTensor::Kind::gradient:
        return grads_.data() + p.grad_offset;
      case sdk::ParamTensor::Kind::optimizer_state:
        break;
    }
    // slots_ holds the trainable parameters in graph order.
    const auto trainable_before = std::count_if(params_.begin(), params_.begin() + long(tensor.param),
                                                [](const ParamInfo& q) { return q.trainable; });
    return slots_[size_t(trainable_before)].state(tensor.slot).data();
  }

  void use_threads() const {
    if (options_.threads > 0) omp_set_num_threads(options_.threads);
  }

  void setup_comms(const MLPH_CommsHandle* comms) {
    if (!comms) return;
    if (comms->struct_size < MLPH_STRUCT_SIZE(MLPH_CommsHandle, comm) || !comms->api || !comms->api->allreduce ||
        !comms->api->topology)
      fail(MLPH_INVALID_ARGUMENT, kName + ": the comms handle has no allreduce");
    MLPH_Topology topology{};
    topology.struct_size = sizeof(topology);
    sdk::check(host_, comms->api->topology(comms->comm, &topology), kName + ": comms topology");
    if (topology.size > 1) comms_ = comms;  // one rank: nothing to average
  }

  void copy_values() {
    for (const sdk::GraphValue& gv : graph_.values) {
      Value v;
      v.name = gv.name;
      v.dtype = gv.dtype;
      v.shape = gv.shape;
      v.plain = plain_desc(v.shape, v.dtype);
      net_.values.push_back(std::move(v));
    }
    for (const sdk::ValidParam& p : graph_.params) net_.at(p.value).is_param = true;
  }

  // Values a gradient flows into (from a trainable parameter, towards the loss), and how many ops
  // contribute to each.
  void plan_gradients() {
    std::vector<bool> needed = sdk::values_needing_gradients(graph_);
    std::vector<int> contributors(graph_.values.size(), 0);
    for (const sdk::ValidNode& node : graph_.nodes)
      if (node.gradient() && needed[size_t(node.output)])
        for (int32_t in : node.inputs) ++contributors[size_t(in)];
    net_.set_gradient_flow(std::move(needed), std::move(contributors));
  }

  void define_inputs_and_params() {
    for (int32_t v : graph_.inputs) net_.define(v, net_.at(v).plain);
    size_t total = 0;
    for (const sdk::ValidParam& p : graph_.params) {
      params_.push_back({p.value, p.l2, p.weight_decay, p.trainable, total});
      if (p.trainable) total += size_t(net_.at(p.value).numel());
    }
    grads_.assign(total, 0.0f);  // never reallocated: the gradient memories point into it
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamInfo& p = params_[i];
      Value& v = net_.at(p.value);
      v.mem = memory(v.plain, net_.engine);
      std::memcpy(v.mem.get_data_handle(), graph_.params[i].init, size_t(v.numel()) * sizeof(float));
      if (!p.trainable) continue;
      if (net_.needs_grad(p.value)) v.grad = memory(v.plain, net_.engine, grads_.data() + p.grad_offset);
      slots_.push_back({static_cast<float*>(v.mem.get_data_handle()), grads_.data() + p.grad_offset, v.numel(),
                        p.weight_decay, {}, {}});
    }
  }

  // A conv whose only consumer is a relu or leaky_relu with alpha >= 0 takes it as a post-op; a
  // batch norm whose only consumer is a relu runs it too (oneDNN's fuse_norm_relu: one pass less
  // over the tensor each way, DeepCAM's 50-odd BN + ReLU pairs).
  std::map<size_t, size_t> find_fusions() {
    const std::vector<sdk::ValidNode>& nodes = graph_.nodes;
    std::vector<std::vector<size_t>> consumers(graph_.values.size());
    for (size_t i = 0; i < nodes.size(); ++i)
      for (int32_t in : nodes[i].inputs) consumers[size_t(in)].push_back(i);
    std::vector<bool> exposed(graph_.values.size(), false);
    exposed[size_t(graph_.loss)] = true;
    for (int32_t v : graph_.eval_outputs) exposed[size_t(v)] = true;
    std::map<size_t, size_t> fused;  // conv or batch_norm node -> activation node
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int32_t y = nodes[i].output;
      const std::string& producer = nodes[i].op;
      if ((producer != "conv" && producer != "batch_norm") || exposed[size_t(y)] || consumers[size_t(y)].size() != 1)
        continue;
      const size_t j = consumers[size_t(y)][0];
      if (nodes[j].op != "relu" && nodes[j].op != "leaky_relu") continue;
      const float alpha = activation_alpha(nodes[j]);
      if ((producer == "conv" ? alpha >= 0.0f : alpha == 0.0f) && net_.needs_grad(y) == net_.needs_grad(nodes[j].output))
        fused[i] = j;
    }
    return fused;
  }
  // Of those, the conv -> activation pairs whose activation only feeds a max_pool (CosmoFlow's
  // blocks): activation node -> pool node. The pool chain runs them where its body takes the
  // conv's output layout (pool_chain_takes, known once the conv is built).
  std::map<size_t, size_t> find_pool_chains(const std::map<size_t, size_t>& fused) {
    const std::vector<sdk::ValidNode>& nodes = graph_.nodes;
    std::map<size_t, size_t> chains;
    for (auto [producer, act] : fused) {
      if (nodes[producer].op != "conv") continue;
      const int32_t a = nodes[act].output;
      if (a == graph_.loss || std::count(graph_.eval_outputs.begin(), graph_.eval_outputs.end(), a) > 0) continue;
      std::vector<size_t> readers;
      for (size_t i = 0; i < nodes.size(); ++i)
        if (std::count(nodes[i].inputs.begin(), nodes[i].inputs.end(), a) > 0) readers.push_back(i);
      if (readers.size() == 1 && nodes[readers[0]].op == "max_pool" &&
          net_.needs_grad(a) == net_.needs_grad(nodes[readers[0]].output))
        chains[act] = readers[0];
    }
    return chains;
  }
  // precision bf16: which activations are stored in bf16 between ops (and their gradients). A value
  // is when the op writing it and every op reading it move bf16 through oneDNN's bf16 kernels or
  // the pool chain (convs, pools, relus, batch norms, adds: Xception's residual stream, as under
  // PyTorch's autocast); what the step hands out (the loss, eval outputs) and whatever plain loops,
  // concat or a grouped batch norm read stay fp32. A conv
  // or batch norm and the activation fused into it share one memory: bf16 only if both may be.
  // oneDNN's batch norm, eltwise and pooling keep one type from input to output: where the output
  // stays fp32, so does the input (else the op would first copy a bf16 input to fp32; the pool
  // chain instead pools bf16 into fp32 at no cost).
  void plan_storage(const std::map<size_t, size_t>& fused, const std::map<size_t, size_t>& chains) {
    net_.bf16_storage.assign(graph_.values.size(), false);
    if (!options_.bf16) return;
    const std::vector<sdk::ValidNode>& nodes = graph_.nodes;
    std::vector<bool> bf16(graph_.values.size(), false);
    for (const sdk::ValidNode& node : nodes)
      bf16[size_t(node.output)] = moves_bf16(node) && graph_.values[size_t(node.output)].dtype == MLPH_DTYPE_F32;
    bf16[size_t(graph_.loss)] = false;
    for (int32_t v : graph_.eval_outputs) bf16[size_t(v)] = false;
    for (const sdk::ValidNode& node : nodes)
      if (!moves_bf16(node))
        for (int32_t in : node.inputs) bf16[size_t(in)] = false;
    std::set<size_t> chained_pools;
    for (auto [act, pool] : chains) chained_pools.insert(pool);
    for (bool changed = true; changed;) {  // to the fixed point: each pass only turns values fp32
      changed = false;
      auto set_fp32 = [&](size_t v) { changed = changed || bf16[v], bf16[v] = false; };
      for (auto [producer, act] : fused) {
        const auto y = size_t(nodes[producer].output), a = size_t(nodes[act].output);
        if (!bf16[y] || !bf16[a]) set_fp32(y), set_fp32(a);
      }
      for (size_t i = 0; i < nodes.size(); ++i) {
        const std::string& op = nodes[i].op;
        const bool one_type = op == "batch_norm" || op == "relu" || op == "leaky_relu" ||
                              (op == "max_pool" && !chained_pools.count(i));
        if (one_type && !bf16[size_t(nodes[i].output)]) set_fp32(size_t(nodes[i].inputs[0]));
      }
    }
    net_.bf16_storage = std::move(bf16);
  }
  static bool moves_bf16(const sdk::ValidNode& node) {
    const std::string& op = node.op;
    if (op == "batch_norm") return node.attrs.integer("group_size") <= 1;  // a group's sums walk fp32
    return op == "conv" || op == "conv_transpose" || op == "max_pool" || op == "relu" || op == "leaky_relu" ||
           op == "add";
  }
  static float activation_alpha(const sdk::ValidNode& node) {
    return node.op == "relu" ? 0.0f : float(node.attrs.number("alpha"));
  }

  void build_ops() {
    const std::vector<sdk::ValidNode>& nodes = graph_.nodes;
    const std::map<size_t, size_t> fused = find_fusions();
    const std::map<size_t, size_t> chains = find_pool_chains(fused);
    plan_storage(fused, chains);
    std::map<size_t, size_t> fused_activations;  // activation node -> the node it is fused into
    for (auto [producer, act] : fused) fused_activations[act] = producer;
    std::map<size_t, size_t> chained_pools;  // pool node -> the conv node whose output it reads
    for (size_t i = 0; i < nodes.size(); ++i) {
      const NodeView n{&nodes[i]};
      const std::string& op = nodes[i].op;
      try {
        if (auto f = fused.find(i); f != fused.end()) {
          const sdk::ValidNode& act = nodes[f->second];
          const Fusion fusion{!chains.count(f->second), activation_alpha(act), act.output};  // a chain applies it
          ops_.push_back(op == "conv" ? make_conv(net_, n, fusion) : make_batch_norm(net_, n, fusion, group_of(n)));
        } else if (auto a = fused_activations.find(i); a != fused_activations.end()) {
          const sdk::ValidNode& producer = nodes[a->second];
          const float alpha = activation_alpha(nodes[i]);
          if (auto chain = chains.find(i); chain != chains.end()) {
            const bool takes = pool_chain_takes(net_, NodeView{&nodes[chain->second]}, producer.output, alpha);
            if (takes) chained_pools[chain->second] = a->second;
            ops_.push_back(takes ? make_chained_activation(net_, n, producer.output) : make_eltwise(net_, n));
          } else {
            ops_.push_back(producer.op == "conv" ? make_fused_activation(net_, n, producer.output, alpha)
                                                 : make_norm_fused_relu(net_, n, producer.output));
          }
        } else if (auto p = chained_pools.find(i); p != chained_pools.end()) {
          const sdk::ValidNode& conv = nodes[p->second];
          ops_.push_back(make_pool_chain(net_, n, conv.output, activation_alpha(nodes[fused.at(p->second)])));
        } else if (op == "conv") {
          ops_.push_back(make_conv(net_, n, {}));
        } else if (op == "batch_norm") {
          ops_.push_back(make_batch_norm(net_, n, {}, group_of(n)));
        } else if (op == "halo_exchange" || op == "spatial_gather") {
          ops_.push_back(make_spatial_op(net_, n, host_, rank_groups_));
        } else {
          ops_.push_back(builders().find(op)->second(net_, n));
        }
      } catch (const dnnl::error& e) {
        unimplemented(n, std::string("oneDNN cannot build it: ") + e.what());
      }
    }
  }

  // A batch norm's group (SyncBatchNorm), split when first met: compile is collective.
  const sdk::GroupSum* group_of(const NodeView& n) {
    return batch_norm_groups_.join(n.attrs().integer("group_size"), n.where());
  }

  // Eval outputs in the graph layout, float32 or int32 (an int32 graph input, returned as fed).
  void define_outputs() {
    for (int32_t v : graph_.eval_outputs) eval_plain_.push_back(net_.plain(v, eval_pre_));
  }

  // The SDK checked the inputs: the graph's dtypes and shapes, dense host tensors.
  void load_inputs(const MLPH_Tensor* inputs) {
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const Value& v = net_.at(graph_.inputs[i]);
      if (v.dtype == MLPH_DTYPE_I16) {  // held as float32 (oneDNN has no int16)
        const auto* src = static_cast<const int16_t*>(inputs[i].data);
        std::transform(src, src + v.numel(), static_cast<float*>(v.mem.get_data_handle()),
                       [](int16_t x) { return float(x); });
      } else {
        std::memcpy(v.mem.get_data_handle(), inputs[i].data, size_t(v.numel()) * mlph_dtype_size(v.dtype));
      }
    }
  }

  void forward(const RunArgs& args) {
    for (const auto& op : ops_) run_op(*op, [&] { op->forward(args); });
  }

  void backward() {
    for (Value& v : net_.values) v.grad_written = v.is_param;  // parameters accumulate into zeroed buffers
    Value& loss = net_.at(graph_.loss);
    if (!loss.grad) return;  // no trainable parameter reaches the loss
    static_cast<float*>(loss.grad.get_data_handle())[0] = 1.0f;
    loss.grad_written = true;
    for (auto op = ops_.rbegin(); op != ops_.rend(); ++op) {
      if (!net_.needs_grad((*op)->output())) continue;
      net_.ready_grad((*op)->output());
      run_op(**op, [&] { (*op)->backward(); });
    }
  }

  template <class F>
  void run_op(const Op& op, F&& body) {
    try {
      body();
    } catch (const dnnl::error& e) {
      fail(MLPH_INTERNAL, kName + ": " + op.where() + ": oneDNN: " + e.what());
    }
  }

  // Keras kernel_regularizer: l2 * sum(w^2) joins the loss, 2 * l2 * w the gradient.
  double regularize() {
    double penalty = 0;
    for (const ParamInfo& p : params_) {
      if (p.l2 == 0.0) continue;
      const Value& v = net_.at(p.value);
      const auto* w = static_cast<const float*>(v.mem.get_data_handle());
      double sum = 0;
      for (int64_t i = 0; i < v.numel(); ++i) sum += double(w[i]) * w[i];
      penalty += p.l2 * sum;
      if (!p.trainable) continue;
      float* g = grads_.data() + p.grad_offset;
      const auto twice = float(2.0 * p.l2);
      for (int64_t i = 0; i < v.numel(); ++i) g[i] += twice * w[i];
    }
    return penalty;
  }

  BackendOptions options_;
  const sdk::ValidGraph graph_;  // the validator's checked copy: ops and nodes point into it
  sdk::RankGroups rank_groups_;  // batch-norm groups, a split sample's ranks (before the ops that use them)
  const MLPH_CommsHandle* comms_ = nullptr;
  OptimizerConfig optimizer_;
  sdk::BatchNormGroups batch_norm_groups_;  // before ops_: the batch norms hold their group's sum
  Net net_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<memory> eval_plain_;
  std::vector<Step> eval_pre_;
  std::vector<ParamInfo> params_;
  std::vector<float> grads_;  // every trainable parameter's gradient: one buffer, one allreduce
  double loss_ = 0;           // the last training step's
  std::vector<OptimizerSlot> slots_;
  std::vector<float> optimizer_scratch_;
};

}  // namespace

ActivationMemory activation_memory(const sdk::Model& model) {
  const auto* onednn = dynamic_cast<const OnednnModel*>(&model);
  if (!onednn) fail(MLPH_INVALID_ARGUMENT, kName + ": activation_memory of another backend's model");
  return onednn->activation_memory();
}

std::vector<std::string> conv_rewrites(const sdk::Model& model) {
  const auto* onednn = dynamic_cast<const OnednnModel*>(&model);
  if (!onednn) fail(MLPH_INVALID_ARGUMENT, kName + ": conv_rewrites of another backend's model");
  return onednn->conv_rewrites();
}

std::unique_ptr<sdk::Model> compile_model(const MLPH_HostApi* host, const BackendOptions& options,
                                          const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return std::make_unique<OnednnModel>(host, options, sdk::validate_graph(graph, implemented()), comms);
}

OnednnBackend::OnednnBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
  options.allow_only(sdk::with_compute_options({"threads", "pad_input_channels"}), kName);
  const long long threads = options.get_int("threads", 0);
  if (threads < 0 || threads > 4096)
    fail(MLPH_INVALID_ARGUMENT, kName + ": option 'threads' must be in [1, 4096], got " + options.get("threads"));
  options_.threads = int(threads);
  // oneDNN's CPU primitives are bitwise repeatable for a fixed thread count: deterministic either way.
  options_.bf16 = sdk::read_compute_settings(options, {sdk::Precision::fp32, sdk::Precision::bf16}, kName).precision ==
                  sdk::Precision::bf16;
  // Without the AVX512_BF16 instructions oneDNN emulates bf16 or falls back to its reference
  // loops: refuse rather than run slower than fp32. (ISA values are bit sets: avx2_vnni > bf16.)
  const auto isa = unsigned(dnnl::get_effective_cpu_isa()), bf16_isa = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  if (options_.bf16 && (isa & bf16_isa) != bf16_isa)
    fail(MLPH_UNIMPLEMENTED,
         kName + ": option 'precision: bf16' needs a CPU with AVX512_BF16 (oneDNN sees a lesser ISA)");
  // auto: convs with fewer input channels (CosmoFlow's conv1: 4) padded to 16 where bf16 runs on
  // AMX, whose brgconv kernels then take all three passes; elsewhere padding only adds work.
  const auto amx_isa = unsigned(dnnl::cpu_isa::avx512_core_amx);
  const bool amx = options_.bf16 && (isa & amx_isa) == amx_isa;
  const std::string pad = options.get("pad_input_channels", "auto");
  options_.pad_input_channels = pad == "auto" ? (amx ? 16 : 0) : options.get_int<int64_t>("pad_input_channels", 0, 0, 64);
}

sdk::DeviceAttributes OnednnBackend::attributes() const {
  sdk::DeviceAttributes a;
  a.precision = options_.bf16 ? "bf16" : "fp32";
  return a;
}

std::unique_ptr<sdk::Model> OnednnBackend::compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return compile_model(host_, options_, graph, comms);
}

}  // namespace mlph::onednn
