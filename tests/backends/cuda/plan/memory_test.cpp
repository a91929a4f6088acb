// The memory plan (backends/cuda/plan/memory.hpp): each region's life, fused writers, parameters,
// workspaces and scratch, and DeepCAM's zeroed gradients; no two regions live at one step share a byte.
#include <gtest/gtest.h>

#include <string>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

// x -> conv -> relu -> reshape -> dense -> mse: each region's life, step by step.
// Issue 33 item 5: a batch norm on our kernels (or an add) whose output only the next relu reads writes
// that relu's output in one pass and runs its backward from the relu's output gradient; the relu does
// nothing.
TEST(CudaPlanMemory, BatchNormOrAddFollowedByItsOnlyReaderReluIsFused) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  const auto bn = [&](int32_t in, const std::string& name) {
    return net.op("batch_norm", name,
                  {in, net.param(name + ".g", {3}), net.param(name + ".b", {3}), net.param(name + ".m", {3}, 0),
                   net.param(name + ".v", {3}, 0)},
                  {2, 4, 4, 3});
  };
  int32_t h = net.op("conv", "c", {x, net.param("w", {1, 1, 3, 3})}, {2, 4, 4, 3});
  h = net.op("relu", "r1", {bn(h, "bn1")}, {2, 4, 4, 3});
  const int32_t b2 = bn(h, "bn2");  // read by its relu and by the add: not fused
  h = net.op("add", "add", {net.op("relu", "r2", {b2}, {2, 4, 4, 3}), b2}, {2, 4, 4, 3});
  h = net.op("relu", "r3", {h}, {2, 4, 4, 3});  // add -> relu, its only reader: fused too
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  const size_t bn1 = index_of(p, "bn1"), r1 = index_of(p, "r1");
  EXPECT_EQ(plan.nodes[bn1].fused_relu, static_cast<int64_t>(r1));
  EXPECT_EQ(plan.nodes[r1].engine, Engine::fused);
  EXPECT_EQ(plan.nodes[index_of(p, "bn2")].fused_relu, -1);
  EXPECT_EQ(plan.nodes[index_of(p, "r2")].engine, Engine::kernel);
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(region_at(m, m.nodes[bn1].statistics).bytes, align_up(4 * 3 * sizeof(float), kAlignment));  // + scale, shift
  EXPECT_EQ(region_at(m, m.nodes[index_of(p, "bn2")].statistics).bytes, align_up(2 * 3 * sizeof(float), kAlignment));
  const Region& relu_y = region_at(m, m.values[static_cast<size_t>(value_named(p, "r1"))]);
  EXPECT_LE(relu_y.first, plan.schedule.forward[bn1]);  // written by the batch norm's step
  const Region& relu_dy = region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "r1"))]);
  EXPECT_GE(relu_dy.last, plan.schedule.backward[bn1]);  // read by the batch norm's backward
  EXPECT_EQ(m.nodes[r1].output_gradient.region, m.value_gradients[static_cast<size_t>(value_named(p, "r1"))].region);
  EXPECT_EQ(plan.schedule.backward[r1], -1);  // no step of its own: the relu's output dies with its last reader
  EXPECT_LE(relu_y.last, plan.schedule.backward[index_of(p, "bn2")]);  // bn2 keeps its x (r1) to its backward, no longer
  EXPECT_FALSE(m.values[static_cast<size_t>(value_named(p, "bn1"))]);  // the batch norm's own output: never stored
  EXPECT_FALSE(m.value_gradients[static_cast<size_t>(value_named(p, "bn1"))]);
  EXPECT_FALSE(m.nodes[bn1].output);
  const size_t add = index_of(p, "add"), r3 = index_of(p, "r3");
  EXPECT_EQ(plan.nodes[add].fused_relu, static_cast<int64_t>(r3));
  EXPECT_EQ(plan.nodes[r3].engine, Engine::fused);
  const Region& r3_y = region_at(m, m.values[static_cast<size_t>(value_named(p, "r3"))]);
  EXPECT_LE(r3_y.first, plan.schedule.forward[add]);
  EXPECT_GE(r3_y.last, plan.schedule.backward[add]);  // the mask of add's backward
  EXPECT_GE(region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "r3"))]).last, plan.schedule.backward[add]);
  expect_no_overlap(m, plan.schedule);
  Options cudnn;  // cuDNN's batch norm: nothing fused
  cudnn.own.batch_norm = false;
  EXPECT_EQ(make_plan(p, cudnn).nodes[r1].engine, Engine::kernel);
}

