// The CosmoFlow network (MLCommons reference v1.0+, REFERENCE §1.2) as an ABI graph, with
// Keras' initial weights (glorot-uniform kernels, zero biases) drawn from a seeded stream.
#pragma once

#include <cstdint>

#include "mlph/sdk/graph.hpp"
#include "settings.hpp"

namespace mlph::cosmoflow {

// Builds into `g`: inputs x (int16 [B,E,E,E,4]) and y (f32 [B,4]), loss mse, eval output
// abs_error_sum, optimizer sgd_keras.
void build_model(sdk::GraphBuilder& g, const ModelSettings& model, double momentum, uint32_t batch, uint64_t seed);

// Count of trainable parameters of the graph.
uint64_t count_parameters(const MLPH_Graph& graph);

}  // namespace mlph::cosmoflow
