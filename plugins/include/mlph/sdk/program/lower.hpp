// For backends that run a lowered graph (reference, a64fx-sve, cuda): lower_graph runs the SDK's
// validator, then turns each checked node into an sdk::program::Node (program.hpp) with what its
// kernel takes. A backend says which ops it runs and refuses what else it lacks after lowering.
//
//   sdk::program::Program p = sdk::program::lower_graph(graph, sdk::program::implements({OpKind::halo_exchange}));
//
// Apart from program.hpp so that what only reads a Program (kernels, plans) does not compile the
// validator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/validate.hpp"
#include "mlph/sdk/program/program.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk::program {

namespace detail {

template <class Kind, size_t N>
Kind kind_of(const Named<Kind> (&table)[N], std::string_view name) {
  for (const Named<Kind>& entry : table)
    if (entry.name == name) return entry.kind;
  fail(MLPH_INTERNAL, "lowering: '" + std::string(name) + "' is implemented but has no kind");
}

// x [N, ..., C] as [rows, C].
inline RowsByChannels rows_of(const ValueInfo& x) { return {x.numel() / x.shape.back(), x.shape.back()}; }

// The validator's window with its spatial dims right-aligned into 3: a 2-D problem runs as depth 1.
inline Window right_aligned(const sdk::Window& w, int64_t batch, int64_t in_channels, int64_t out_channels) {
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
// shortened by output_padding (possibly below 0), so that its windows end at the output's last position.
inline Window adjoint_conv(const sdk::Window& w, int64_t batch, int64_t ci, int64_t co) {
  sdk::Window conv = w;
  std::swap(conv.in, conv.out);
  for (size_t d = 0; d < conv.pad_after.size(); ++d) conv.pad_after[d] -= w.output_padding[d];
  return right_aligned(conv, batch, co, ci);
}

inline Node lower(const ValidNode& n, const std::vector<ValueInfo>& values) {
  Node c;
  c.kind = kind_of(kOps, n.op);
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

inline OptimizerSpec lower(const ValidOptimizer& o) {
  OptimizerSpec spec;
  spec.kind = kind_of(kOptimizers, o.name);
  for (const char* slot : schema::find_optimizer(o.name)->state) spec.state.emplace_back(slot);
  if (spec.kind == OptimizerKind::sgd_keras) {
    spec.momentum = o.attrs.number("momentum");
    return spec;
  }
  spec.adam.beta1 = o.attrs.number("beta1"), spec.adam.beta2 = o.attrs.number("beta2");
  spec.adam.eps = o.attrs.number("eps"), spec.adam.weight_decay = o.attrs.number("weight_decay");
  if (spec.kind == OptimizerKind::lamb) spec.adam.max_grad_norm = o.attrs.number("max_grad_norm");
  return spec;
}

}  // namespace detail

// Validates `graph` against the catalogue and `implemented` (a subset of implements()), then lowers
// it. Throws sdk::Error: the validator's one line, unchanged.
inline Program lower_graph(const MLPH_Graph& graph, const Implements& implemented) {
  ValidGraph g = validate_graph(graph, implemented);
  Program p;
  p.needs_gradient = values_needing_gradients(g);
  p.values = std::move(g.values);
  for (const ValidNode& node : g.nodes) p.nodes.push_back(detail::lower(node, p.values));
  for (const ValidParam& param : g.params)
    p.params.push_back({param.value,
                        {param.init, param.init + p.value(param.value).numel()},
                        param.l2,
                        param.weight_decay,
                        param.trainable});
  p.inputs = std::move(g.inputs);
  p.eval_outputs = std::move(g.eval_outputs);
  p.loss = g.loss;
  p.optimizer = detail::lower(g.optimizer);
  p.seed = g.seed;
  return p;
}

}  // namespace mlph::sdk::program
