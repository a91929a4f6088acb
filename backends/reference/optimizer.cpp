// Optimizers: the update a train step applies after the gradients are averaged over ranks.
#include "ops.hpp"

namespace mlph::reference {

void sgd_keras_update(int64_t n, double lr, double momentum, const float* g, float* velocity, float* w) {
  const auto rate = static_cast<float>(lr), m = static_cast<float>(momentum);
  for (int64_t i = 0; i < n; ++i) {
    velocity[i] = m * velocity[i] - rate * g[i];
    w[i] += velocity[i];
  }
}

}  // namespace mlph::reference