TEST(CudaPlanMemory, LivesFollowForwardReadsAndWhatBackwardKeeps) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 2});
  int32_t h = net.op("conv", "c", {x, net.param("w", {3, 3, 2, 3})}, {2, 4, 4, 3}, {{"padding", {1, 1}}});
  h = net.op("relu", "r", {h}, {2, 4, 4, 3});
  h = net.op("reshape", "f", {h}, {2, 48});
  h = net.op("dense", "d", {h, net.param("wd", {48, 2}), net.param("bd", {2})}, {2, 2});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  const Schedule& s = plan.schedule;
  ASSERT_EQ(s.steps.size(), 10u);  // forward c r f d loss, backward loss d r c (f is an alias), update
  EXPECT_EQ(s.backward[index_of(p, "f")], -1);
  EXPECT_EQ(s.backward[index_of(p, "c")], 8);
  const MemoryPlan& m = plan.memory;
  auto life = [&](const std::string& v, bool gradient = false) {
    const Region& r = region_at(m, (gradient ? m.value_gradients : m.values)[static_cast<size_t>(value_named(p, v))]);
    return std::pair{r.first, r.last};
  };
  EXPECT_EQ(life("x"), std::pair(0, 8));       // conv keeps its input for dw
  EXPECT_EQ(life("c"), std::pair(0, 1));       // relu keeps its output, not its input
  EXPECT_EQ(life("r"), std::pair(1, 7));       // dense (through the reshape) and relu keep it
  EXPECT_EQ(life("f"), life("r"));             // the alias is its input
  EXPECT_EQ(life("d"), std::pair(3, 5));       // mse keeps its inputs
  EXPECT_EQ(life("target"), std::pair(0, 5));
  EXPECT_EQ(life("loss"), std::pair(4, 9));    // read after the step
  EXPECT_EQ(life("loss", true), std::pair(5, 5));
  EXPECT_EQ(life("d", true), std::pair(5, 6));
  EXPECT_EQ(life("r", true), std::pair(6, 7));
  EXPECT_EQ(life("c", true), std::pair(7, 8));
  EXPECT_FALSE(m.value_gradients[static_cast<size_t>(x)]);  // data gets none
  const NodeMemory& conv = m.nodes[index_of(p, "c")];
  EXPECT_FALSE(conv.weight_gradient);  // fp32: cuDNN adds dw into the gradient buffer, in the masters' layout
  EXPECT_EQ(region_at(m, conv.reads[1]).kind, RegionKind::masters);  // the masters are cuDNN's filter (weights.hpp)
  EXPECT_EQ(region_at(m, conv.gradients[1]).kind, RegionKind::gradients);
  const NodeMemory& dense = m.nodes[index_of(p, "d")];
  EXPECT_EQ(region_at(m, dense.reads[1]).kind, RegionKind::masters);  // fp32 dense reads the master
  EXPECT_EQ(region_at(m, dense.gradients[1]).kind, RegionKind::gradients);
  EXPECT_EQ(dense.accumulate, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(region_at(m, m.values[static_cast<size_t>(value_named(p, "wd"))]).kind, RegionKind::masters);
  // The arena reuses: "c" (dead after step 1) and d "d" (from step 5) could share.
  size_t total = 0;
  for (const Region& r : m.regions) total += r.bytes;
  EXPECT_LT(m.arena_bytes, total);
  EXPECT_GE(m.arena_bytes, m.live_bytes_peak);
  expect_no_overlap(m, s);
}

