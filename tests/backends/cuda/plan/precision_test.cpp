// The precision plan and the loss scaler (backends/cuda/plan/precision.hpp): what runs and is stored in
// half precision, on small graphs and on the real CosmoFlow and DeepCAM graphs.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <set>
#include <string>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

#ifdef MLPH_HAVE_COSMOFLOW
TEST(CudaPlanPrecision, Bf16ComputesConvAndDenseInHalfAndEverythingElseInFp32) {
  const Program p = mini_cosmoflow();
  for (Precision precision : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
    const PrecisionPlan plan = plan_precision(p, precision, lower_nodes(p));
    // Every value as declared (int16 data, fp32 activations) but, under bf16, everything from conv1's
    // z to the last dropout: the conv blocks (a cuDNN conv and a pool chain at both ends), the flatten (an
    // alias), the dense layers (cuBLASLt's D in bf16, the bias by our kernel); tanh's y is the loss's,
    // fp32, and so the output layer's.
    const std::set<std::string> half = {"conv1",  "conv1.pool", "conv2",          "conv2.pool", "flatten",
                                        "dense1", "dense1.act", "dense1.dropout", "dense2",     "dense2.act",
                                        "dense2.dropout"};
    for (size_t v = 0; v < p.values.size(); ++v)
      EXPECT_EQ(plan.values[v], compute_dtype(precision) != DType::f32 && half.count(p.values[v].name)
                                    ? compute_dtype(precision)  // bf16 or fp16 alike (issue 33 item 4)
                                    : dtype_of(p.values[v].dtype))
          << p.values[v].name << " " << name_of(precision);
    EXPECT_EQ(plan.loss_scaling, precision == Precision::fp16);
  }
  const PrecisionPlan plan = plan_precision(p, Precision::bf16, lower_nodes(p));
  EXPECT_EQ(plan.values[static_cast<size_t>(value_named(p, "x"))], DType::i16);
  const NodePrecision& conv1 = plan.nodes[index_of(p, "conv1")];
  EXPECT_EQ(conv1.reads, (std::vector<DType>{DType::bf16, DType::bf16, DType::f32}));  // x cast, weights' copy, bias
  EXPECT_EQ(conv1.data, DType::bf16);
  EXPECT_EQ(conv1.writes, DType::bf16);  // cuDNN writes y in x's type: cast up after
  EXPECT_EQ(conv1.math, MathMode::tensor_op);
  const NodePrecision& dense1 = plan.nodes[index_of(p, "dense1")];
  EXPECT_EQ(dense1.reads, (std::vector<DType>{DType::bf16, DType::bf16, DType::f32}));
  EXPECT_EQ(dense1.writes, DType::bf16);  // cuBLASLt writes D as stored (bf16), the bias by our kernel
  // Our kernels read and write as stored: the first pool chain in bf16 (its T), the rest in fp32.
  EXPECT_EQ(plan.nodes[index_of(p, "conv1.pool")].data, DType::bf16);
  EXPECT_EQ(plan.nodes[index_of(p, "conv1.pool")].writes, DType::bf16);
  for (const char* node : {"log1p", "conv1.act", "output.tanh", "loss", "abs_error_sum"}) {
    const NodePrecision& n = plan.nodes[index_of(p, node)];
    EXPECT_EQ(n.data, DType::f32) << node;
    EXPECT_EQ(n.writes, DType::f32) << node;
  }
  EXPECT_EQ(plan.nodes[index_of(p, "loss")].reads, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "log1p")].reads, (std::vector<DType>{DType::i16}));
  EXPECT_EQ(plan_precision(p, Precision::fp16, lower_nodes(p)).nodes[index_of(p, "conv2")].writes, DType::f16);
  for (Precision precision : {Precision::fp32, Precision::tf32}) {
    const PrecisionPlan full = plan_precision(p, precision, lower_nodes(p));
    EXPECT_EQ(full.nodes[index_of(p, "conv1")].math, precision == Precision::fp32 ? MathMode::fma : MathMode::tf32);
    EXPECT_EQ(full.nodes[index_of(p, "dense1")].reads[0], DType::f32);
    EXPECT_EQ(full.nodes[index_of(p, "conv1")].writes, DType::f32);
  }
}
#endif

