// The onednn-cpu model: compiles a graph into ops (ops_dnnl.cpp, ops_loops.cpp) over values in
// oneDNN memory, and runs train and eval steps. Parameters stay in the graph layout (fp32 masters,
// their gradients one flat buffer: one allreduce, a simple optimizer); activations live in the
// layouts oneDNN picks and meet the graph layout only at the edges.
#include <omp.h>

#include <cstring>
#include <functional>
#include <map>

#include "onednn_backend.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "ops.hpp"
#include "optimizer.hpp"

namespace mlph::onednn {
namespace {
using sdk::fail;

const std::string kName = "onednn-cpu backend";

using Builder = std::function<std::unique_ptr<Op>(Net&, const NodeView&)>;
struct OpRule {
  size_t min_inputs, max_inputs;
  std::vector<std::string> attrs;
  bool gradient;  // passes gradients to its inputs
  Builder build;
};

const std::map<std::string, OpRule, std::less<>>& op_rules() {
  static const std::map<std::string, OpRule, std::less<>> rules = {
      {"log1p", {1, 1, {}, false, make_log1p}},
      {"conv", {2, 3, {"stride", "dilation", "padding", "groups"}, true, nullptr}},  // built with its fusion
      {"conv_transpose", {2, 3, {"stride", "dilation", "padding", "output_padding"}, true, make_conv_transpose}},
      {"leaky_relu", {1, 1, {"alpha"}, true, make_eltwise}},
      {"relu", {1, 1, {}, true, make_eltwise}},
      {"tanh", {1, 1, {}, true, make_eltwise}},
      {"scale", {1, 1, {"factor"}, true, make_eltwise}},
      {"max_pool", {1, 1, {"kernel", "stride"}, true, make_max_pool}},
      {"global_avg_pool", {1, 1, {}, true, make_global_avg_pool}},
      {"reshape", {1, 1, {"shape"}, true, make_reshape}},
      {"dense", {2, 3, {}, true, make_dense}},
      {"dropout", {1, 1, {"rate"}, true, make_dropout}},
      {"batch_norm", {5, 5, {"eps", "momentum", "group_size"}, true, nullptr}},  // built with its fusion
      {"add", {2, 2, {}, true, make_add}},
      {"concat", {1, 64, {}, true, make_concat}},
      {"broadcast", {1, 1, {"shape"}, true, make_broadcast}},
      {"channel_affine", {3, 3, {}, true, make_channel_affine}},
      {"shift_scale", {3, 3, {}, false, make_shift_scale}},
      {"mse", {2, 2, {}, true, make_mse}},
      {"abs_error_sum", {2, 2, {}, false, make_abs_error_sum}},
      {"softmax_cross_entropy", {2, 2, {"class_weights"}, true, make_softmax_cross_entropy}},
      {"iou", {2, 2, {}, false, make_iou}},
  };
  return rules;
}

struct ParamInfo {
  int32_t value;
  double l2, weight_decay;
  bool trainable;
  size_t grad_offset;  // into the flat gradient buffer (trainable only)
};

class OnednnModel final : public sdk::Model {
 public:
  OnednnModel(const MLPH_HostApi* host, const BackendOptions& options, const MLPH_Graph& graph,
              const MLPH_CommsHandle* comms)
      : host_(host), options_(options) {
    net_.bf16_convolutions = options.bf16;
    if (graph.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, seed))
      fail(MLPH_INVALID_ARGUMENT, kName + ": MLPH_Graph is too small (an older ABI?)");
    use_threads();
    seed_ = graph.seed;
    optimizer_ = read_optimizer(graph.optimizer);
    setup_comms(comms);
    copy_values(graph);
    const std::vector<const OpRule*> rules = check_nodes(graph);
    plan_gradients(graph, rules);
    define_inputs_and_params(graph);
    build_ops(graph, rules);
    define_outputs(graph);
    net_.scratchpad.allocate(net_.engine);
  }

  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                  MLPH_StepResult& out) override {
    const sdk::StepPlan plan = sdk::read_step_args(args, kName);
    use_threads();
    load_inputs(inputs, n_inputs);
    forward({true, plan.micro_step, seed_});
    backward();
    net_.stream.wait();
    // The parameters' gradients add up over an accumulation window: zeroed only at its start.
    accumulating_ = !plan.apply_update;
    const double loss = double(static_cast<float*>(net_.at(loss_).mem.get_data_handle())[0]);
    if (!plan.apply_update) {
      out.loss = loss;
      return;
    }
    out.loss = loss + regularize();  // once per update, with the weights every rank shares
    if (comms_ && !grads_.empty())
      sdk::check(host_, comms_->api->allreduce(comms_->comm, grads_.data(), grads_.size(), MLPH_DTYPE_F32,
                                               MLPH_REDUCE_AVERAGE),
                 kName + ": gradient allreduce");
    apply_optimizer(optimizer_, slots_, plan.learning_rate, plan.step, optimizer_scratch_);
  }

  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) override {
    if (n_outputs != eval_outputs_.size())
      fail(MLPH_INVALID_ARGUMENT, kName + ": expected " + std::to_string(eval_outputs_.size()) +
                                      " eval outputs, got " + std::to_string(n_outputs));
    for (size_t i = 0; i < n_outputs; ++i) sdk::check_matches(outputs[i], info(eval_outputs_[i]), kName + ": eval output");
    use_threads();
    load_inputs(inputs, n_inputs);
    forward({false, 0, seed_});
    net_.run(eval_pre_);
    net_.stream.wait();
    for (size_t i = 0; i < n_outputs; ++i)
      std::memcpy(outputs[i].data, eval_plain_[i].get_data_handle(), eval_plain_[i].get_desc().get_size());
  }

  void read_parameter(size_t index, MLPH_Tensor& dst) override {
    const Value& v = param_value(index);
    sdk::check_matches(dst, info(param(index).value), kName + ": parameter");
    std::memcpy(dst.data, v.mem.get_data_handle(), size_t(v.numel()) * sizeof(float));
  }
  void write_parameter(size_t index, const MLPH_Tensor& src) override {
    const Value& v = param_value(index);
    sdk::check_matches(src, info(param(index).value), kName + ": parameter");
    std::memcpy(v.mem.get_data_handle(), src.data, size_t(v.numel()) * sizeof(float));
  }
  void read_gradient(size_t index, MLPH_Tensor& dst) override {
    const Value& v = param_value(index);
    if (!param(index).trainable)
      fail(MLPH_FAILED_PRECONDITION, kName + ": parameter '" + v.name + "' is not trainable and has no gradient");
    sdk::check_matches(dst, info(param(index).value), kName + ": gradient");
    std::memcpy(dst.data, grads_.data() + param(index).grad_offset, size_t(v.numel()) * sizeof(float));
  }

 private:
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

  void copy_values(const MLPH_Graph& graph) {
    std::vector<bool> is_param(graph.n_values, false);
    for (size_t i = 0; i < graph.n_params; ++i) {
      const int32_t v = graph.params[i].value;
      if (v < 0 || size_t(v) >= graph.n_values) fail(MLPH_INVALID_ARGUMENT, kName + ": parameter " + std::to_string(i) + " refers to no value");
      is_param[size_t(v)] = true;
    }
    for (size_t i = 0; i < graph.n_values; ++i) {
      const MLPH_Value& gv = graph.values[i];
      if (gv.ndim < 0 || gv.ndim > MLPH_MAX_DIMS || std::any_of(gv.shape, gv.shape + gv.ndim, [](int64_t d) { return d < 1; }))
        fail(MLPH_INVALID_ARGUMENT, kName + ": value " + std::to_string(i) + " has an invalid shape");
      Value v;
      v.name = gv.name ? gv.name : "value " + std::to_string(i);
      v.dtype = gv.dtype;
      v.shape.assign(gv.shape, gv.shape + gv.ndim);
      v.is_param = is_param[i];
      v.plain = plain_desc(v.shape, v.dtype);
      net_.values.push_back(std::move(v));
    }
  }

  // Known ops and attributes, value indices in range, topological order.
  std::vector<const OpRule*> check_nodes(const MLPH_Graph& graph) {
    std::vector<bool> defined(graph.n_values, false);
    auto index_ok = [&](int32_t v) { return v >= 0 && size_t(v) < graph.n_values; };
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      if (!index_ok(graph.inputs[i])) fail(MLPH_INVALID_ARGUMENT, kName + ": graph input " + std::to_string(i) + " refers to no value");
      defined[size_t(graph.inputs[i])] = true;
    }
    for (size_t i = 0; i < graph.n_params; ++i) defined[size_t(graph.params[i].value)] = true;
    std::vector<const OpRule*> rules;
    for (size_t i = 0; i < graph.n_nodes; ++i) {
      const MLPH_Node& node = graph.nodes[i];
      if (!node.op || !node.name || (node.n_inputs && !node.inputs) || (node.n_outputs && !node.outputs) ||
          (node.n_attrs && !node.attrs))
        fail(MLPH_INVALID_ARGUMENT, kName + ": node " + std::to_string(i) + " is incomplete (null op, name or array)");
      const NodeView n{&node, i};
      const auto rule = op_rules().find(std::string_view(node.op));
      if (rule == op_rules().end()) unimplemented(n, "op '" + std::string(node.op) + "' is not implemented");
      const OpRule& r = rule->second;
      for (size_t a = 0; a < node.n_attrs; ++a)
        if (std::find(r.attrs.begin(), r.attrs.end(), node.attrs[a].key) == r.attrs.end())
          unimplemented(n, std::string("attribute '") + node.attrs[a].key + "' is not implemented");
      if (node.n_outputs != 1) invalid(n, "expects exactly one output");
      if (node.n_inputs < r.min_inputs || node.n_inputs > r.max_inputs) invalid(n, "wrong number of inputs");
      for (size_t k = 0; k < node.n_inputs; ++k)
        if (!index_ok(node.inputs[k]) || !defined[size_t(node.inputs[k])])
          invalid(n, "uses a value that is not defined before it (nodes must be in topological order)");
      if (!index_ok(node.outputs[0]) || defined[size_t(node.outputs[0])]) invalid(n, "redefines its output value");
      defined[size_t(node.outputs[0])] = true;
      rules.push_back(&r);
    }
    if (!index_ok(graph.loss) || !defined[size_t(graph.loss)] || !net_.at(graph.loss).shape.empty())
      fail(MLPH_INVALID_ARGUMENT, kName + ": the loss must be a defined float32 scalar");
    for (size_t i = 0; i < graph.n_eval_outputs; ++i)
      if (!index_ok(graph.eval_outputs[i]) || !defined[size_t(graph.eval_outputs[i])] ||
          net_.at(graph.eval_outputs[i]).dtype != MLPH_DTYPE_F32)
        fail(MLPH_INVALID_ARGUMENT, kName + ": eval output " + std::to_string(i) + " must be a defined float32 value");
    for (const Value& v : net_.values)
      if (v.dtype != MLPH_DTYPE_F32 && v.dtype != MLPH_DTYPE_I16 && v.dtype != MLPH_DTYPE_I32)
        fail(MLPH_UNIMPLEMENTED, kName + ": value '" + v.name + "' is neither float32, int16 nor int32");
    return rules;
  }

  // Values a gradient flows into (from a trainable parameter, towards the loss), and how many ops
  // contribute to each.
  void plan_gradients(const MLPH_Graph& graph, const std::vector<const OpRule*>& rules) {
    const size_t n = graph.n_values;
    std::vector<bool> from_param(n, false), to_loss(n, false), needed(n);
    for (size_t i = 0; i < graph.n_params; ++i)
      from_param[size_t(graph.params[i].value)] = (graph.params[i].flags & MLPH_PARAM_TRAINABLE) != 0;
    for (size_t i = 0; i < graph.n_nodes; ++i)
      for (size_t k = 0; k < graph.nodes[i].n_inputs; ++k)
        if (rules[i]->gradient && from_param[size_t(graph.nodes[i].inputs[k])])
          from_param[size_t(graph.nodes[i].outputs[0])] = true;
    to_loss[size_t(graph.loss)] = true;
    for (size_t i = graph.n_nodes; i-- > 0;)
      if (rules[i]->gradient && to_loss[size_t(graph.nodes[i].outputs[0])])
        for (size_t k = 0; k < graph.nodes[i].n_inputs; ++k) to_loss[size_t(graph.nodes[i].inputs[k])] = true;
    for (size_t v = 0; v < n; ++v) needed[v] = from_param[v] && to_loss[v];
    std::vector<int> contributors(n, 0);
    for (size_t i = 0; i < graph.n_nodes; ++i)
      if (rules[i]->gradient && needed[size_t(graph.nodes[i].outputs[0])])
        for (size_t k = 0; k < graph.nodes[i].n_inputs; ++k) ++contributors[size_t(graph.nodes[i].inputs[k])];
    net_.set_gradient_flow(std::move(needed), std::move(contributors));
  }

  void define_inputs_and_params(const MLPH_Graph& graph) {
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      inputs_.push_back(graph.inputs[i]);
      net_.define(graph.inputs[i], net_.at(graph.inputs[i]).plain);
    }
    size_t total = 0;
    for (size_t i = 0; i < graph.n_params; ++i) {
      const MLPH_Parameter& p = graph.params[i];
      const Value& v = net_.at(p.value);
      if (v.dtype != MLPH_DTYPE_F32 || !p.init)
        fail(MLPH_INVALID_ARGUMENT, kName + ": parameter '" + v.name + "' must be float32 with initial contents");
      if (!(p.l2 >= 0.0)) fail(MLPH_INVALID_ARGUMENT, kName + ": parameter '" + v.name + "' has l2 < 0");
      const bool trainable = (p.flags & MLPH_PARAM_TRAINABLE) != 0;
      params_.push_back({p.value, p.l2, p.weight_decay, trainable, total});
      if (trainable) total += size_t(v.numel());
    }
    grads_.assign(total, 0.0f);  // never reallocated: the gradient memories point into it
    for (size_t i = 0; i < graph.n_params; ++i) {
      const ParamInfo& p = params_[i];
      Value& v = net_.at(p.value);
      v.mem = memory(v.plain, net_.engine);
      std::memcpy(v.mem.get_data_handle(), graph.params[i].init, size_t(v.numel()) * sizeof(float));
      if (!p.trainable) continue;
      if (net_.needs_grad(p.value)) v.grad = memory(v.plain, net_.engine, grads_.data() + p.grad_offset);
      slots_.push_back({static_cast<float*>(v.mem.get_data_handle()), grads_.data() + p.grad_offset, v.numel(),
                        p.weight_decay, {}, {}});
    }
  }

  // A conv whose only consumer is a relu or leaky_relu with alpha >= 0 takes it as a post-op; a
  // batch norm whose only consumer is a relu runs it too (oneDNN's fuse_norm_relu: one pass less
  // over the tensor each way, DeepCAM's 50-odd BN + ReLU pairs).
  std::map<size_t, size_t> find_fusions(const MLPH_Graph& graph) {
    std::vector<std::vector<size_t>> consumers(graph.n_values);
    for (size_t i = 0; i < graph.n_nodes; ++i)
      for (size_t k = 0; k < graph.nodes[i].n_inputs; ++k) consumers[size_t(graph.nodes[i].inputs[k])].push_back(i);
    std::vector<bool> exposed(graph.n_values, false);
    exposed[size_t(graph.loss)] = true;
    for (size_t i = 0; i < graph.n_eval_outputs; ++i) exposed[size_t(graph.eval_outputs[i])] = true;
    std::map<size_t, size_t> fused;  // conv or batch_norm node -> activation node
    for (size_t i = 0; i < graph.n_nodes; ++i) {
      const int32_t y = graph.nodes[i].outputs[0];
      const std::string_view producer = graph.nodes[i].op;
      if ((producer != "conv" && producer != "batch_norm") || exposed[size_t(y)] || consumers[size_t(y)].size() != 1)
        continue;
      const size_t j = consumers[size_t(y)][0];
      const std::string_view op = graph.nodes[j].op;
      if (op != "relu" && op != "leaky_relu") continue;
      const float alpha = activation_alpha(graph.nodes[j]);
      if ((producer == "conv" ? alpha >= 0.0f : alpha == 0.0f) &&
          net_.needs_grad(y) == net_.needs_grad(graph.nodes[j].outputs[0]))
        fused[i] = j;
    }
    return fused;
  }
  static float activation_alpha(const MLPH_Node& node) {
    return std::string_view(node.op) == "relu" ? 0.0f : float(sdk::Attrs(node).number("alpha"));
  }

  void build_ops(const MLPH_Graph& graph, const std::vector<const OpRule*>& rules) {
    const std::map<size_t, size_t> fused = find_fusions(graph);
    std::map<size_t, size_t> fused_activations;  // activation node -> the node it is fused into
    for (auto [producer, act] : fused) fused_activations[act] = producer;
    for (size_t i = 0; i < graph.n_nodes; ++i) {
      const NodeView n{&graph.nodes[i], i};
      const std::string_view op = n.node->op;
      try {
        if (auto f = fused.find(i); f != fused.end()) {
          const MLPH_Node& act = graph.nodes[f->second];
          const Fusion fusion{true, activation_alpha(act), act.outputs[0]};
          ops_.push_back(op == "conv" ? make_conv(net_, n, fusion) : make_batch_norm(net_, n, fusion));
        } else if (auto a = fused_activations.find(i); a != fused_activations.end()) {
          expect_shape(net_, n, n.out(), net_.at(n.in(0)).shape);
          const MLPH_Node& producer = graph.nodes[a->second];
          ops_.push_back(std::string_view(producer.op) == "conv"
                             ? make_fused_activation(net_, n, producer.outputs[0], activation_alpha(graph.nodes[i]))
                             : make_norm_fused_relu(net_, n, producer.outputs[0]));
        } else if (op == "conv") {
          ops_.push_back(make_conv(net_, n, {}));
        } else if (op == "batch_norm") {
          ops_.push_back(make_batch_norm(net_, n, {}));
        } else {
          ops_.push_back(rules[i]->build(net_, n));
        }
      } catch (const dnnl::error& e) {
        unimplemented(n, std::string("oneDNN cannot build it: ") + e.what());
      }
    }
  }

  void define_outputs(const MLPH_Graph& graph) {
    loss_ = graph.loss;
    for (size_t i = 0; i < graph.n_eval_outputs; ++i) {
      eval_outputs_.push_back(graph.eval_outputs[i]);
      eval_plain_.push_back(net_.plain(graph.eval_outputs[i], eval_pre_));
    }
  }

  void load_inputs(const MLPH_Tensor* inputs, size_t n) {
    if (n != inputs_.size())
      fail(MLPH_INVALID_ARGUMENT, kName + ": expected " + std::to_string(inputs_.size()) + " inputs, got " + std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      const Value& v = net_.at(inputs_[i]);
      if (inputs[i].struct_size < MLPH_STRUCT_SIZE(MLPH_Tensor, data) || !inputs[i].data)
        fail(MLPH_INVALID_ARGUMENT, kName + ": input '" + v.name + "' is not a valid tensor");
      sdk::check_matches(inputs[i], info(inputs_[i]), kName + ": input");
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
    if (!accumulating_) std::fill(grads_.begin(), grads_.end(), 0.0f);
    Value& loss = net_.at(loss_);
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

  MLPH_Value info(int32_t v) {
    const Value& value = net_.at(v);
    MLPH_Value out{};
    out.name = value.name.c_str();
    out.dtype = value.dtype;
    out.ndim = int32_t(value.shape.size());
    std::copy(value.shape.begin(), value.shape.end(), out.shape);
    return out;
  }
  const ParamInfo& param(size_t index) const {
    if (index >= params_.size())
      fail(MLPH_OUT_OF_RANGE, kName + ": no parameter " + std::to_string(index) + " (the graph has " +
                                  std::to_string(params_.size()) + ")");
    return params_[index];
  }
  Value& param_value(size_t index) { return net_.at(param(index).value); }

  const MLPH_HostApi* host_;
  BackendOptions options_;
  const MLPH_CommsHandle* comms_ = nullptr;
  uint64_t seed_ = 0;
  OptimizerConfig optimizer_;
  Net net_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<int32_t> inputs_, eval_outputs_;
  int32_t loss_ = -1;
  std::vector<memory> eval_plain_;
  std::vector<Step> eval_pre_;
  std::vector<ParamInfo> params_;
  std::vector<float> grads_;  // every trainable parameter's gradient: one buffer, one allreduce
  bool accumulating_ = false;  // the last micro-batch did not end its window: grads_ hold a pending sum
  std::vector<OptimizerSlot> slots_;
  std::vector<float> optimizer_scratch_;
};

}  // namespace

