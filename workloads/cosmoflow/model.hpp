// The CosmoFlow network (MLCommons reference v1.0+, REFERENCE §1.2) as an ABI graph, with
// Keras' initial weights (glorot-uniform kernels, zero biases) drawn from a seeded stream.
#pragma once

#include <cstdint>

#include "mlph/sdk/graph/graph.hpp"
#include "settings.hpp"

namespace mlph::cosmoflow {

// Builds into `g`: inputs x (int16 [B,E,E,E,4]) and y (f32 [B,4]), loss mse, eval output
// abs_error_sum, optimizer sgd_keras. With a grid (parallel.spatial), x is this rank's block
// [B,E/gd,E/gh,E/gw,4]: the first spatial_blocks(model) conv blocks run on blocks, a halo_exchange
// before each conv, then a spatial_gather makes the activation whole and the rest runs on every rank.
void build_model(sdk::GraphBuilder& g, const ModelSettings& model, double momentum, uint32_t batch, uint64_t seed);

// How many conv blocks run split over the grid: while every split dim divides evenly into blocks of
// an even size (max-pool 2 splits cleanly) at least as wide as the halo; 0 for a grid of all 1.
// Throws MLPH_INVALID_ARGUMENT, naming the dim, when not even the input splits so.
int spatial_blocks(const ModelSettings& model);

// Count of trainable parameters of the graph.
uint64_t count_parameters(const MLPH_Graph& graph);

}  // namespace mlph::cosmoflow