TEST(CudaPlanMemory, TheFirstGradientWriterOverwritesAndLaterOnesAdd) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  const int32_t h = net.op("dense", "d", {x, net.param("w", {3, 3})}, {2, 3});
  const int32_t a = net.op("scale", "a", {h}, {2, 3}, {{"factor", 2.0}});
  const int32_t b = net.op("scale", "b", {h}, {2, 3}, {{"factor", 3.0}});
  const int32_t twice = net.op("add", "twice", {a, a}, {2, 3});
  const int32_t y = net.op("add", "sum", {twice, b}, {2, 3});
  const Program p = net.lower(y);
  const DevicePlan plan = make_plan(p, {});
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(m.nodes[index_of(p, "b")].accumulate, (std::vector<bool>{false}));  // b's backward runs before a's
  EXPECT_EQ(m.nodes[index_of(p, "a")].accumulate, (std::vector<bool>{true}));
  EXPECT_EQ(m.nodes[index_of(p, "twice")].accumulate, (std::vector<bool>{false, true}));
  EXPECT_EQ(m.address(m.nodes[index_of(p, "a")].gradients[0]), m.address(m.nodes[index_of(p, "b")].gradients[0]));
  expect_no_overlap(m, plan.schedule);
}

TEST(CudaPlanMemory, ParametersAreAlignedInGraphOrderWithGradientsAndSlotsAtTheSameOffsets) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  int32_t h = net.op("dense", "d1", {x, net.param("w1", {3, 5}), net.param("b1", {5})}, {2, 5});
  h = net.op("batch_norm", "bn",
             {h, net.param("g", {5}), net.param("be", {5}), net.param("m", {5}, 0), net.param("v", {5}, 0)}, {2, 5});
  const Program p = net.lower(h);
  const ParamLayout layout = layout_params(p);
  ASSERT_EQ(layout.params.size(), 6u);
  const size_t offsets[] = {0, 64, 128, 192, 0, 64};  // w1 15, b1 5, g 5, be 5 | m 5, v 5 (state)
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(layout.params[i].offset, offsets[i]) << i;
  EXPECT_EQ(layout.trainable_floats, 256u);
  EXPECT_EQ(layout.state_floats, 128u);
  const DevicePlan plan = make_plan(p, {});
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "g"))]).kind, RegionKind::gradients);
  EXPECT_EQ(m.value_gradients[static_cast<size_t>(value_named(p, "g"))].offset, 128 * sizeof(float));
  EXPECT_EQ(m.values[static_cast<size_t>(value_named(p, "v"))].offset, 64 * sizeof(float));
  EXPECT_EQ(region_at(m, m.values[static_cast<size_t>(value_named(p, "v"))]).kind, RegionKind::state);
  ASSERT_EQ(m.optimizer_slots.size(), 1u);  // sgd_keras: velocity
  EXPECT_EQ(m.regions[static_cast<size_t>(m.optimizer_slots[0])].bytes, 256 * sizeof(float));
  const NodeMemory& bn = m.nodes[index_of(p, "bn")];
  EXPECT_EQ(region_at(m, bn.statistics).bytes, kAlignment);
  EXPECT_EQ(region_at(m, bn.statistics).first, plan.schedule.forward[index_of(p, "bn")]);
  EXPECT_EQ(region_at(m, bn.statistics).last, plan.schedule.backward[index_of(p, "bn")]);
}

TEST(CudaPlanMemory, WorkspacesLiveOnlyAtTheirStep) {
  Net net;
  const int32_t x = net.input("x", {1, 8, 8, 2});
  int32_t h = net.op("conv", "c1", {x, net.param("w1", {3, 3, 2, 2})}, {1, 8, 8, 2}, {{"padding", {1, 1}}});
  h = net.op("conv", "c2", {h, net.param("w2", {3, 3, 2, 2})}, {1, 8, 8, 2}, {{"padding", {1, 1}}});
  const Program p = net.lower(h);
  const std::vector<NodeLowering> l = lower_nodes(p);
  const Schedule s = plan_schedule(p, l);
  const PrecisionPlan precision = plan_precision(p, Precision::fp32, l);
  Workspaces w;
  w.forward = {size_t{1} << 20, size_t{1} << 20, 0};
  w.backward = {size_t{3} << 20, size_t{2} << 20, 0};
  w.update = size_t{1} << 20;
  const MemoryPlan m = plan_memory(p, l, precision, s, w);
  const Region& f1 = region_at(m, m.nodes[0].forward_workspace);
  const Region& f2 = region_at(m, m.nodes[1].forward_workspace);
  EXPECT_EQ(f1.first, 0);
  EXPECT_EQ(f1.last, 0);
  EXPECT_EQ(f1.offset, f2.offset);  // never live together: the same bytes
  EXPECT_EQ(region_at(m, m.nodes[0].backward_workspace).bytes, size_t{3} << 20);
  EXPECT_FALSE(m.nodes[2].forward_workspace);
  const Region& u = region_at(m, m.update_workspace);
  EXPECT_EQ(std::pair(u.first, u.last), std::pair(s.update, s.update));
  EXPECT_EQ(u.offset, f1.offset);  // the update's scratch reuses what forward used
  EXPECT_FALSE(m.lamb_update);     // sgd_keras
  const MemoryPlan without = plan_memory(p, l, precision, s);
  EXPECT_GE(m.arena_bytes, size_t{3} << 20);
  EXPECT_LE(m.arena_bytes, without.arena_bytes + (size_t{3} << 20));  // one workspace at a time
  expect_no_overlap(m, s);
}

