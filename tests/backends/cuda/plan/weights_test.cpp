// The parameters' device layout (backends/cuda/plan/weights.hpp): conv masters as cuDNN's filter, the
// model's layout back whole, one layout per weight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

// Conv weights on cuDNN live as its NHWC filter (descriptors_test.cpp's emulation reads that), in the
// masters, the gradient buffer and the optimizer slots alike; every other parameter as the model has it.
// The model's layout comes back whole (read_parameter, read_state, checkpoints).
TEST(CudaPlanWeights, ConvMastersAreCudnnsFilterAndTheModelsLayoutComesBack) {
  Net net;
  const int32_t x = net.input("x", {2, 5, 4, 3, 6});
  int32_t h = net.op("conv", "c3", {x, net.param("w3", {3, 3, 3, 3, 4}), net.param("b3", {4})}, {2, 5, 4, 3, 4},
                     {{"padding", {1, 1, 1}}, {"groups", 2.0}});
  h = net.op("conv", "pw", {h, net.param("wp", {1, 1, 1, 4, 5})}, {2, 5, 4, 3, 5});
  h = net.op("conv_transpose", "up", {h, net.param("wt", {2, 2, 2, 3, 5})}, {2, 10, 8, 6, 3}, {{"stride", {2, 2, 2}}});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  ASSERT_EQ(plan.params.size(), 4u);
  for (size_t i = 0; i < p.params.size(); ++i) {
    const std::string name = p.value(p.params[i].value).name;
    const std::vector<float>& w = p.params[i].init;
    const auto n = static_cast<int64_t>(w.size());
    std::vector<float> device(w.size()), back(w.size());
    to_device(plan.params[i], w.data(), device.data(), n);
    to_model(plan.params[i], device.data(), back.data(), n);
    EXPECT_EQ(back, w) << name;
    if (name == "w3" || name == "wt") {
      const Node& reader = node_named(p, name == "w3" ? "c3" : "up");
      EXPECT_EQ(device, device_filter(plan.nodes[index_of(p, reader.name)].conv->filter, w)) << name;
      EXPECT_NE(device, w) << name;
    } else {
      EXPECT_TRUE(plan.params[i].identity()) << name;  // the bias, the pointwise conv's (cuBLASLt) weights
    }
  }
  EXPECT_FALSE(make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, kBucketBytes, Pointwise::cudnn}).params[2].identity());  // wp on cuDNN
}

TEST(CudaPlanWeights, AWeightReadInTwoLayoutsFailsNamingBothNodes) {
  Net net;
  const int32_t x = net.input("x", {1, 4, 4, 2});
  const int32_t w = net.param("w", {1, 1, 2, 2});
  const int32_t a = net.op("conv", "gemm", {x, w}, {1, 4, 4, 2});
  const int32_t b = net.op("conv", "strided", {a, w}, {1, 2, 2, 2}, {{"stride", {2, 2}}});
  const Program p = net.lower(b);
  EXPECT_EQ(error_of([&] { make_plan(p, {}); }),
            "cuda backend: node 'strided' (conv): it reads parameter 'w' in another layout than node 'gemm' does; "
            "the cuda backend keeps one");
  EXPECT_EQ(error_of([&] { make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, kBucketBytes, Pointwise::cudnn}); }), "");
}

}  // namespace
}  // namespace mlph::cuda::plan
