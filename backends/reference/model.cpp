#include "model.hpp"

#include <cmath>
#include <cstring>
#include <map>

#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::reference {
namespace {
using sdk::fail;

const std::map<std::string, OpKind>& op_kinds() {
  static const std::map<std::string, OpKind> kinds = {
      {"log1p", OpKind::log1p},       {"conv", OpKind::conv},       {"leaky_relu", OpKind::leaky_relu},
      {"relu", OpKind::relu},         {"tanh", OpKind::tanh},       {"scale", OpKind::scale},
      {"max_pool", OpKind::max_pool}, {"reshape", OpKind::reshape}, {"dense", OpKind::dense},
      {"dropout", OpKind::dropout},   {"mse", OpKind::mse},         {"abs_error_sum", OpKind::abs_error_sum}};
  return kinds;
}

std::string shape_of(const MLPH_Value& v) { return sdk::shape_string(v.shape, v.ndim); }

[[noreturn]] void bad_shape(const MLPH_Node& node, const std::string& what) {
  fail(MLPH_INVALID_ARGUMENT, std::string("reference backend: node '") + node.name + "' (" + node.op + "): " + what);
}

// Fills the window of a conv or pool node from its shapes and attributes, checking them.
Window make_window(const MLPH_Node& node, const MLPH_Value& x, const MLPH_Value& y, bool conv, const MLPH_Value* w) {
  const int spatial = x.ndim - 2;
  if ((spatial != 2 && spatial != 3) || y.ndim != x.ndim)
    bad_shape(node, "expects [N, spatial(2 or 3)..., C] tensors, got " + shape_of(x) + " -> " + shape_of(y));
  sdk::Attrs attrs(node);
  Window g;
  g.batch = x.shape[0];
  g.in_channels = x.shape[x.ndim - 1];
  g.out_channels = y.shape[y.ndim - 1];
  const int offset = 3 - spatial;  // 2-D problems run as depth 1
  auto per_dim = [&](const char* key, int64_t fallback) {
    std::vector<int64_t> v = attrs.has(key) ? attrs.ints(key) : std::vector<int64_t>(spatial, fallback);
    return v;
  };
  const auto stride = per_dim("stride", 1);
  const auto dilation = conv ? per_dim("dilation", 1) : std::vector<int64_t>(spatial, 1);
  std::vector<int64_t> padding = conv ? per_dim("padding", 0) : std::vector<int64_t>(spatial, 0);
  if (padding.size() == static_cast<size_t>(spatial)) padding.insert(padding.end(), padding.begin(), padding.end());
  std::vector<int64_t> kernel = conv ? std::vector<int64_t>(w->shape, w->shape + spatial) : attrs.ints("kernel");
  if (stride.size() != static_cast<size_t>(spatial) || dilation.size() != static_cast<size_t>(spatial) ||
      padding.size() != static_cast<size_t>(2 * spatial) || kernel.size() != static_cast<size_t>(spatial))
    bad_shape(node, "stride/dilation/padding/kernel do not match " + std::to_string(spatial) + " spatial dims");
  for (int d = 0; d < spatial; ++d) {
    const int e = d + offset;
    g.in[e] = x.shape[1 + d];
    g.kernel[e] = kernel[d];
    g.stride[e] = stride[d];
    g.dilation[e] = dilation[d];
    g.pad_before[e] = padding[d];
    const int64_t expect =
        (g.in[e] + padding[d] + padding[spatial + d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
    g.out[e] = y.shape[1 + d];
    if (expect != g.out[e] || stride[d] < 1 || dilation[d] < 1 || kernel[d] < 1)
      bad_shape(node, "output " + shape_of(y) + " does not follow from input " + shape_of(x) + " (expected " +
                          std::to_string(expect) + " along spatial dim " + std::to_string(d) + ")");
  }
  if (conv) {
    g.groups = attrs.has("groups") ? static_cast<int64_t>(attrs.number("groups")) : 1;
    if (g.groups < 1 || g.in_channels % g.groups || g.out_channels % g.groups ||
        w->shape[spatial] != g.in_channels / g.groups || w->shape[spatial + 1] != g.out_channels)
      bad_shape(node, "weights " + shape_of(*w) + " do not fit " + std::to_string(g.in_channels) + " -> " +
                          std::to_string(g.out_channels) + " channels in " + std::to_string(g.groups) + " groups");
  } else if (g.in_channels != g.out_channels) {
    bad_shape(node, "pooling keeps the channels: " + shape_of(x) + " -> " + shape_of(y));
  }
  return g;
}

bool same_shape(const MLPH_Value& a, const MLPH_Value& b) {
  return a.ndim == b.ndim && std::equal(a.shape, a.shape + a.ndim, b.shape);
}

}  // namespace

ReferenceModel::ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                               const MLPH_CommsHandle* comms)
    : host_(host), pool_(std::move(pool)), loss_(graph.loss), seed_(graph.seed), comms_(comms) {
  values_.assign(graph.values, graph.values + graph.n_values);
  for (MLPH_Value& v : values_) value_names_.emplace_back(v.name ? v.name : "");
  for (size_t i = 0; i < values_.size(); ++i) values_[i].name = value_names_[i].c_str();
  auto check_index = [&](int32_t v, const std::string& where) {
    if (v < 0 || static_cast<size_t>(v) >= values_.size())
      fail(MLPH_INVALID_ARGUMENT, "reference backend: " + where + " refers to value " + std::to_string(v) +
                                      " of " + std::to_string(values_.size()));
  };

  for (size_t i = 0; i < graph.n_nodes; ++i) {
    const MLPH_Node& node = graph.nodes[i];
    auto kind = op_kinds().find(node.op);
    if (kind == op_kinds().end())
      fail(MLPH_UNIMPLEMENTED, std::string("reference backend: node '") + node.name + "' uses op '" + node.op +
                                   "', which this backend does not implement");
    CompiledNode c{kind->second, node.name, i, {node.inputs, node.inputs + node.n_inputs},
                   {node.outputs, node.outputs + node.n_outputs}, {}, 0, 0, 0, 0, {}, {}};
    for (int32_t v : c.inputs) check_index(v, std::string("node '") + node.name + "'");
    for (int32_t v : c.outputs) check_index(v, std::string("node '") + node.name + "'");
    if (c.outputs.size() != 1 || c.inputs.empty()) bad_shape(node, "expects inputs and exactly one output");
    const MLPH_Value& x = value(c.inputs[0]);
    const MLPH_Value& y = value(c.outputs[0]);
    sdk::Attrs attrs(node);
    switch (c.kind) {
      case OpKind::conv:
        if (c.inputs.size() < 2) bad_shape(node, "needs input and weights");
        c.window = make_window(node, x, y, true, &value(c.inputs[1]));
        if (c.inputs.size() > 2 && sdk::numel(value(c.inputs[2])) != c.window.out_channels)
          bad_shape(node, "bias " + shape_of(value(c.inputs[2])) + " must have one value per output channel");
        break;
      case OpKind::max_pool: c.window = make_window(node, x, y, false, nullptr); break;
      case OpKind::dense: {
        const MLPH_Value& w = value(c.inputs.at(1));
        if (x.ndim != 2 || w.ndim != 2 || y.ndim != 2 || w.shape[0] != x.shape[1] || w.shape[1] != y.shape[1] ||
            y.shape[0] != x.shape[0])
          bad_shape(node, "x " + shape_of(x) + " . w " + shape_of(w) + " does not give " + shape_of(y));
        c.rows = x.shape[0], c.cols_in = x.shape[1], c.cols_out = y.shape[1];
        break;
      }
      case OpKind::reshape:
        if (sdk::numel(x) != sdk::numel(y)) bad_shape(node, "cannot reshape " + shape_of(x) + " to " + shape_of(y));
        break;
      case OpKind::mse:
      case OpKind::abs_error_sum:
        if (c.inputs.size() != 2 || !same_shape(x, value(c.inputs[1])) || y.ndim != 0)
          bad_shape(node, "needs prediction and target of one shape and a scalar output");
        break;
      default:
        if (!same_shape(x, y)) bad_shape(node, "output " + shape_of(y) + " must have the input's shape " + shape_of(x));
    }
    if (c.kind == OpKind::leaky_relu) c.attr = attrs.number("alpha");
    if (c.kind == OpKind::scale) c.attr = attrs.number("factor");
    if (c.kind == OpKind::dropout) c.attr = attrs.number("rate");
    nodes_.push_back(std::move(c));
  }

  check_index(graph.loss, "the loss");
  if (value(graph.loss).ndim != 0) fail(MLPH_INVALID_ARGUMENT, "reference backend: the loss must be a scalar");
  inputs_.assign(graph.inputs, graph.inputs + graph.n_inputs);
  eval_outputs_.assign(graph.eval_outputs, graph.eval_outputs + graph.n_eval_outputs);

  const std::string optimizer = graph.optimizer.name ? graph.optimizer.name : "";
  if (optimizer != "sgd_keras")
    fail(MLPH_UNIMPLEMENTED, "reference backend: optimizer '" + optimizer + "' is not implemented");
  momentum_ = sdk::Attrs(graph.optimizer.attrs, graph.optimizer.n_attrs, "optimizer sgd_keras").number("momentum");

  data_.resize(values_.size());
  grads_.resize(values_.size());
  needs_grad_.assign(values_.size(), false);
  for (size_t v = 0; v < values_.size(); ++v) data_[v].assign(static_cast<size_t>(sdk::numel(values_[v])), 0.0f);
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Parameter& p = graph.params[i];
    check_index(p.value, "parameter " + std::to_string(i));
    if (value(p.value).dtype != MLPH_DTYPE_F32 || !p.init)
      fail(MLPH_INVALID_ARGUMENT, "reference backend: parameter '" + value_names_[p.value] + "' must be float32 with initial data");
    std::memcpy(data_[p.value].data(), p.init, data_[p.value].size() * sizeof(float));
    const bool trainable = (p.flags & MLPH_PARAM_TRAINABLE) != 0;
    params_.push_back({p.value, p.l2, trainable, std::vector<float>(trainable ? data_[p.value].size() : 0, 0.0f)});
    needs_grad_[p.value] = trainable;
  }
  // A value needs a gradient when any node input it comes from does (nodes are in topological order).
  for (const CompiledNode& c : nodes_) {
    if (c.kind == OpKind::log1p || c.kind == OpKind::abs_error_sum) continue;
    for (int32_t in : c.inputs) needs_grad_[c.outputs[0]] = needs_grad_[c.outputs[0]] || needs_grad_[in];
  }
  for (size_t v = 0; v < values_.size(); ++v)
    if (needs_grad_[v]) grads_[v].assign(data_[v].size(), 0.0f);
}

