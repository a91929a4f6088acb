// Keras SGD with momentum over three steps whose learning rate changes, against hand-computed
// numbers. Keras keeps lr inside the velocity (v = m*v - lr*g; w += v); PyTorch scales the
// velocity by the current lr (v = m*v + g; w -= lr*v), which differs as soon as lr changes.
#include <gtest/gtest.h>

#include "ops.hpp"
#include "test_util.hpp"

namespace mlph::reference {
namespace {

TEST(ReferenceSgdKeras, ThreeStepsWithChangingLearningRate) {
  // w0 = 1, momentum 0.9; (lr, g) per step: (0.1, 0.5), (0.2, 1.0), (0.05, -2.0).
  //   v1 = -0.1*0.5                    = -0.05    w1 = 0.95
  //   v2 = 0.9*-0.05  - 0.2*1.0        = -0.245   w2 = 0.705
  //   v3 = 0.9*-0.245 - 0.05*-2.0      = -0.1205  w3 = 0.5845
  // PyTorch would give w2 = 0.95 - 0.2*(0.9*0.5 + 1.0) = 0.66.
  ThreadPool pool(1);
  float w = 1.0f, v = 0.0f;
  const double lr[3] = {0.1, 0.2, 0.05};
  const float g[3] = {0.5f, 1.0f, -2.0f};
  const float expected_v[3] = {-0.05f, -0.245f, -0.1205f}, expected_w[3] = {0.95f, 0.705f, 0.5845f};
  for (int step = 0; step < 3; ++step) {
    sgd_keras_update(pool, 1, lr[step], 0.9, &g[step], &v, &w);
    EXPECT_NEAR(v, expected_v[step], 1e-6) << "step " << step + 1;
    EXPECT_NEAR(w, expected_w[step], 1e-6) << "step " << step + 1;
  }
}

// The same rule through train_step: loss = mean((w - 0)^2) over one element, so g = 2w.
//   w0 = 1, momentum 0.5; lr 0.1, 0.5, 0.25:
//   step 1: loss 1,    g = 2,    v = -0.2,                w = 0.8
//   step 2: loss 0.64, g = 1.6,  v = 0.5*-0.2 - 0.8 = -0.9,  w = -0.1
//   step 3: loss 0.01, g = -0.2, v = 0.5*-0.9 + 0.05 = -0.4, w = -0.5
TEST(ReferenceSgdKeras, TrainStepsFollowKerasWhenLearningRateChanges) {
  sdk::GraphBuilder g;
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {1});
  g.parameter(w, {1.0f});
  const int32_t t = g.value("t", MLPH_DTYPE_F32, {1});
  const int32_t loss = g.node("mse", "loss", {w, t}, {g.value("loss", MLPH_DTYPE_F32, {})});
  g.inputs({t});
  g.loss(loss);
  g.optimizer("sgd_keras", {{"momentum", 0.5}});
  test::Compiled model(g.graph());
  std::vector<float> zero{0.0f};
  const MLPH_Value wv = g.value_info(w);
  const double lrs[3] = {0.1, 0.5, 0.25}, losses[3] = {1.0, 0.64, 0.01}, grads[3] = {2.0, 1.6, -0.2};
  const double weights[3] = {0.8, -0.1, -0.5};
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(model.train({test::tensor_for(g.value_info(t), zero)}, lrs[step], static_cast<uint64_t>(step)),
                losses[step], 1e-6);
    EXPECT_NEAR(model.read_gradient(0, wv)[0], grads[step], 1e-6) << "step " << step + 1;
    EXPECT_NEAR(model.read_parameter(0, wv)[0], weights[step], 1e-6) << "step " << step + 1;
  }
}

}  // namespace
}  // namespace mlph::reference