TEST(CudaPlanMemory, LambsUpdateIsScratchOfTheUpdateStepAsLargeAsTheParameters) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  const int32_t h = net.op("dense", "d", {x, net.param("w", {3, 70}), net.param("b", {70})}, {2, 70});
  const int32_t target = net.input("target", {2, 70});
  net.g.loss(net.op("mse", "loss", {h, target}, {}));
  net.g.inputs(net.inputs);
  net.g.optimizer("lamb", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.01}, {"max_grad_norm", 1.0}});
  const Program p = sdk::program::lower_graph(*net.g.graph(), implemented());
  const DevicePlan plan = make_plan(p, {});
  const Region& update = region_at(plan.memory, plan.memory.lamb_update);
  EXPECT_EQ(update.kind, RegionKind::optimizer_scratch);
  EXPECT_EQ(update.bytes, (256 + 128) * sizeof(float));  // w: 210 floats padded to 256, b: 70 padded to 128
  EXPECT_EQ(std::pair(update.first, update.last), std::pair(plan.schedule.update, plan.schedule.update));
  EXPECT_EQ(plan.memory.optimizer_slots.size(), 2u);  // m, v
  expect_no_overlap(plan.memory, plan.schedule);
}

#ifdef MLPH_HAVE_COSMOFLOW
// fp16 and bf16 keep CosmoFlow in half from conv1 to the output layer, with its pool chains or without
// (a max-pool on its own has a half body too): one cast, log1p's, and the output layer's dy cast down.
TEST(CudaPlanMemory, CosmoFlowInHalfPrecisionsHasOneCastAndOneScratch) {
  const Program p = mini_cosmoflow();
  for (const bool chained : {true, false})
    for (Precision precision : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
      Options options{precision};
      options.own.pool_chain = chained;
      options.fold_taps = chained;  // both ways of padding conv1, in one loop
      const DevicePlan each = make_plan(p, options);
      expect_no_overlap(each.memory, each.schedule);
      std::set<std::string> casts, scratch;
      for (const Region& r : each.memory.regions) {
        if (r.kind == RegionKind::cast) casts.insert(r.name);
        if (r.kind == RegionKind::output_scratch || r.kind == RegionKind::gradient_cast ||
            r.kind == RegionKind::gradient_scratch)
          scratch.insert(r.name);
      }
      if (compute_dtype(precision) == DType::f32) {
        EXPECT_TRUE(casts.empty()) << name_of(precision);
        EXPECT_TRUE(scratch.empty()) << name_of(precision);
        continue;
      }
      const std::string half = name_of(compute_dtype(precision));
      EXPECT_EQ(casts, std::set<std::string>{"log1p as " + half + ", channels padded"}) << half << chained;
      EXPECT_EQ(scratch, std::set<std::string>{"output d output as " + half}) << half << chained;  // tanh's x is fp32
      const NodeMemory& c1 = each.memory.nodes[index_of(p, "conv1")];
      // 4 channels padded to 8, or 3 taps x 4 folded and padded to 16 (small_channels=fold)
      const int64_t channels = options.fold_taps ? 16 : 8, taps = options.fold_taps ? 3 * 3 : 3 * 3 * 3;
      EXPECT_EQ(region_at(each.memory, c1.reads[0]).bytes, align_up(2 * 16 * 16 * 16 * channels * 2, kAlignment));
      EXPECT_EQ(c1.makes_cast, (std::vector<bool>{true, false, false}));
      EXPECT_EQ(region_at(each.memory, c1.reads[1]).bytes, align_up(taps * channels * 4 * 2, kAlignment));  // half weights, padded
    }
}