void ReferenceModel::load_inputs(const MLPH_Tensor* inputs, size_t n) {
  if (n != inputs_.size())
    fail(MLPH_INVALID_ARGUMENT, "reference backend: expected " + std::to_string(inputs_.size()) + " inputs, got " +
                                    std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    const MLPH_Value& v = value(inputs_[i]);
    sdk::check_matches(inputs[i], v, "input");
    std::vector<float>& dst = data_[inputs_[i]];
    if (v.dtype == MLPH_DTYPE_F32) {
      std::memcpy(dst.data(), inputs[i].data, dst.size() * sizeof(float));
    } else if (v.dtype == MLPH_DTYPE_I16) {
      const auto* src = static_cast<const int16_t*>(inputs[i].data);
      for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<float>(src[k]);
    } else {
      fail(MLPH_UNIMPLEMENTED, std::string("reference backend: input '") + v.name + "' has an unsupported dtype");
    }
  }
}

void ReferenceModel::forward(bool training, uint64_t step) {
  for (CompiledNode& node : nodes_) forward_node(node, training, step);
}

void ReferenceModel::forward_node(CompiledNode& c, bool training, uint64_t step) {
  const float* x = data_[c.inputs[0]].data();
  float* y = data_[c.outputs[0]].data();
  const size_t n = data_[c.outputs[0]].size();
  switch (c.kind) {
    case OpKind::log1p:
      for (size_t i = 0; i < n; ++i) y[i] = std::log1p(x[i]);
      break;
    case OpKind::conv:
      conv_forward(*pool_, c.window, x, data_[c.inputs[1]].data(), c.inputs.size() > 2 ? data_[c.inputs[2]].data() : nullptr, y);
      break;
    case OpKind::leaky_relu:
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : static_cast<float>(c.attr) * x[i];
      break;
    case OpKind::relu:
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
      break;
    case OpKind::tanh:
      for (size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
    case OpKind::scale:
      for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(c.attr) * x[i];
      break;
    case OpKind::max_pool:
      c.argmax.resize(n);
      max_pool_forward(*pool_, c.window, x, y, c.argmax.data());
      break;
    case OpKind::reshape: std::memcpy(y, x, n * sizeof(float)); break;
    case OpKind::dense:
      dense_forward(*pool_, c.rows, c.cols_in, c.cols_out, x, data_[c.inputs[1]].data(),
                    c.inputs.size() > 2 ? data_[c.inputs[2]].data() : nullptr, y);
      break;
    case OpKind::dropout: {
      if (!training || c.attr == 0.0) {
        std::memcpy(y, x, n * sizeof(float));
        c.mask.clear();
        break;
      }
      const float keep_scale = static_cast<float>(1.0 / (1.0 - c.attr));
      c.mask.resize(n);
      for (size_t i = 0; i < n; ++i) {
        c.mask[i] = mlph_uniform(seed_, c.index, step, i) >= static_cast<float>(c.attr) ? keep_scale : 0.0f;
        y[i] = x[i] * c.mask[i];
      }
      break;
    }
    case OpKind::mse: {
      const float* t = data_[c.inputs[1]].data();
      const size_t m = data_[c.inputs[0]].size();
      double sum = 0;
      for (size_t i = 0; i < m; ++i) sum += static_cast<double>(x[i] - t[i]) * (x[i] - t[i]);
      y[0] = static_cast<float>(sum / static_cast<double>(m));
      break;
    }
    case OpKind::abs_error_sum: {
      const float* t = data_[c.inputs[1]].data();
      double sum = 0;
      for (size_t i = 0; i < data_[c.inputs[0]].size(); ++i) sum += std::fabs(static_cast<double>(x[i]) - t[i]);
      y[0] = static_cast<float>(sum);
      break;
    }
  }
}

void ReferenceModel::backward_node(CompiledNode& c) {
  const float* dy = grads_[c.outputs[0]].data();
  const float* x = data_[c.inputs[0]].data();
  float* dx = grad(c.inputs[0]);
  const size_t n = data_[c.outputs[0]].size();
  switch (c.kind) {
    case OpKind::log1p:
    case OpKind::abs_error_sum: break;
    case OpKind::conv:
      if (dx) conv_backward_data(*pool_, c.window, data_[c.inputs[1]].data(), dy, dx);
      conv_backward_weights(*pool_, c.window, x, dy, grad(c.inputs[1]), c.inputs.size() > 2 ? grad(c.inputs[2]) : nullptr);
      break;
    case OpKind::dense:
      dense_backward(*pool_, c.rows, c.cols_in, c.cols_out, x, data_[c.inputs[1]].data(), dy, dx, grad(c.inputs[1]),
                     c.inputs.size() > 2 ? grad(c.inputs[2]) : nullptr);
      break;
    case OpKind::max_pool:
      if (dx) max_pool_backward(c.window, c.argmax.data(), dy, dx);
      break;
    case OpKind::mse: {
      const float* t = data_[c.inputs[1]].data();
      const size_t m = data_[c.inputs[0]].size();
      const float scale = 2.0f * dy[0] / static_cast<float>(m);
      if (dx)
        for (size_t i = 0; i < m; ++i) dx[i] += scale * (x[i] - t[i]);
      if (float* dt = grad(c.inputs[1]))
        for (size_t i = 0; i < m; ++i) dt[i] -= scale * (x[i] - t[i]);
      break;
    }
    default:
      if (!dx) break;
      for (size_t i = 0; i < n; ++i) {
        switch (c.kind) {
          case OpKind::leaky_relu: dx[i] += x[i] > 0 ? dy[i] : static_cast<float>(c.attr) * dy[i]; break;
          case OpKind::relu: dx[i] += x[i] > 0 ? dy[i] : 0.0f; break;
          case OpKind::tanh: {
            const float t = data_[c.outputs[0]][i];
            dx[i] += dy[i] * (1.0f - t * t);
            break;
          }
          case OpKind::scale: dx[i] += static_cast<float>(c.attr) * dy[i]; break;
          case OpKind::reshape: dx[i] += dy[i]; break;
          case OpKind::dropout: dx[i] += c.mask.empty() ? dy[i] : dy[i] * c.mask[i]; break;
          default: break;
        }
      }
  }
}

void ReferenceModel::backward() {
  for (size_t v = 0; v < grads_.size(); ++v)
    if (needs_grad_[v]) std::fill(grads_[v].begin(), grads_[v].end(), 0.0f);
  if (!needs_grad_[loss_]) return;
  grads_[loss_][0] = 1.0f;
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it)
    if (needs_grad_[it->outputs[0]]) backward_node(*it);
}

