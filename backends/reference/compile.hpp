// Compiling an MLPH_Graph for the reference executor: the SDK's validator checks it (ops, attributes,
// shapes, dtypes, definition order), then its checked copy is lowered to what the executor runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/validate.hpp"
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
  iou,
  halo_exchange,
  spatial_gather
};

// A value's name, dtype and shape (the validator's copy).
using ValueInfo = sdk::GraphValue;

struct CompiledNode {
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
  std::vector<std::string> state;  // the catalogue's slot names, stored one after the other per parameter
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

// Throws sdk::Error: the validator's errors (sdk/validate.hpp), unchanged.
Program compile_graph(const MLPH_Graph& graph);

}  // namespace mlph::reference