// A conv between fp32 values under fp16: a scaled trainable tensor (tied to its fp32 parameter) in, the
// loss's fp32 prediction out. It reads x through a cast copy made by its first reader and kept for
// backward; cuDNN writes y in fp16 into a scratch cast up at once; dy is cast down for backward; dx is
// written in fp16 into a scratch and cast over the fp32 gradient (the conv is its first writer: no memset).
TEST(CudaPlanMemory, CastsAndScratchOfMixedPrecisionLiveWhereTheyAreRead) {
  Net net;
  const int32_t x = net.op("scale", "x", {net.param("x0", {2, 8, 8, 8})}, {2, 8, 8, 8}, {{"factor", 2.0}});
  const int32_t y = net.op("conv", "conv", {x, net.param("w", {3, 3, 8, 8})}, {2, 8, 8, 8}, {{"padding", {1, 1}}});
  const Program p = net.lower(y);
  const DevicePlan plan = make_plan(p, {Precision::fp16});
  const MemoryPlan& m = plan.memory;
  const Schedule& s = plan.schedule;
  const size_t c = index_of(p, "conv");
  ASSERT_EQ(plan.nodes[c].engine, Engine::cudnn_conv);
  EXPECT_EQ(plan.precision.values[static_cast<size_t>(x)], DType::f32);
  EXPECT_EQ(plan.precision.values[static_cast<size_t>(y)], DType::f32);
  const NodeMemory& conv = m.nodes[c];
  const Region& cast = region_at(m, conv.reads[0]);
  EXPECT_EQ(cast.kind, RegionKind::cast);
  EXPECT_EQ(cast.bytes, align_up(2 * 8 * 8 * 8 * 2, kAlignment));
  EXPECT_EQ(std::pair(cast.first, cast.last), std::pair(s.forward[c], s.backward[c]));  // kept for backward
  const Region& out = region_at(m, conv.output_scratch);
  EXPECT_EQ(out.kind, RegionKind::output_scratch);
  EXPECT_EQ(out.bytes, align_up(2 * 8 * 8 * 8 * 2, kAlignment));
  EXPECT_EQ(std::pair(out.first, out.last), std::pair(s.forward[c], s.forward[c]));
  EXPECT_EQ(region_at(m, conv.output).kind, RegionKind::value);
  const Region& dy = region_at(m, conv.output_gradient_cast);
  EXPECT_EQ(std::pair(dy.first, dy.last), std::pair(s.backward[c], s.backward[c]));
  const Region& dx = region_at(m, conv.gradient_scratch[0]);
  EXPECT_EQ(dx.kind, RegionKind::gradient_scratch);
  EXPECT_EQ(std::pair(dx.first, dx.last), std::pair(s.backward[c], s.backward[c]));
  EXPECT_FALSE(conv.accumulate[0]);
  EXPECT_FALSE(conv.zeroed[0]);
  EXPECT_TRUE(first_writer_overwrites(p.nodes[c], plan.nodes[c], conv, 0));
  expect_no_overlap(m, s);
}

