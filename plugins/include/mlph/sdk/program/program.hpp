// A graph lowered to what kernels take, for every backend that runs one node by node on kernels of
// its own: host loops over channels-last float32 buffers (reference, a64fx-sve, through the host
// executor) and the cuda backend's plan. Each node is an op kind with a 3-D window, a rows x channels
// view, typed attributes. A Program is self-contained (it owns the parameters' initial contents), so
// the caller's graph may go once compile returns. lower_graph (lower.hpp) makes one; this header is
// what reads one, without the validator.
//
// Also here: what every such backend derives from a Program (the parameters' gradients in one
// buffer) and the index arithmetic of a window.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/program/gradient_partition.hpp"

namespace mlph::sdk::program {

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

// ---- what a backend derives from a program -------------------------------------------------

// The trainable parameters' gradients as slices of one buffer (one allreduce), in graph order: each
// one's offset and size, and the first node reading it (sdk::partition_gradients takes this layout).
inline std::vector<GradientParam> gradient_layout(const Program& p) {
  std::vector<GradientParam> layout;
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

}  // namespace mlph::sdk::program
