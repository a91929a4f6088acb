// The gradient buckets (backends/cuda/plan/buckets.hpp): how they tile the buffer and when each is ready.
#include <gtest/gtest.h>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

#ifdef MLPH_HAVE_COSMOFLOW
TEST(CudaPlanBuckets, TileTheBufferLastLayersFirstAndAreReadyWhenBackwardIsDoneWithThem) {
  const Program p = mini_cosmoflow();
  const DevicePlan plan = make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, 1024});
  const ParamLayout& layout = plan.memory.params;
  const std::vector<Bucket>& b = plan.buckets;
  ASSERT_EQ(b.size(), 4u);  // {output, dense2}, {dense1}, {conv2}, {conv1}: each kernel and bias
  EXPECT_EQ(b.front().offset + b.front().count, layout.trainable_floats);
  EXPECT_EQ(b.back().offset, 0u);
  size_t params = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    params += b[i].params;
    if (i + 1 < b.size()) {
      EXPECT_EQ(b[i + 1].offset + b[i + 1].count, b[i].offset);
      EXPECT_GE(b[i].count * sizeof(float), 1024u);
      EXPECT_GE(b[i + 1].after_step, b[i].after_step);
    }
    // Every node reading one of its parameters has run its backward by after_step.
    for (size_t k = 0; k < p.params.size(); ++k) {
      const ParamSlot& slot = layout.params[k];
      if (!slot.trainable || slot.offset < b[i].offset || slot.offset >= b[i].offset + b[i].count) continue;
      for (size_t n = 0; n < p.nodes.size(); ++n)
        for (int32_t in : p.nodes[n].inputs)
          if (in == p.params[k].value) {
            EXPECT_LE(plan.schedule.backward[n], b[i].after_step) << p.nodes[n].name;
          }
    }
  }
  EXPECT_EQ(params, 10u);
  EXPECT_EQ(b[0].params, 4u);  // output's 16 + 4 and dense2's 32 + 4 floats, 64-float aligned: 1024 bytes
  EXPECT_EQ(b[0].ready_node, static_cast<int64_t>(index_of(p, "dense2")));
  EXPECT_EQ(b[0].after_step, plan.schedule.backward[index_of(p, "dense2")]);  // right after its backward
  EXPECT_EQ(make_plan(p, {}).buckets.size(), 1u);  // 25 MiB hold it all
}
#endif

TEST(CudaPlanBuckets, ABucketWaitsForTheEarliestReaderOfAnyOfItsParameters) {
  Net net;  // w2 is declared before w1 but read after it
  const int32_t x = net.input("x", {2, 3});
  const int32_t w2 = net.param("w2", {3, 3}), w1 = net.param("w1", {3, 3});
  int32_t h = net.op("dense", "d1", {x, w1}, {2, 3});
  h = net.op("dense", "d2", {h, w2}, {2, 3});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].ready_node, static_cast<int64_t>(index_of(p, "d1")));
  EXPECT_EQ(plan.buckets[0].after_step, plan.schedule.backward[index_of(p, "d1")]);
}

}  // namespace
}  // namespace mlph::cuda::plan
