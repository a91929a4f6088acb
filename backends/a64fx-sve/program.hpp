// What the a64fx-sve executor runs: a graph lowered to the kernels' terms (op kinds, 3-D windows,
// rows x channels views, typed attributes). lower_graph builds it from the SDK validator's checked
// copy; only the parameters' initial contents point into the caller's graph, read during compile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "mlph/graph.h"
#include "mlph/sdk/validate.hpp"

namespace mlph::a64fx {

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
  iou
};

// A value's name, dtype and shape (the validator's copy).
using ValueInfo = sdk::GraphValue;

struct Node {
  OpKind kind = OpKind::relu;
  std::string name;
  uint64_t index = 0;  // position in graph.nodes: the dropout stream
  bool gradient = true;  // false for preprocessing (log1p, shift_scale) and metrics (abs_error_sum, iou)
  std::vector<int32_t> inputs;
  int32_t output = -1;
  Window window;                             // conv, max_pool; conv_transpose: the conv it is the adjoint of
  DenseShape dense;                          // dense
  double attr = 0;                           // leaky_relu alpha, scale factor, dropout rate
  Rows rows;                                 // per-channel ops, losses: the first input as [rows, channels]
  int64_t batch = 1;                         // global_avg_pool, iou
  BatchNormAttrs batch_norm;                 // batch_norm
  std::vector<int64_t> widths;               // concat: the channels of each input
  std::vector<int64_t> in_shape, out_shape;  // broadcast
  std::vector<float> class_weights;          // softmax_cross_entropy

  bool has_bias() const { return inputs.size() > 2; }  // conv, conv_transpose, dense
};

struct Param {
  int32_t value = -1;
  const float* init = nullptr;  // the caller's initial contents: valid during compile only
  double l2 = 0;
  double weight_decay = 1;  // the multiplier on the optimizer's weight decay
  bool trainable = true;
};

enum class OptimizerKind { sgd_keras, adam, adamw, lamb };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd_keras;
  double momentum = 0;  // sgd_keras
  AdamAttrs adam;       // adam, adamw, lamb
  std::vector<std::string> state;  // the catalogue's slot names, stored one after the other per parameter
};

struct Program {
  std::vector<ValueInfo> values;
  std::vector<Node> nodes;  // topological order
  std::vector<Param> params;
  std::vector<int32_t> inputs, eval_outputs;
  int32_t loss = -1;
  OptimizerSpec optimizer;
  uint64_t seed = 0;
};

// Throws sdk::Error: the validator's one line for a graph that breaks docs/ops.md or uses what the
// catalogue lacks; MLPH_UNIMPLEMENTED naming the node for batch_norm with group_size > 1.
Program lower_graph(const MLPH_Graph& graph);

}  // namespace mlph::a64fx
