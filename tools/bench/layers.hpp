// Cutting a workload's model into layers, each compiled on its own, so that a backend's time and
// GFLOP/s can be reported per layer through the plug-in ABI alone (any backend, no profiler hooks).
#pragma once

#include <string>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/graph.hpp"

namespace mlph::bench {

// A layer: a compute node (conv, conv_transpose, dense) with the scale nodes that follow it, a batch
// norm, an activation (with the scale nodes after it), or one pooling node: batch norm and activations
// are rows of their own, so that their time is never read as the conv's. `kind` names what it is:
// conv, 1x1, depthwise, conv_transpose, dense, batch_norm, activation or pool.
// `needs_input_gradient` is false for the first layer of the model, whose input comes from the data,
// so its backward pass has no data gradient (as in the whole model).
struct Layer {
  std::string name;
  std::string kind;
  std::vector<size_t> nodes;  // indices into the model's nodes, in order
  double forward_flops = 0;   // 2 x multiply-adds of the forward pass
  bool needs_input_gradient = true;

  // The training step's work: forward, data gradient (when needed) and weight gradient.
  double train_flops() const { return forward_flops * (needs_input_gradient ? 3.0 : 2.0); }
};

// 2 x multiply-adds of one conv, conv_transpose or dense node (0 for other ops).
double node_flops(const MLPH_Graph& graph, const MLPH_Node& node);
double forward_flops(const MLPH_Graph& graph);

std::vector<Layer> split_layers(const MLPH_Graph& graph);

// Chains a backend may run as one pass: a conv whose output only an activation reads, whose output
// only a pooling reads (CosmoFlow's conv -> leaky ReLU -> max-pool, which onednn-cpu and cuda run as
// one pool chain). Each is a layer of its three nodes, named after the conv with " block" and of kind
// "block": compiled together, its time against the sum of its nodes' rows of split_layers shows what
// running them as one saves, which the rows alone cannot (a lone pooling runs the library's).
std::vector<Layer> split_blocks(const MLPH_Graph& graph);

// A graph computing just `layer`: its outside inputs become graph inputs (data) or trainable
// parameters (activations that need a gradient), its parameters keep their initial values, and
// an mse against a target input (last graph input) is the loss, taken on the layer's output
// averaged over its spatial dims (its evaluation output too). Optimizer: plain SGD.
// Everything is owned by `builder`.
const MLPH_Graph* layer_graph(const MLPH_Graph& model, const Layer& layer, sdk::GraphBuilder& builder);

}  // namespace mlph::bench
