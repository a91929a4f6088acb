// Lowering a graph to the executor's Program.
//
// INTERIM: the SDK's graph validator (sdk::validate_graph, on the schema branch) has not landed on
// main yet. Until it does, this reads the graph's attributes directly and trusts the graph's shapes;
// it checks only what this backend refuses (unknown ops and optimizers, batch_norm group_size > 1).
// When the validator lands, lower_graph becomes: validate_graph(graph, implemented), then the same
// per-node mapping from sdk::ValidNode (its windows replace window_of below).
#include <algorithm>
#include <map>

#include "mlph/sdk/error.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "program.hpp"

namespace mlph::a64fx {
namespace {
using sdk::fail;

const std::map<std::string, OpKind, std::less<>>& op_kinds() {
  static const std::map<std::string, OpKind, std::less<>> kinds = {
      {"log1p", OpKind::log1p},
      {"conv", OpKind::conv},
      {"leaky_relu", OpKind::leaky_relu},
      {"relu", OpKind::relu},
      {"tanh", OpKind::tanh},
      {"scale", OpKind::scale},
      {"max_pool", OpKind::max_pool},
      {"reshape", OpKind::reshape},
      {"dense", OpKind::dense},
      {"dropout", OpKind::dropout},
      {"mse", OpKind::mse},
      {"abs_error_sum", OpKind::abs_error_sum},
      {"conv_transpose", OpKind::conv_transpose},
      {"batch_norm", OpKind::batch_norm},
      {"add", OpKind::add},
      {"concat", OpKind::concat},
      {"global_avg_pool", OpKind::global_avg_pool},
      {"broadcast", OpKind::broadcast},
      {"channel_affine", OpKind::channel_affine},
      {"shift_scale", OpKind::shift_scale},
      {"softmax_cross_entropy", OpKind::softmax_cross_entropy},
      {"iou", OpKind::iou},
  };
  return kinds;
}

const std::map<std::string, OptimizerKind, std::less<>>& optimizer_kinds() {
  static const std::map<std::string, OptimizerKind, std::less<>> kinds = {
      {"sgd_keras", OptimizerKind::sgd_keras},
      {"adam", OptimizerKind::adam},
      {"adamw", OptimizerKind::adamw},
      {"lamb", OptimizerKind::lamb},
  };
  return kinds;
}

bool has_gradient(OpKind kind) {
  return kind != OpKind::log1p && kind != OpKind::abs_error_sum && kind != OpKind::shift_scale && kind != OpKind::iou;
}

// x [N, ..., C] as [rows, C].
Rows rows_of(const ValueInfo& x) { return {x.numel() / x.shape.back(), x.shape.back()}; }

// One entry per spatial dim, or `fallback` for each when the attribute is absent.
std::vector<int64_t> per_dim(const sdk::Attrs& attrs, const char* key, size_t spatial, int64_t fallback) {
  return attrs.has(key) ? attrs.ints(key) : std::vector<int64_t>(spatial, fallback);
}

// The window of a conv or max_pool over x [N, S..., Ci], spatial dims right-aligned into 3 (2-D runs
// as depth 1); `kernel` from the weights or the attribute.
Window window_of(const sdk::Attrs& attrs, const ValueInfo& x, const std::vector<int64_t>& kernel, bool pool) {
  const size_t spatial = x.shape.size() - 2;
  const std::vector<int64_t> stride = pool && !attrs.has("stride") ? kernel : per_dim(attrs, "stride", spatial, 1);
  const std::vector<int64_t> dilation = per_dim(attrs, "dilation", spatial, 1);
  const std::vector<int64_t> padding = per_dim(attrs, "padding", spatial, 0);
  Window g;
  g.batch = x.shape[0];
  g.in_channels = x.shape.back();
  for (size_t d = 0; d < spatial; ++d) {
    const size_t e = 3 - spatial + d;
    g.in[e] = x.shape[1 + d], g.kernel[e] = kernel[d], g.stride[e] = stride[d], g.dilation[e] = dilation[d];
    g.pad_before[e] = padding[d];
    g.pad_after[e] = padding[padding.size() == spatial ? d : spatial + d];
    g.out[e] = (g.in[e] + g.pad_before[e] + g.pad_after[e] - g.dilation[e] * (g.kernel[e] - 1) - 1) / g.stride[e] + 1;
  }
  return g;
}

Node lower(const MLPH_Node& n, uint64_t index, const std::vector<ValueInfo>& values) {
  const auto kind = op_kinds().find(std::string_view(n.op));
  if (kind == op_kinds().end())
    fail(MLPH_UNIMPLEMENTED, "a64fx-sve backend: node '" + std::string(n.name) + "' uses op '" + n.op +
                                 "', which is not implemented");
  const sdk::Attrs attrs(n);
  Node c;
  c.kind = kind->second;
  c.gradient = has_gradient(c.kind);
  c.name = n.name;
  c.index = index;
  c.inputs.assign(n.inputs, n.inputs + n.n_inputs);
  c.output = n.outputs[0];
  const ValueInfo &x = values[static_cast<size_t>(c.inputs[0])], &y = values[static_cast<size_t>(c.output)];
  const size_t spatial = x.shape.size() >= 2 ? x.shape.size() - 2 : 0;
  switch (c.kind) {
    case OpKind::conv: {
      const ValueInfo& w = values[static_cast<size_t>(c.inputs[1])];
      c.window = window_of(attrs, x, {w.shape.begin(), w.shape.begin() + static_cast<long>(spatial)}, false);
      c.window.out_channels = y.shape.back();
      c.window.groups = static_cast<int64_t>(attrs.number("groups", 1));
      break;
    }
    case OpKind::max_pool:
      c.window = window_of(attrs, x, attrs.ints("kernel"), true);
      c.window.out_channels = x.shape.back();
      break;
    case OpKind::conv_transpose: {
      // The conv whose adjoint this is maps y [N, O..., Co] to x [N, S..., Ci] with the weights [K..., Co, Ci] as
      // its own [K..., Cin, Cout]; its padding after is shortened by output_padding, so its windows end at y's end.
      const ValueInfo& w = values[static_cast<size_t>(c.inputs[1])];
      const std::vector<int64_t> output_padding = per_dim(attrs, "output_padding", spatial, 0);
      c.window = window_of(attrs, y, {w.shape.begin(), w.shape.begin() + static_cast<long>(spatial)}, false);
      for (size_t d = 0; d < spatial; ++d) {
        const size_t e = 3 - spatial + d;
        c.window.pad_after[e] -= output_padding[d];
        c.window.out[e] = x.shape[1 + d];
      }
      c.window.out_channels = x.shape.back();
      break;
    }
    case OpKind::dense:
      c.dense = {x.shape[0], x.shape[1], y.shape[1]};
      break;
    case OpKind::leaky_relu:
      c.attr = attrs.number("alpha");
      break;
    case OpKind::scale:
      c.attr = attrs.number("factor");
      break;
    case OpKind::dropout:
      c.attr = attrs.number("rate");
      break;
    case OpKind::batch_norm:
      c.batch_norm = {attrs.number("eps", 1e-5), attrs.number("momentum", 0.1)};
      if (attrs.number("group_size", 1) != 1)
        fail(MLPH_UNIMPLEMENTED, "a64fx-sve backend: node '" + c.name +
                                     "' (batch_norm): group_size > 1 (statistics over several ranks) is not implemented");
      c.rows = rows_of(x);
      break;
    case OpKind::channel_affine:
    case OpKind::shift_scale:
      c.rows = rows_of(x);
      break;
    case OpKind::concat:
      for (int32_t in : c.inputs) c.widths.push_back(values[static_cast<size_t>(in)].shape.back());
      c.rows = {rows_of(x).rows, y.shape.back()};
      break;
    case OpKind::global_avg_pool:
    case OpKind::iou:
      c.rows = rows_of(x);
      c.batch = x.shape[0];
      break;
    case OpKind::broadcast:
      c.in_shape = x.shape, c.out_shape = y.shape;
      break;
    case OpKind::softmax_cross_entropy:
      c.rows = rows_of(x);
      c.batch = x.shape[0];
      if (attrs.has("class_weights"))
        for (double w : attrs.numbers("class_weights")) c.class_weights.push_back(static_cast<float>(w));
      else
        c.class_weights.assign(static_cast<size_t>(c.rows.channels), 1.0f);
      break;
    default:
      break;
  }
  return c;
}

OptimizerSpec lower(const MLPH_Optimizer& o) {
  const std::string name = o.name ? o.name : "";
  const auto kind = optimizer_kinds().find(name);
  if (kind == optimizer_kinds().end())
    fail(MLPH_UNIMPLEMENTED, "a64fx-sve backend: optimizer '" + name + "' is not implemented");
  const sdk::Attrs attrs(o.attrs, o.n_attrs, "optimizer " + name);
  OptimizerSpec spec;
  spec.kind = kind->second;
  if (spec.kind == OptimizerKind::sgd_keras) {
    spec.momentum = attrs.number("momentum", 0.0);
    return spec;
  }
  spec.adam = {attrs.number("beta1"), attrs.number("beta2"), attrs.number("eps"), attrs.number("weight_decay"),
               spec.kind == OptimizerKind::lamb ? attrs.number("max_grad_norm") : 1.0};
  return spec;
}

}  // namespace

int64_t ValueInfo::numel() const { return sdk::numel(shape.data(), static_cast<int32_t>(shape.size())); }

MLPH_Value ValueInfo::as_value() const {
  MLPH_Value v{};
  v.name = name.c_str();
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape);
  return v;
}

Program lower_graph(const MLPH_Graph& graph) {
  if (graph.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, seed))
    fail(MLPH_INVALID_ARGUMENT, "a64fx-sve backend: MLPH_Graph is too small (an older ABI?)");
  Program p;
  for (size_t i = 0; i < graph.n_values; ++i) {
    const MLPH_Value& v = graph.values[i];
    p.values.push_back({v.name ? v.name : "value " + std::to_string(i), v.dtype, {v.shape, v.shape + v.ndim}});
  }
  for (size_t i = 0; i < graph.n_nodes; ++i) p.nodes.push_back(lower(graph.nodes[i], i, p.values));
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Parameter& param = graph.params[i];
    p.params.push_back({param.value, param.init, param.l2, param.weight_decay, (param.flags & MLPH_PARAM_TRAINABLE) != 0});
  }
  p.inputs.assign(graph.inputs, graph.inputs + graph.n_inputs);
  p.eval_outputs.assign(graph.eval_outputs, graph.eval_outputs + graph.n_eval_outputs);
  p.loss = graph.loss;
  p.optimizer = lower(graph.optimizer);
  p.seed = graph.seed;
  return p;
}

}  // namespace mlph::a64fx