TEST(CudaPlanMemory, ExplicitPaddingHasItsBuffersAndKeepsThePaddedInput) {
  const Program p = mini_cosmoflow(2);  // Keras 'same' with kernel 2: padding 0 before, 1 after
  const DevicePlan plan = make_plan(p, {});
  const NodeLowering& l = plan.nodes[index_of(p, "conv1")];
  ASSERT_TRUE(l.conv->explicit_padding);
  EXPECT_EQ(l.conv->padded.dims, (std::array<int64_t, 5>{2, 4, 17, 17, 17}));
  const NodeMemory& conv1 = plan.memory.nodes[index_of(p, "conv1")];
  const Region& padded = region_at(plan.memory, conv1.padded);
  EXPECT_EQ(padded.bytes, align_up(2 * 17 * 17 * 17 * 4 * 4, kAlignment));
  EXPECT_EQ(padded.last, plan.schedule.backward[index_of(p, "conv1")]);
  EXPECT_TRUE(conv1.padded_gradient);
  const Region& input = region_at(plan.memory, conv1.reads[0]);
  EXPECT_EQ(input.last, plan.schedule.forward[index_of(p, "conv1")]);  // the padded copy is what is kept
  expect_no_overlap(plan.memory, plan.schedule);
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
// Issue 33 item 4: a gradient's first writer writes it instead of a memset and an add, for our kernels
// too (relu, add and add + relu, batch norm's data pass, depthwise's gather, the losses; cuDNN and
// cuBLASLt with beta 0 and the pool chain did already, cuDNN's dx in a half scratch cast over the
// gradient). What is still zeroed is printed by op.
TEST(CudaPlanMemory, DeepCamZeroesNoGradientWhoseFirstWriterOverwrites) {
  const Program p = deepcam_program(8);
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const DevicePlan plan = make_plan(p, {precision});
    size_t before = 0, before_bytes = 0, after = 0, after_bytes = 0;
    std::map<std::string, size_t> left;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const NodeLowering& l = plan.nodes[k];
      const NodeMemory& m = plan.memory.nodes[k];
      if (l.engine == Engine::fused || l.engine == Engine::alias) continue;
      ASSERT_EQ(m.zeroed.size(), m.gradients.size()) << p.nodes[k].name;
      for (size_t i = 0; i < m.gradients.size(); ++i) {
        if (!m.gradients[i] || m.accumulate[i] || region_at(plan.memory, m.gradients[i]).kind == RegionKind::gradients) continue;
        const auto v = static_cast<size_t>(p.nodes[k].inputs[i]);
        const size_t bytes = static_cast<size_t>(p.values[v].numel()) * bytes_of(plan.precision.values[v]);
        // before this change: only cuDNN's and cuBLASLt's dx (beta 0) and the pool chain's dz were written
        const bool scratch = i < m.gradient_scratch.size() && m.gradient_scratch[i];
        const bool library = i == 0 && !scratch &&
                             (((l.engine == Engine::cudnn_conv || l.engine == Engine::cudnn_conv_transpose) && l.conv &&
                               !l.conv->explicit_padding) ||
                              l.engine == Engine::cublaslt_dense || l.engine == Engine::pool_chain);
        if (!library) ++before, before_bytes += bytes;
        if (!m.zeroed[i]) continue;
        ++after, after_bytes += bytes;
        ++left[std::string(op_name(p.nodes[k].kind))];
        const OpKind kind = p.nodes[k].kind;
        const bool first_data = i == 0 && (kind == OpKind::batch_norm || kind == OpKind::global_avg_pool ||
                                           kind == OpKind::broadcast || kind == OpKind::channel_affine);
        const bool loss = kind == OpKind::softmax_cross_entropy || kind == OpKind::mse;
        const bool ours = (l.engine == Engine::kernel && (kind == OpKind::relu || kind == OpKind::add || first_data || loss)) ||
                          (l.engine == Engine::depthwise && i == 0) ||
                          ((l.engine == Engine::cudnn_conv || l.engine == Engine::cudnn_conv_transpose) && i == 0);
        EXPECT_FALSE(ours) << p.nodes[k].name << " input " << i << ": its first writer can overwrite";
      }
    }
    std::string by_op;
    for (const auto& [op, count] : left) by_op += " " + op + " " + std::to_string(count);
    std::printf("DeepCAM 768x1152 b8 %s: activation gradients zeroed before their first writer: %zu (%.1f MiB), were %zu "
                "(%.1f MiB); left:%s\n",
                name_of(precision), after, static_cast<double>(after_bytes) / 1048576.0, before,
                static_cast<double>(before_bytes) / 1048576.0, by_op.c_str());
    EXPECT_LT(after * 4, before) << "most memsets are gone";
    // None left: the loss writes dlogits first, and last_deconv's dx in bf16 (cuDNN's, in its half
    // scratch) is cast over its fp32 gradient, not added.
    EXPECT_TRUE(left.empty()) << by_op;
  }
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
