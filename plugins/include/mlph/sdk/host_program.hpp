// For host backends whose kernels are loops over channels-last float32 buffers (reference,
// a64fx-sve): a graph lowered to the kernels' terms. lower_graph runs the SDK's validator, then turns
// each checked node into an op kind with what its kernel takes: a 3-D window, a rows x channels view,
// typed attributes. The Program it returns is self-contained (it owns the parameters' initial
// contents), so the caller's graph may go once compile returns. A backend says which ops it runs and
// refuses what else it lacks after lowering; its kernels stay its own.
//
//   sdk::host::Program p = sdk::host::lower_graph(graph, sdk::host::implements({OpKind::halo_exchange}));
//
// Also here: what every such executor derives from a Program (the values that need a gradient, the
// parameters' gradients in one buffer) and the index arithmetic of a window.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/error.hpp"
#include "mlph/sdk/gradient_buckets.hpp"
#include "mlph/sdk/validate.hpp"

namespace mlph::sdk::host {

// ---- what the kernels take ------------------------------------------------------------------

// A convolution or pooling window over up to 3 spatial dims, right-aligned: a 2-D problem runs as
// 3-D with a leading spatial dim of 1, so one kernel serves both.
struct Window {
  int64_t batch = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_before[3] = {0, 0, 0}, pad_after[3] = {0, 0, 0};
  int64_t in_channels = 1, out_channels = 1, groups = 1;

  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t in_positions() const { return batch * in[0] * in[1] * in[2]; }
  int64_t out_positions() const { return batch * out[0] * out[1] * out[2]; }
  // O = floor((S + p_before + p_after - d(k-1) - 1) / s) + 1 along spatial dim `d` (docs/ops.md).
  int64_t expected_out(int d) const {
    return (in[d] + pad_before[d] + pad_after[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1;
  }
  // Multiply-adds of one forward pass: for throughput reports.
  double macs() const {
    return static_cast<double>(out_positions()) * static_cast<double>(taps()) *
           static_cast<double>(in_channels / groups) * static_cast<double>(out_channels);
  }

  // For a window without padding or dilation (max_pool): the offset in x of each tap (row-major)
  // from the window's first element, and of the first element of output position `pos`'s window
  // (`pos` counts [N, out...]).
  std::vector<int64_t> tap_offsets() const {
    std::vector<int64_t> offsets;
    for (int64_t kd = 0; kd < kernel[0]; ++kd)
      for (int64_t kh = 0; kh < kernel[1]; ++kh)
        for (int64_t kw = 0; kw < kernel[2]; ++kw) offsets.push_back(((kd * in[1] + kh) * in[2] + kw) * in_channels);
    return offsets;
  }
  int64_t window_offset(int64_t pos) const {
    const int64_t ow = pos % out[2], oh = pos / out[2] % out[1], od = pos / (out[2] * out[1]) % out[0];
    const int64_t n = pos / (out[2] * out[1] * out[0]);
    return (((n * in[0] + od * stride[0]) * in[1] + oh * stride[1]) * in[2] + ow * stride[2]) * in_channels;
  }
};

// x [N, ..., C] viewed as [rows, channels], rows = N x spatial positions: per-channel ops and losses.
struct RowsByChannels {
  int64_t rows = 1, channels = 1;
  int64_t size() const { return rows * channels; }
};

// dense: x [batch, in] times w [in, out].
struct DenseShape {
  int64_t batch = 1, in = 1, out = 1;
};

struct BatchNormAttrs {
  double eps = 1e-5, momentum = 0.1;
  int64_t group_size = 1;  // ranks whose batches share the statistics (SyncBatchNorm)
};

// adam, adamw, lamb (docs/ops.md gives the formulas); max_grad_norm is lamb's.
struct AdamAttrs {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, max_grad_norm = 1;
};

// ---- the program ------------------------------------------------------------------------------

enum class OpKind {
  log1p,
  conv,
  leaky_relu,
  relu,
  tanh,
  scale,
  max_pool,
  reshape,
  dense,
  dropout,
  mse,
  abs_error_sum,
  conv_transpose,
  batch_norm,
  add,
  concat,
  global_avg_pool,
  broadcast,
  channel_affine,
  shift_scale,
  softmax_cross_entropy,
  iou,
  halo_exchange,
  spatial_gather
};

enum class OptimizerKind { sgd_keras, adam, adamw, lamb };

// A value's name, dtype and shape (the validator's copy).
using ValueInfo = GraphValue;

struct Node {
  OpKind kind = OpKind::relu;
  bool gradient = true;  // passes gradients to its inputs (not preprocessing or metrics)
  std::string name;
  uint64_t index = 0;  // position in graph.nodes: the dropout stream
  std::vector<int32_t> inputs;
  int32_t output = -1;
  Window window;                             // conv, max_pool; conv_transpose: the conv it is the adjoint of
  DenseShape dense;                          // dense
  double attr = 0;                           // leaky_relu alpha, scale factor, dropout rate
  RowsByChannels rows;                       // per-channel ops, losses: the first input as [rows, channels]
  int64_t batch = 1;                         // global_avg_pool, iou
  BatchNormAttrs batch_norm;                 // batch_norm
  std::vector<int64_t> widths;               // concat: the channels of each input
  std::vector<int64_t> in_shape, out_shape;  // broadcast
  std::vector<float> class_weights;          // softmax_cross_entropy, float32 as docs/ops.md says
  std::vector<int64_t> grid, before, after;  // halo_exchange (grid, halos), spatial_gather (grid)

  bool has_bias() const { return inputs.size() > 2; }  // conv, conv_transpose, dense
};

struct Param {
  int32_t value = -1;
  // A copy of the caller's initial contents, so that the Program outlives the graph: the executor
  // copies it into its own buffer and frees it (DeepCAM's 56.5 M weights: 226 MB held until then).
  std::vector<float> init;
  double l2 = 0;
  double weight_decay = 1;  // the multiplier on the optimizer's weight decay
  bool trainable = true;
};

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd_keras;
  std::vector<std::string> state;  // the catalogue's slot names, stored one after the other per parameter
  double momentum = 0;             // sgd_keras
  AdamAttrs adam;                  // adam, adamw, lamb
};

// A validated, self-contained copy of a graph: nothing in it points into the caller's graph.
struct Program {
  std::vector<ValueInfo> values;
  std::vector<Node> nodes;  // topological order
  std::vector<Param> params;
  std::vector<int32_t> inputs, eval_outputs;
  int32_t loss = -1;
  OptimizerSpec optimizer;
  uint64_t seed = 0;
  std::vector<bool> needs_gradient;  // per value: does a gradient flow into it (values_needing_gradients)

