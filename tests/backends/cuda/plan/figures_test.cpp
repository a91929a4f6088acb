// The whole plan (backends/cuda/plan/plan.hpp) of the real CosmoFlow and DeepCAM graphs: peak bytes and
// buckets printed (`--gtest_filter='CudaPlanFigures.*'`), padding, pointwise gemms, repeated conv shapes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

void report(const std::string& name, const Program& p, Precision precision) {
  const DevicePlan plan = make_plan(p, {precision});
  expect_no_overlap(plan.memory, plan.schedule);
  EXPECT_GE(plan.memory.arena_bytes, plan.memory.live_bytes_peak);
  EXPECT_LE(plan.memory.arena_bytes, plan.memory.live_bytes_peak / 20 * 21);  // the placement wastes < 5%
  for (const NodeLowering& l : plan.nodes) EXPECT_FALSE(l.conv && l.conv->explicit_padding);  // cuDNN pads them all
  std::printf("%s, %s: %s  %zu gradient buckets of ~25 MiB over %zu trainable floats\n", name.c_str(), name_of(precision),
              describe(plan.memory, plan.schedule).c_str(), plan.buckets.size(), plan.memory.params.trainable_floats);
}

#ifdef MLPH_HAVE_COSMOFLOW
TEST(CudaPlanFigures, CosmoFlow128AtBatch1And4) {
  for (uint32_t batch : {1u, 4u}) {
    const Program p = cosmoflow_program(batch);
    for (Precision precision : {Precision::fp32, Precision::bf16})
      report("CosmoFlow 128^3 batch " + std::to_string(batch), p, precision);
  }
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
TEST(CudaPlanFigures, DeepCam768x1152AtBatch8) {
  const Program p = deepcam_program(8);
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) report("DeepCAM 768x1152 batch 8", p, precision);
  // Issue 33 item 4 asks for bf16 at most 55% of fp32: 52.0% with every activation between DeepCAM's
  // convs in bf16, the image-pool branch and the ASPP's batch norms included (plan/precision.cpp);
  // held here so that it does not grow back.
  const double fp32 = static_cast<double>(make_plan(p, {Precision::fp32}).memory.arena_bytes);
  const double bf16 = static_cast<double>(make_plan(p, {Precision::bf16}).memory.arena_bytes);
  std::printf("DeepCAM 768x1152 batch 8 arena: fp32 %.1f MiB, bf16 %.1f MiB = %.1f%% (issue 33's target: 55%%)\n",
              fp32 / 1048576.0, bf16 / 1048576.0, 100.0 * bf16 / fp32);
  EXPECT_LE(bf16 / fp32, 0.521);
}

// The real graphs in bf16: CosmoFlow's conv1 (its 3 taps along w folded in: 12 channels padded to 16) and
// DeepCAM's last_deconv (3 classes padded to 8), nothing else; no padding in fp32; the parameters keep the
// model's shapes (masters, gradients, checkpoints).
TEST(CudaPlanFigures, Conv1AndLastDeconvArePaddedAndParametersKeepTheModelsShapes) {
  struct Graph {
    Program program;
    std::string padded_in_bf16;
    int64_t taps, padded_channels;
  };
  for (const Graph& graph : {Graph{cosmoflow_program(4), "conv1", 3, 16}, Graph{deepcam_program(8), "decoder.last_deconv", 1, 8}}) {
    const Program& p = graph.program;
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      const DevicePlan plan = make_plan(p, {precision});
      std::set<std::string> padded;
      for (size_t k = 0; k < p.nodes.size(); ++k)
        if (const auto& conv = plan.nodes[k].conv; conv && conv->channels) {
          padded.insert(p.nodes[k].name);
          EXPECT_EQ(conv->taps, graph.taps) << p.nodes[k].name;
          EXPECT_EQ(conv->padded_channels, graph.padded_channels) << p.nodes[k].name;
        }
      const std::set<std::string> expected =
          precision == Precision::fp32 ? std::set<std::string>{} : std::set<std::string>{graph.padded_in_bf16};
      EXPECT_EQ(padded, expected) << name_of(precision);
      for (size_t i = 0; i < p.params.size(); ++i) {
        const std::string name = p.value(p.params[i].value).name;
        const int64_t count = p.value(p.params[i].value).numel();
        EXPECT_EQ(plan.memory.params.params[i].count, static_cast<size_t>(count)) << name;
        // The masters' layout (cuDNN's filter, unpadded: only the half copy has the zero rows) is a
        // permutation of the model's elements.
        const ParamMap& map = plan.params[i];
        if (map.identity()) continue;
        EXPECT_EQ(map.rows * map.cols, count) << name << " " << name_of(precision);
        std::vector<bool> hit(static_cast<size_t>(count), false);
        for (int64_t e = 0; e < count; ++e) {
          const int64_t at = map.device(e);
          ASSERT_TRUE(at >= 0 && at < count && !hit[static_cast<size_t>(at)]) << name << " element " << e;
          hit[static_cast<size_t>(at)] = true;
        }
      }
    }
  }
}

// By default every 1x1 stride-1 conv of DeepCAM is a cuBLASLt gemm (backend.pointwise=cudnn: none), and
// cuDNN's search runs once per distinct conv shape and pass, not once per conv. By default the depthwise
// convs run on our kernel (backend.depthwise=own) and the few convs left on cuDNN hardly repeat; with
// backend.depthwise=cudnn the middle blocks' depthwise convs (16 repeats) are cuDNN's, and most searches
// are repeats.
TEST(CudaPlanFigures, DeepCamsPointwiseConvsAreGemmsAndItsConvShapesRepeat) {
  const Program p = deepcam_program(8);
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  const std::vector<NodeLowering> cudnn = lower_nodes(p, {Pointwise::cudnn});
  size_t pointwise = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (!is_pointwise(p.nodes[k])) continue;
    ++pointwise;
    EXPECT_EQ(plan.nodes[k].engine, Engine::cublaslt_dense) << p.nodes[k].name;
    EXPECT_EQ(cudnn[k].engine, Engine::cudnn_conv) << p.nodes[k].name;
  }
  EXPECT_GE(pointwise, 30u);  // the separable convs' pointwise halves and the skips
  // (convs on cuDNN, searches, distinct keys) of a plan, one search per pass of each conv without the cache.
  const auto searches_of = [&](const DevicePlan& each, const char* depthwise) {
    size_t convs = 0, searches = 0;
    std::set<ConvKey> keys;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      if (!each.nodes[k].conv) continue;
      ++convs;
      const NodePrecision& n = each.precision.nodes[k];
      for (int pass = 0; pass < 3; ++pass, ++searches) keys.insert(conv_key(*each.nodes[k].conv, n.data, n.math, pass));
    }
    std::printf("DeepCAM 768x1152 batch 8, backend.depthwise=%s: %zu pointwise convs on cuBLASLt; %zu convs left on "
                "cuDNN, %zu searches for %zu distinct shapes and passes\n",
                depthwise, pointwise, convs, searches, keys.size());
    return std::pair(searches, keys.size());
  };
  searches_of(plan, "own");
  Options depthwise_on_cudnn{Precision::bf16};
  depthwise_on_cudnn.own.depthwise = false;
  const auto [searches, distinct] = searches_of(make_plan(p, depthwise_on_cudnn), "cudnn");
  EXPECT_LT(distinct * 2, searches);  // at least half the searches are repeats
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
