// Compiling an MLPH_Graph for the reference executor: validate everything once (ops, attributes,
// shapes, dtypes, definition order) and copy what the model needs, so the executor can trust it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"
#include "ops.hpp"

namespace mlph::reference {

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

// True for ops that pass gradients to their inputs (log1p and shift_scale are preprocessing, abs_error_sum and
// iou metrics).
bool has_gradient(OpKind kind);

struct ValueInfo {
  std::string name;
  MLPH_DType dtype = MLPH_DTYPE_F32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  MLPH_Value as_value() const;  // its name points into this ValueInfo
};

struct CompiledNode {
  OpKind kind = OpKind::relu;
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

  bool has_bias() const { return inputs.size() > 2; }  // conv, conv_transpose, dense
};

struct CompiledParam {
  int32_t value = -1;
  std::vector<float> init;  // consumed (moved into the model's buffers) when the model allocates
  double l2 = 0;
  double weight_decay = 1;  // the multiplier on the optimizer's weight decay
  bool trainable = true;
};

enum class OptimizerKind { sgd_keras, adam, adamw, lamb };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::sgd_keras;
  double momentum = 0;  // sgd_keras
  AdamAttrs adam;       // adam, adamw, lamb
};

// A validated, self-contained copy of a graph: nothing in it points into the caller's graph.
struct Program {
  std::vector<ValueInfo> values;
  std::vector<CompiledNode> nodes;  // topological order
  std::vector<CompiledParam> params;
  std::vector<int32_t> inputs, eval_outputs;
  int32_t loss = -1;
  OptimizerSpec optimizer;
  uint64_t seed = 0;
};

// Throws sdk::Error: MLPH_UNIMPLEMENTED for an op, attribute, dtype or optimizer this backend does not
// implement (naming the node), MLPH_INVALID_ARGUMENT for a graph that breaks docs/ops.md's rules
// (naming the node and the shapes involved).
Program compile_graph(const MLPH_Graph& graph);

}  // namespace mlph::reference
