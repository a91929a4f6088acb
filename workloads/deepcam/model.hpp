// DeepLabv3+ with the modified aligned Xception of the MLCommons DeepCAM reference (REFERENCE §2.1,
// §2.10) as an ABI graph: channels-last, min/max normalization as its first op, weighted softmax
// cross-entropy as the loss, per-sample IoU as the eval output, and the reference's mixed
// initialization drawn from a seeded stream.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mlph/sdk/graph/graph.hpp"
#include "settings.hpp"

namespace mlph::deepcam {

inline constexpr int kClasses = 3;  // background, tropical cyclone, atmospheric river

// Per-channel input normalization, x_norm = (x - shift) * scale (shift = min, scale = 1/(max-min)).
struct Normalization {
  std::vector<float> shift, scale;
  static Normalization identity(int channels);
};

// The loss weights w_c = f_c^-0.125 of the reference's class frequencies, as float32.
std::array<float, kClasses> class_weights();

// Builds into `g`: inputs x (f32 [B,H,W,C]) and labels (i32 [B,H,W]); loss softmax_cross_entropy
// (divided by the accumulation frequency); eval output iou (f32 [B]); the optimizer of `optimizer`
// with weight decay on every parameter; batch norm over groups of ranks per `training`.
void build_model(sdk::GraphBuilder& g, const DataSettings& data, const Normalization& norm,
                 const OptimizerSettings& optimizer, uint32_t batch, uint64_t seed,
                 const TrainingSettings& training = {});

// Trainable scalars of the graph.
uint64_t count_parameters(const MLPH_Graph& graph);

// Multiply-accumulates of one forward pass of the whole batch (conv and conv_transpose; the rest is
// negligible).
double forward_macs(const MLPH_Graph& graph);

}  // namespace mlph::deepcam
