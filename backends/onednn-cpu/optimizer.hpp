// The optimizers of docs/ops.md over flat float32 parameters, in the documented order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/validate.hpp"

namespace mlph::onednn {

struct OptimizerConfig {
  enum class Kind { sgd_keras, adam, adamw, lamb } kind = Kind::sgd_keras;
  double momentum = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, max_grad_norm = 1;
};
// The optimizers implemented here, by name.
const std::vector<std::string>& optimizer_names();
// The validator's optimizer (one of optimizer_names(), its hyperparameters checked).
OptimizerConfig optimizer_config(const sdk::ValidOptimizer& opt);

// One trainable parameter as the optimizer sees it.
struct OptimizerSlot {
  float* w;
  const float* g;
  int64_t n;
  double decay_multiplier;  // MLPH_Parameter.weight_decay
  std::vector<float> m, v;  // velocity (sgd) or moments (adam family), allocated on first use
};

// `step` is MLPH_StepArgs.step (0-based). `scratch` is reused between calls.
void apply_optimizer(const OptimizerConfig& c, std::vector<OptimizerSlot>& slots, double lr, uint64_t step,
                     std::vector<float>& scratch);

}  // namespace mlph::onednn
