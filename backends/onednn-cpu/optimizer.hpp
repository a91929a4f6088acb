// The optimizers of docs/ops.md over flat float32 parameters, in the documented order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/validate.hpp"

namespace mlph::onednn {

struct OptimizerConfig {
  enum class Kind { sgd_keras, adam, adamw, lamb } kind = Kind::sgd_keras;
  std::vector<std::string> state;  // the catalogue's slot names: OptimizerSlot::m, then v
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
  // The buffer of state slot `i` (OptimizerConfig::state order), allocated (zero) if not yet.
  std::vector<float>& state(size_t i) {
    std::vector<float>& s = i == 0 ? m : v;
    if (s.empty()) s.assign(size_t(n), 0.0f);
    return s;
  }
};

// `step` is MLPH_StepArgs.step (0-based). `scratch` is reused between calls.
void apply_optimizer(const OptimizerConfig& c, std::vector<OptimizerSlot>& slots, double lr, uint64_t step,
                     std::vector<float>& scratch);

}  // namespace mlph::onednn
