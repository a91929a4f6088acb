// The precision plan (`backend.precision`): per value the type it is stored in, per node the type
// it reads each input in and writes its output in; and fp16's dynamic loss scaling.
//
// Under bf16 (and fp16 alike, in fp16) an activation is stored in bf16 where the node writing it and every node reading it take
// bf16 as stored (issue 33 item 4, so far): cuDNN convs (no explicit padding, no padded input side, no
// bias of their own to add) and pool chains (lowering.hpp) - CosmoFlow's conv blocks: each conv writes
// its z in bf16, the chain pools it into a bf16 y the next conv reads, their gradients bf16 alike, no
// cast between them. Every other value is stored in its graph type (float32 activations, int16 data,
// int32 labels) and every other op runs on our fp32 kernels, except the three the catalogue marks
// reduced_precision:
//   conv, conv_transpose  cuDNN in compute_dtype(precision): x (a cast copy) and the weights (the
//                         device's copy) in that type, y and dx written in it too (cuDNN's x, w and y
//                         share a type), accumulating in fp32; y cast up into its fp32 value, dx cast
//                         and added into its fp32 gradient; dy cast down before backward
//   dense                 cuBLASLt with A and B in compute_dtype(precision) and C/D in fp32: y, dx and
//                         dw are written in fp32 directly, only x (a cast copy), the weights and dy are
//                         half; so are pointwise convs lowered to cuBLASLt (lowering.hpp)
// Biases are fp32 in every precision (added by our kernels or cuBLASLt's epilogue). In fp32 and tf32
// nothing is cast: fp32 multiplies with FMA only (TF32 off), tf32 with TF32 tensor cores.
// Keeping activations in half between the convolutions (templated kernels) is the next speed step:
// backends/cuda/README.md.
//
// A node reading a value in a type other than the value's is a cast: the memory plan makes one copy
// per (value, type), made by the first node reading it, kept for every reader (and backward). Conv
// and dense weights are never cast this way: the device keeps a copy in the compute type and layout
// (memory.hpp: weights), written by the optimizer's own pass (and cast after the host's writes); master weights, the gradient
// buffer and the optimizer's state are always fp32.
#pragma once

#include <vector>

#include "lowering.hpp"
#include "types.hpp"

namespace mlph::cuda::plan {

struct NodePrecision {
  DType data = DType::f32;    // its data input, weights and output gradient, as its library reads them
  DType writes = DType::f32;  // its output and its data inputs' gradients, as its library writes them
  MathMode math = MathMode::fma;  // conv, conv_transpose, dense: the math it multiplies with
  std::vector<DType> reads;       // per input, the type the node reads it in
};

struct PrecisionPlan {
  Precision precision = Precision::fp32;
  std::vector<DType> values;  // per value, the type it is stored in (parameters: their fp32 masters)
  std::vector<NodePrecision> nodes;
  bool loss_scaling = false;  // fp16: the loss's gradient starts at LossScaler::scale()
};

// `lowering`: lower_nodes(program), per node (which library writes its output). Ops on our kernels
// (a depthwise conv too) compute and store in fp32 whatever the precision.
PrecisionPlan plan_precision(const Program& program, Precision precision, const std::vector<NodeLowering>& lowering);

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