TEST(CudaPlanPrecision, BatchNormAndEveryOtherKernelOpStayFp32InHalfPrecisions) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  const int32_t c = net.op("conv", "conv", {x, net.param("w", {1, 1, 3, 3})}, {2, 4, 4, 3});
  const int32_t bn = net.op("batch_norm", "bn",
                            {c, net.param("g", {3}), net.param("b", {3}), net.param("m", {3}, 0), net.param("v", {3}, 0)},
                            {2, 4, 4, 3});
  const int32_t sum = net.op("add", "add", {bn, net.param("bias_map", {2, 4, 4, 3})}, {2, 4, 4, 3});
  const int32_t y = net.op("relu", "relu", {sum}, {2, 4, 4, 3});
  const Program p = net.lower(y);
  const PrecisionPlan plan = plan_precision(p, Precision::fp16, lower_nodes(p));
  EXPECT_EQ(plan.nodes[index_of(p, "conv")].reads, (std::vector<DType>{DType::f16, DType::f16}));
  EXPECT_EQ(plan.values[static_cast<size_t>(c)], DType::f32);  // the conv's output, cast up
  EXPECT_EQ(plan.nodes[index_of(p, "bn")].data, DType::f32);
  EXPECT_EQ(plan.nodes[index_of(p, "bn")].reads,
            (std::vector<DType>{DType::f32, DType::f32, DType::f32, DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "add")].reads, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "relu")].data, DType::f32);
}

TEST(CudaPlanLossScaler, GrowsAfter2000FiniteStepsAndBacksOffAndSkipsOnInfOrNan) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inverse(), 1.0f / 65536.0f);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.good_steps(), 1999);
  EXPECT_TRUE(s.update(false));  // the 2000th
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 1500; ++i) s.update(false);
  EXPECT_FALSE(s.update(true));  // skipped, halved, count restarted
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0f);  // 2000 good steps count from the last overflow
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
}

TEST(CudaPlanLossScaler, NeverGrowsToInfinityAndHasNoFloor) {
  LossScaler s({0x1p127f, 2.0, 0.5, 2});
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 0x1p127f);  // 2^128 is not a float: kept, count restarted (as PyTorch)
  EXPECT_EQ(s.good_steps(), 0);
  LossScaler tiny({0x1p-148f, 2.0, 0.5, 2000});
  tiny.update(true);
  EXPECT_EQ(tiny.scale(), 0x1p-149f);
  s.restore(1024.0f, 1);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0f);
}

