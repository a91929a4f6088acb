#include "compile.hpp"

#include <map>

namespace mlph::reference {
namespace {

// The ops and optimizers this backend implements: all of docs/ops.md.
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
      {"halo_exchange", OpKind::halo_exchange},
      {"spatial_gather", OpKind::spatial_gather},
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

const sdk::Implements& implemented() {
  static const sdk::Implements names = [] {
    sdk::Implements i;
    for (const auto& entry : op_kinds()) i.ops.push_back(entry.first);
    for (const auto& entry : optimizer_kinds()) i.optimizers.push_back(entry.first);
    return i;
  }();
  return names;
}

// x [N, ..., C] as [rows, C].
RowsByChannels rows_of(const ValueInfo& x) { return {x.numel() / x.shape.back(), x.shape.back()}; }

// The validator's window with its spatial dims right-aligned into 3: a 2-D problem runs as depth 1.
Window right_aligned(const sdk::Window& w, int64_t batch, int64_t in_channels, int64_t out_channels) {
  Window g;
  g.batch = batch;
  g.in_channels = in_channels, g.out_channels = out_channels, g.groups = w.groups;
  const size_t spatial = w.in.size();
  for (size_t d = 0; d < spatial; ++d) {
    const size_t e = 3 - spatial + d;
    g.in[e] = w.in[d], g.out[e] = w.out[d], g.kernel[e] = w.kernel[d];
    g.stride[e] = w.stride[d], g.dilation[e] = w.dilation[d];
    g.pad_before[e] = w.pad_before[d], g.pad_after[e] = w.pad_after[d];
  }
  return g;
}

// The conv whose adjoint a conv_transpose is: it maps the output [N, O..., Co] back to the input
// [N, S..., Ci] with the weights [K..., Co, Ci] as its own [K..., Cin, Cout]. Its padding after is
// shortened by output_padding so that its windows end exactly at the output's last position.
Window adjoint_conv(const sdk::Window& w, int64_t batch, int64_t ci, int64_t co) {
  sdk::Window conv = w;
  std::swap(conv.in, conv.out);
  for (size_t d = 0; d < conv.pad_after.size(); ++d) conv.pad_after[d] -= w.output_padding[d];
  return right_aligned(conv, batch, co, ci);
}

CompiledNode lower(const sdk::ValidNode& n, const std::vector<ValueInfo>& values) {
  CompiledNode c;
  c.kind = op_kinds().find(n.op)->second;
  c.gradient = n.gradient();
  c.name = n.name;
  c.index = n.index;
  c.inputs = n.inputs;
  c.output = n.output;
  const ValueInfo &x = values[static_cast<size_t>(n.inputs[0])], &y = values[static_cast<size_t>(n.output)];
  switch (c.kind) {
    case OpKind::conv:
      c.window = right_aligned(n.window, x.shape[0], x.shape.back(), y.shape.back());
      break;
    case OpKind::max_pool:
      c.window = right_aligned(n.window, x.shape[0], x.shape.back(), x.shape.back());
      break;
    case OpKind::conv_transpose:
      c.window = adjoint_conv(n.window, x.shape[0], x.shape.back(), y.shape.back());
      break;
    case OpKind::dense:
      c.dense = {x.shape[0], x.shape[1], y.shape[1]};
      break;
    case OpKind::leaky_relu:
      c.attr = n.attrs.number("alpha");
      break;
    case OpKind::scale:
      c.attr = n.attrs.number("factor");
      break;
    case OpKind::dropout:
      c.attr = n.attrs.number("rate");
      break;
    case OpKind::batch_norm:
      c.batch_norm = {n.attrs.number("eps"), n.attrs.number("momentum"), n.attrs.integer("group_size")};
      c.rows = rows_of(x);
      break;
    case OpKind::channel_affine:
    case OpKind::shift_scale:
      c.rows = rows_of(x);
      break;
    case OpKind::concat:
      for (int32_t in : n.inputs) c.widths.push_back(values[static_cast<size_t>(in)].shape.back());
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
      for (double w : n.attrs.numbers("class_weights")) c.class_weights.push_back(static_cast<float>(w));
      break;
    case OpKind::halo_exchange: {
      c.grid = n.attrs.ints("grid");
      const std::vector<int64_t> halo = n.attrs.ints("halo");
      c.before.assign(halo.begin(), halo.begin() + static_cast<long>(c.grid.size()));
      c.after.assign(halo.end() - static_cast<long>(c.grid.size()), halo.end());
      break;
    }
    case OpKind::spatial_gather:
      c.grid = n.attrs.ints("grid");
      break;
    default:
      break;
  }
  return c;
}

OptimizerSpec lower(const sdk::ValidOptimizer& o) {
  OptimizerSpec spec;
  spec.kind = optimizer_kinds().find(o.name)->second;
  for (const char* slot : sdk::schema::find_optimizer(o.name)->state) spec.state.emplace_back(slot);
  if (spec.kind == OptimizerKind::sgd_keras) {
    spec.momentum = o.attrs.number("momentum");
    return spec;
  }
  spec.adam.beta1 = o.attrs.number("beta1"), spec.adam.beta2 = o.attrs.number("beta2");
  spec.adam.eps = o.attrs.number("eps"), spec.adam.weight_decay = o.attrs.number("weight_decay");
  if (spec.kind == OptimizerKind::lamb) spec.adam.max_grad_norm = o.attrs.number("max_grad_norm");
  return spec;
}

}  // namespace

Program compile_graph(const MLPH_Graph& graph) {
  sdk::ValidGraph g = sdk::validate_graph(graph, implemented());
  Program p;
  p.values = std::move(g.values);
  for (const sdk::ValidNode& node : g.nodes) p.nodes.push_back(lower(node, p.values));
  for (const sdk::ValidParam& param : g.params)
    p.params.push_back({param.value,
                        {param.init, param.init + p.values[static_cast<size_t>(param.value)].numel()},
                        param.l2,
                        param.weight_decay,
                        param.trainable});
  p.inputs = std::move(g.inputs);
  p.eval_outputs = std::move(g.eval_outputs);
  p.loss = g.loss;
  p.optimizer = lower(g.optimizer);
  p.seed = g.seed;
  return p;
}

}  // namespace mlph::reference
