// The precision plan's half storage (issue 33 item 4 and its last items): under fp16 a value is stored
// in fp16 exactly where bf16 stores it in bf16 (one rule: our kernels have a body for each half type,
// cuDNN and cuBLASLt take either), so fp16's arena is bf16's; fp16's gradients in half storage are the
// loss-scaled values (kernels/half_storage_test.cpp: an overflow reaches the non-finite count).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "plan/plan.hpp"

#ifdef MLPH_HAVE_COSMOFLOW
#include "../../../../workloads/cosmoflow/model.hpp"
#endif
#ifdef MLPH_HAVE_DEEPCAM
#include "../../../../workloads/deepcam/model.hpp"
#endif

namespace mlph::cuda::plan {
namespace {

// fp16 and bf16 store the same values in half, node by node the same way (the compute type apart),
// and fp16 alone scales the loss.
void expect_fp16_is_bf16_in_fp16(const Program& p, const std::string& what) {
  const DevicePlan bf16 = make_plan(p, {Precision::bf16}), fp16 = make_plan(p, {Precision::fp16});
  const auto as_fp16 = [](DType t) { return t == DType::bf16 ? DType::f16 : t; };
  size_t half = 0;
  ASSERT_EQ(bf16.precision.values.size(), fp16.precision.values.size());
  for (size_t v = 0; v < p.values.size(); ++v) {
    EXPECT_EQ(fp16.precision.values[v], as_fp16(bf16.precision.values[v])) << what << ": " << p.values[v].name;
    half += fp16.precision.values[v] == DType::f16;
  }
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const NodePrecision &b = bf16.precision.nodes[k], &f = fp16.precision.nodes[k];
    EXPECT_EQ(f.data, as_fp16(b.data)) << what << ": " << p.nodes[k].name;
    EXPECT_EQ(f.writes, as_fp16(b.writes)) << what << ": " << p.nodes[k].name;
    ASSERT_EQ(f.reads.size(), b.reads.size());
    for (size_t i = 0; i < f.reads.size(); ++i) EXPECT_EQ(f.reads[i], as_fp16(b.reads[i])) << what << ": " << p.nodes[k].name;
  }
  EXPECT_GT(half, 0u) << what;
  // The same regions but fp16's loss scale and its count of good steps (one aligned slot).
  size_t loss_scale = 0;
  for (const Region& r : fp16.memory.regions) loss_scale += r.kind == RegionKind::loss_scale ? r.bytes : 0;
  for (const Region& r : bf16.memory.regions) EXPECT_NE(r.kind, RegionKind::loss_scale) << what;
  EXPECT_EQ(loss_scale, kAlignment) << what;
  EXPECT_EQ(fp16.memory.arena_bytes, bf16.memory.arena_bytes + loss_scale) << what;
  EXPECT_TRUE(fp16.precision.loss_scaling);
  EXPECT_FALSE(bf16.precision.loss_scaling);
}

#ifdef MLPH_HAVE_COSMOFLOW
TEST(CudaPlanHalfStorage, Fp16StoresCosmoFlowAsBf16Does) {
  for (uint32_t batch : {1u, 4u}) {
    sdk::GraphBuilder g;
    cosmoflow::build_model(g, cosmoflow::ModelSettings{}, 0.9, batch, 7);
    const Program p = sdk::program::lower_graph(*g.graph(), implemented());
    expect_fp16_is_bf16_in_fp16(p, "CosmoFlow b" + std::to_string(batch));
  }
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
// Issue 33 item 4's target (the half arena at most 55% of fp32's) for fp16 too; the figure printed.
TEST(CudaPlanHalfStorage, Fp16StoresDeepCamAsBf16DoesWithinTheTarget) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  expect_fp16_is_bf16_in_fp16(p, "DeepCAM b8");
  const double fp32 = static_cast<double>(make_plan(p, {Precision::fp32}).memory.arena_bytes);
  const double fp16 = static_cast<double>(make_plan(p, {Precision::fp16}).memory.arena_bytes);
  std::printf("DeepCAM 768x1152 batch 8 arena: fp32 %.1f MiB, fp16 %.1f MiB = %.1f%%\n", fp32 / 1048576.0,
              fp16 / 1048576.0, 100.0 * fp16 / fp32);
  EXPECT_LE(fp16 / fp32, 0.521);  // 52.0% (was 52.4% with the image-pool branch in fp32)
}

// Issue 33's last items: concat writes each input's gradient first (its band of dy, 0 + dy) instead of
// a memset and an add. What is still zeroed before its first writer is printed by op.
TEST(CudaPlanHalfStorage, DeepCamZeroesNoConcatGradient) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    const DevicePlan plan = make_plan(p, {precision});
    std::map<std::string, size_t> left;
    size_t concats = 0, written = 0;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const NodeMemory& m = plan.memory.nodes[k];
      for (size_t i = 0; i < m.zeroed.size(); ++i) {
        if (m.zeroed[i]) ++left[std::string(op_name(p.nodes[k].kind))];
        if (p.nodes[k].kind != OpKind::concat || !m.gradients[i]) continue;
        ++concats;
        EXPECT_FALSE(m.zeroed[i]) << p.nodes[k].name << " input " << i;
        written += !m.accumulate[i] && first_writer_overwrites(p.nodes[k], plan.nodes[k], m, i);
      }
    }
    std::string by_op;
    for (const auto& [op, count] : left) by_op += " " + op + " " + std::to_string(count);
    std::printf("DeepCAM 768x1152 b8 %s: concat input gradients %zu, written first by the concat %zu; zeroed left:%s\n",
                name_of(precision), concats, written, by_op.c_str());
    EXPECT_GE(written, 7u);  // the 7 that were memsets (DeepCamZeroesNoGradientWhoseFirstWriterOverwrites)
    EXPECT_EQ(left.count("concat"), 0u);
    for (const char* op : {"broadcast", "global_avg_pool", "channel_affine"})  // their data gradient written first
      EXPECT_EQ(left.count(op), 0u) << op;
  }
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