#ifdef MLPH_HAVE_COSMOFLOW
// Issue 33 item 4 (CosmoFlow's part): under bf16 each conv block's z and pooled y are stored in bf16
// and so are their gradients: the conv writes z and reads the previous y as they are (no output scratch,
// no cast copy, no dy cast, no dx scratch), the chain pools bf16 into bf16; the last block's y goes
// through the flatten (an alias, tied) into dense1 as stored. fp32 stores every activation in fp32.
TEST(CudaPlanPrecision, Bf16KeepsCosmoFlowsConvBlocksInBf16EndToEnd) {
  const Program p = cosmoflow_program(4);
  const DevicePlan fp32 = make_plan(p, {Precision::fp32}), bf16 = make_plan(p, {Precision::bf16});
  for (DType t : fp32.precision.values) EXPECT_NE(t, DType::bf16);
  std::vector<std::string> half;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (bf16.precision.values[v] == DType::bf16) half.push_back(p.values[v].name);
  size_t chains = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (bf16.nodes[k].engine != Engine::pool_chain) continue;
    const auto conv = static_cast<size_t>(bf16.nodes[k].chain_conv);
    const int32_t z = p.nodes[conv].output, y = p.nodes[k].output;
    ++chains;
    EXPECT_EQ(bf16.precision.values[static_cast<size_t>(z)], DType::bf16) << p.nodes[conv].name;
    EXPECT_EQ(bf16.precision.values[static_cast<size_t>(y)], DType::bf16) << p.nodes[k].name;
    const NodeMemory& c = bf16.memory.nodes[conv];
    EXPECT_FALSE(c.output_scratch) << p.nodes[conv].name;  // written as stored
    EXPECT_FALSE(c.output_gradient_cast) << p.nodes[conv].name;
    EXPECT_EQ(region_at(bf16.memory, bf16.memory.value_gradients[static_cast<size_t>(z)]).bytes,
              align_up(static_cast<size_t>(p.value(z).numel()) * 2, kAlignment));
    // The next conv, or (after the last block) the flatten's reader dense1, reads y as it is stored.
    const size_t next = chains < 5 ? k + 1 : index_of(p, "dense1");
    ASSERT_EQ(p.nodes[next].inputs[0], chains < 5 ? y : value_named(p, "flatten"));
    const NodeMemory& n = bf16.memory.nodes[next];
    EXPECT_EQ(n.reads[0].region, bf16.memory.values[static_cast<size_t>(y)].region);
    EXPECT_FALSE(n.gradient_scratch[0]);
    EXPECT_FALSE(n.accumulate[0]);  // cuDNN and cuBLASLt write dy of the chain first, beta 0
  }
  EXPECT_EQ(chains, 5u);
  EXPECT_EQ(half.size(), 17u);  // 5 blocks' z and y, the flatten; dense1, dense2, their activations and dropouts
  const double ratio = static_cast<double>(bf16.memory.arena_bytes) / static_cast<double>(fp32.memory.arena_bytes);
  std::printf("CosmoFlow 128^3 b4 arena: fp32 %.1f MiB, bf16 %.1f MiB (%.0f%%); %zu values in bf16\n",
              static_cast<double>(fp32.memory.arena_bytes) / 1048576.0, static_cast<double>(bf16.memory.arena_bytes) / 1048576.0,
              100.0 * ratio, half.size());
  EXPECT_LT(ratio, 0.75);
  expect_no_overlap(bf16.memory, bf16.schedule);
}
#endif

// Issue 33: leaky ReLU, scale, tanh and dropout take their values stored half (bodies templated on the
// stored type, x and y tied), so a chain of them between two convs is half end to end, with no cast;
// each writes its input's gradient first (no memset).
TEST(CudaPlanPrecision, ElementwiseChainBetweenConvsIsHalfAndWritesItsGradientsFirst) {
  Net net;
  const int32_t x = net.input("x", {2, 6, 6, 8});
  const int32_t c1 = net.op("conv", "c1", {x, net.param("w1", {3, 3, 8, 8})}, {2, 6, 6, 8}, {{"padding", {1, 1}}});
  const int32_t a = net.op("leaky_relu", "a", {c1}, {2, 6, 6, 8}, {{"alpha", 0.3}});
  const int32_t b = net.op("scale", "b", {a}, {2, 6, 6, 8}, {{"factor", 2.0}});
  const int32_t t = net.op("tanh", "t", {b}, {2, 6, 6, 8});
  const int32_t d = net.op("dropout", "d", {t}, {2, 6, 6, 8}, {{"rate", 0.25}});
  const int32_t c2 = net.op("conv", "c2", {d, net.param("w2", {3, 3, 8, 8})}, {2, 6, 6, 8}, {{"padding", {1, 1}}});
  const Program p = net.lower(c2);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    const DevicePlan plan = make_plan(p, {precision});
    const DType half = precision == Precision::bf16 ? DType::bf16 : DType::f16;
    for (const char* name : {"c1", "a", "b", "t", "d"}) {
      EXPECT_EQ(plan.precision.values[static_cast<size_t>(value_named(p, name))], half) << name_of(precision) << " " << name;
      const size_t k = index_of(p, name[0] == 'c' ? "a" : name);  // the element-wise node reading it
      const NodeMemory& m = plan.memory.nodes[k];
      EXPECT_EQ(region_at(plan.memory, m.reads[0]).kind == RegionKind::cast, false) << name;
      ASSERT_TRUE(m.gradients[0]) << name;
      EXPECT_FALSE(m.zeroed[0]) << name << ": its first writer overwrites";
      EXPECT_TRUE(first_writer_overwrites(p.nodes[k], plan.nodes[k], m, 0)) << name;
    }
  }
}