  const ValueInfo& value(int32_t v) const { return values[static_cast<size_t>(v)]; }
};

namespace detail {

template <class Kind>
struct Named {
  std::string_view name;
  Kind kind;
};

// Every op and optimizer of docs/ops.md (tests/sdk/host_program_test.cpp checks the catalogue's).
inline constexpr Named<OpKind> kOps[] = {
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
inline constexpr Named<OptimizerKind> kOptimizers[] = {
    {"sgd_keras", OptimizerKind::sgd_keras},
    {"adam", OptimizerKind::adam},
    {"adamw", OptimizerKind::adamw},
    {"lamb", OptimizerKind::lamb},
};

template <class Kind, size_t N>
Kind kind_of(const Named<Kind> (&table)[N], std::string_view name) {
  for (const Named<Kind>& entry : table)
    if (entry.name == name) return entry.kind;
  fail(MLPH_INTERNAL, "host lowering: '" + std::string(name) + "' is implemented but has no kind");
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

// The ops and optimizers lower_graph lowers, all of docs/ops.md, less the ops in `missing`: what a
// backend whose kernels cover the rest implements.
inline Implements implements(std::initializer_list<OpKind> missing = {}) {
  Implements names;
  for (const auto& op : detail::kOps)
    if (std::find(missing.begin(), missing.end(), op.kind) == missing.end()) names.ops.emplace_back(op.name);
  for (const auto& optimizer : detail::kOptimizers) names.optimizers.emplace_back(optimizer.name);
  return names;
}

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

// ---- what an executor derives from a program -------------------------------------------------

// The trainable parameters' gradients as slices of one buffer (one allreduce), in graph order: each
// one's offset and size, and the first node reading it (sdk::GradientBuckets takes this layout).
inline std::vector<GradientBuckets::Param> gradient_layout(const Program& p) {
  std::vector<GradientBuckets::Param> layout;
  size_t offset = 0;
  for (const Param& param : p.params) {
    if (!param.trainable) continue;
    int64_t first_use = INT64_MAX;  // read by no node: final at once
    for (const Node& node : p.nodes)
      if (std::find(node.inputs.begin(), node.inputs.end(), param.value) != node.inputs.end())
        first_use = std::min(first_use, static_cast<int64_t>(node.index));
    const auto count = static_cast<size_t>(p.value(param.value).numel());
    layout.push_back({offset, count, first_use});
    offset += count;
  }
  return layout;
}

}  // namespace mlph::sdk::host