std::unique_ptr<sdk::Model> compile_model(const MLPH_HostApi* host, const BackendOptions& options,
                                          const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return std::make_unique<OnednnModel>(host, options, graph, comms);
}

OnednnBackend::OnednnBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
  options.allow_only({"threads", "precision"}, kName);
  const long long threads = options.get_int("threads", 0);
  if (threads < 0 || threads > 4096)
    fail(MLPH_INVALID_ARGUMENT, kName + ": option 'threads' must be in [1, 4096], got " + options.get("threads"));
  options_.threads = int(threads);
  const std::string precision = options.get("precision", "fp32");
  if (precision != "fp32" && precision != "bf16")
    fail(MLPH_INVALID_ARGUMENT, kName + ": option 'precision' must be fp32 or bf16, got '" + precision + "'");
  options_.bf16 = precision == "bf16";
  // Without the AVX512_BF16 instructions oneDNN emulates bf16 or falls back to its reference
  // loops: refuse rather than run slower than fp32. (ISA values are bit sets: avx2_vnni > bf16.)
  const auto isa = unsigned(dnnl::get_effective_cpu_isa()), bf16_isa = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  if (options_.bf16 && (isa & bf16_isa) != bf16_isa)
    fail(MLPH_UNIMPLEMENTED,
         kName + ": option 'precision: bf16' needs a CPU with AVX512_BF16 (oneDNN sees a lesser ISA)");
}

std::unique_ptr<sdk::Model> OnednnBackend::compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return compile_model(host_, options_, graph, comms);
}

}  // namespace mlph::onednn
