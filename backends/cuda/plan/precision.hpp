// The precision plan (`backend.precision`): per value the type it is stored in, per node the type
// it reads each input in and writes its output in; and fp16's dynamic loss scaling.
//
// Ops fall in three classes (a table in precision.cpp):
//   compute   conv, conv_transpose, dense: data and weights in compute_dtype(precision) (f32 for
//             fp32 and tf32, else bf16/f16), fp32 accumulation, math_of(precision); bias fp32
//   fp32      preprocessing (log1p, shift_scale), losses (mse, softmax_cross_entropy), metrics
//             (abs_error_sum, iou): fp32 in and out
//   follow    everything else (activations, dropout, add, concat, pools, broadcast, batch_norm,
//             channel_affine, reshape): in the widest type of its data inputs (fp32 if any is
//             fp32, else the half type), so activations between convs stay half; batch_norm computes
//             its statistics in fp32 (cuDNN and our kernels) and global_avg_pool accumulates in fp32
// Per-channel parameters (batch_norm's gamma, beta and running statistics, channel_affine's w and b,
// shift_scale's shift and scale, biases) are always read in fp32 from their masters. Integer inputs
// (int16 data, int32 labels) are read as they are.
//
// A node reading a value in a type other than the value's is a cast: the memory plan makes one copy
// per (value, type), before the first node reading it, kept for every reader (and backward). The
// gradient of a value has the value's type; a node writing an input's gradient in another type
// writes a scratch buffer that is cast and added into it. Conv and dense weights are never cast
// this way: the device keeps a copy in the compute type and layout (memory.hpp: compute_weights),
// made from the fp32 masters after each update; master weights, the gradient buffer and the
// optimizer's state are always fp32.
#pragma once

#include <vector>

#include "types.hpp"

namespace mlph::cuda::plan {

struct NodePrecision {
  DType data = DType::f32;  // its data inputs, its output, and their gradients, as it reads and writes them
  MathMode math = MathMode::fma;  // conv, conv_transpose, dense: the math it multiplies with
  std::vector<DType> reads;       // per input, the type the node reads it in
};

struct PrecisionPlan {
  Precision precision = Precision::fp32;
  std::vector<DType> values;  // per value, the type it is stored in (parameters: their fp32 masters)
  std::vector<NodePrecision> nodes;
  bool loss_scaling = false;  // fp16: the loss's gradient starts at LossScaler::scale()
};

PrecisionPlan plan_precision(const Program& program, Precision precision);

// Is input `slot` of `node` a conv/dense weight (read from the device's weight copy)?
bool is_weight_slot(const Node& node, size_t slot);

// fp16's dynamic loss scaling, as PyTorch's torch.amp.GradScaler with its defaults (init_scale 2^16,
// growth_factor 2, backoff_factor 0.5, growth_interval 2000; _amp_update_scale_): the loss gradient
// starts at scale(); after the gradients are summed over the ranks (Inf and NaN survive a sum, so
// every rank sees the same), they are multiplied by inverse() and checked; update(found) then
// - on Inf/NaN: skips the optimizer's update, halves the scale, and restarts the count of good steps;
// - else: applies the update, and after `interval` good steps in a row doubles the scale (kept only
//   if the doubled scale is finite in float32) and restarts the count.
// There is no lower bound on the scale (as PyTorch). With gradient accumulation it runs once per
// applied step, over the window's sum. Checkpoints must keep scale() and good_steps() for a bitwise
// resume (restore()).
class LossScaler {
 public:
  struct Settings {
    float initial = 65536.0f;
    double growth = 2.0, backoff = 0.5;
    int interval = 2000;
  };

  LossScaler() : LossScaler(Settings{}) {}
  explicit LossScaler(const Settings& settings) : settings_(settings), scale_(settings.initial) {}

  float scale() const { return scale_; }
  float inverse() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }  // as PyTorch's
  int good_steps() const { return good_steps_; }

  // Returns whether the optimizer applies this step's update.
  bool update(bool found_nonfinite);
  void restore(float scale, int good_steps) { scale_ = scale, good_steps_ = good_steps; }

 private:
  Settings settings_;
  float scale_;
  int good_steps_ = 0;
};

}  // namespace mlph::cuda::plan