#ifdef MLPH_HAVE_DEEPCAM
// Issue 33 item 4: under bf16 every node of DeepCAM reads its data inputs and writes its output in the
// type they are stored in wherever both ends take bf16: a cast copy is made only of an fp32 value (the
// input's normalization, ...), never between two nodes that both take bf16; a value stored in bf16 has
// no output scratch at its writer and no cast of its gradient; our kernels' and cuBLASLt's data inputs
// and outputs share one type (their bodies' T, D's type).
TEST(CudaPlanPrecision, Bf16KeepsDeepCamsActivationsInBf16WithNoCastBetweenNodesThatTakeIt) {
  const Program p = deepcam_program(2);
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  const MemoryPlan& m = plan.memory;
  size_t half = 0, casts = 0, fp32_batch_norms = 0;
  for (DType t : plan.precision.values) half += t == DType::bf16;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& n = p.nodes[k];
    const NodeLowering& l = plan.nodes[k];
    if (l.engine == Engine::fused || l.engine == Engine::alias) continue;
    const int32_t written = l.fused_relu >= 0 ? p.nodes[static_cast<size_t>(l.fused_relu)].output : n.output;
    const DType out = plan.precision.values[static_cast<size_t>(written)];
    const NodePrecision& np = plan.precision.nodes[k];
    if (out == DType::bf16) {
      EXPECT_EQ(np.writes, DType::bf16) << n.name;
      EXPECT_FALSE(m.nodes[k].output_scratch) << n.name;
      EXPECT_FALSE(m.nodes[k].output_gradient_cast) << n.name;
    }
    for (size_t i = 0; i < m.nodes[k].reads.size(); ++i) {
      if (is_weight_slot(n, i)) continue;
      const DType stored = plan.precision.values[static_cast<size_t>(n.inputs[i])];
      if (region_at(m, m.nodes[k].reads[i]).kind == RegionKind::cast) {
        ++casts;
        EXPECT_EQ(stored, DType::f32) << n.name << " input " << i;  // only an fp32 value is cast
      } else {
        EXPECT_EQ(np.reads[i], stored) << n.name << " input " << i;
      }
      const bool data = n.kind != OpKind::batch_norm || i == 0;
      if (data && (l.engine == Engine::kernel || l.engine == Engine::depthwise) && stored == DType::bf16) {
        EXPECT_EQ(out, DType::bf16) << n.name << ": one type for its data";
      }
    }
    if (is_depthwise(n) || n.kind == OpKind::add) {
      EXPECT_EQ(out, DType::bf16) << n.name;  // every one of them in DeepCAM
    }
    // No batch norm in fp32: xception.conv5's (its relu read by the global pooling) and the four ASPP
    // branches' (concatenated with the image-pool broadcast) were, until the pooling, the channel
    // affine and the broadcast took the half type.
    fp32_batch_norms += n.kind == OpKind::batch_norm && out == DType::f32;
    if (n.kind == OpKind::global_avg_pool || n.kind == OpKind::broadcast || n.kind == OpKind::channel_affine ||
        n.kind == OpKind::concat || n.kind == OpKind::shift_scale) {
      EXPECT_EQ(out, DType::bf16) << n.name;  // the image-pool branch, the ASPP concat, the input's normalization
    }
  }
  EXPECT_EQ(fp32_batch_norms, 0u);
  std::printf("DeepCAM b2 bf16: %zu of %zu values stored in bf16, %zu cast reads (of fp32 values)\n", half,
              p.values.size(), casts);
  EXPECT_GE(half, 317u);
  EXPECT_EQ(casts, 0u);  // the last was decoder.conv3's output, fp32 for its bias, read by decoder.deconv2
  expect_no_overlap(m, plan.schedule);
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