void ReferenceModel::train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                                MLPH_StepResult& out) {
  load_inputs(inputs, n_inputs);
  forward(true, args.step);
  backward();
  double loss = data_[loss_][0];
  for (Param& p : params_) {  // Keras kernel_regularizer: l2 * sum(w^2) in the loss, 2 * l2 * w in the gradient
    if (p.l2 == 0.0 || !p.trainable) continue;
    const std::vector<float>& w = data_[p.value];
    std::vector<float>& g = grads_[p.value];
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i) sum += static_cast<double>(w[i]) * w[i], g[i] += static_cast<float>(2.0 * p.l2) * w[i];
    loss += p.l2 * sum;
  }
  if (comms_) {  // data parallel: average the gradients over ranks
    for (Param& p : params_)
      if (p.trainable)
        sdk::check(host_,
                   comms_->api->allreduce(comms_->comm, grads_[p.value].data(), grads_[p.value].size(),
                                          MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE),
                   "reference backend: gradient allreduce");
  }
  const float lr = static_cast<float>(args.learning_rate), m = static_cast<float>(momentum_);
  for (Param& p : params_) {  // Keras SGD: v = m*v - lr*g; w += v
    if (!p.trainable) continue;
    std::vector<float>& w = data_[p.value];
    const std::vector<float>& g = grads_[p.value];
    for (size_t i = 0; i < w.size(); ++i) {
      p.velocity[i] = m * p.velocity[i] - lr * g[i];
      w[i] += p.velocity[i];
    }
  }
  out.loss = loss;
}

void ReferenceModel::eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) {
  if (n_outputs != eval_outputs_.size())
    fail(MLPH_INVALID_ARGUMENT, "reference backend: expected " + std::to_string(eval_outputs_.size()) + " outputs");
  load_inputs(inputs, n_inputs);
  forward(false, 0);
  for (size_t i = 0; i < n_outputs; ++i) {
    MLPH_Value v = value(eval_outputs_[i]);
    v.dtype = MLPH_DTYPE_F32;
    sdk::check_matches(outputs[i], v, "eval output");
    std::memcpy(outputs[i].data, data_[eval_outputs_[i]].data(), data_[eval_outputs_[i]].size() * sizeof(float));
  }
}

void ReferenceModel::read_parameter(size_t index, MLPH_Tensor& dst) {
  if (index >= params_.size()) fail(MLPH_OUT_OF_RANGE, "reference backend: no parameter " + std::to_string(index));
  sdk::check_matches(dst, value(params_[index].value), "parameter");
  std::memcpy(dst.data, data_[params_[index].value].data(), data_[params_[index].value].size() * sizeof(float));
}

void ReferenceModel::write_parameter(size_t index, const MLPH_Tensor& src) {
  if (index >= params_.size()) fail(MLPH_OUT_OF_RANGE, "reference backend: no parameter " + std::to_string(index));
  sdk::check_matches(src, value(params_[index].value), "parameter");
  std::memcpy(data_[params_[index].value].data(), src.data, data_[params_[index].value].size() * sizeof(float));
}

void ReferenceModel::read_gradient(size_t index, MLPH_Tensor& dst) {
  if (index >= params_.size() || !params_[index].trainable)
    fail(MLPH_OUT_OF_RANGE, "reference backend: no trainable parameter " + std::to_string(index));
  sdk::check_matches(dst, value(params_[index].value), "gradient");
  std::memcpy(dst.data, grads_[params_[index].value].data(), grads_[params_[index].value].size() * sizeof(float));
}

}  // namespace mlph::reference
