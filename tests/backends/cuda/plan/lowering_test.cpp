// The lowering (backends/cuda/plan/lowering.hpp) on the CPU: each op to its engine, cuDNN's tensor
// layout, the failures that name the node, and the real CosmoFlow and DeepCAM graphs' pool chains and
// own kernels. The descriptors' numbers against the ops' definitions: descriptors_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

TEST(CudaPlanLowering, ChannelsLastTensorsHaveCudnnDimsAndNdhwcStrides) {
  const TensorDesc t4 = channels_last({2, 3, 4, 5});  // [N, H, W, C]
  EXPECT_EQ(t4.rank, 4);
  EXPECT_EQ((std::array<int64_t, 4>{t4.dims[0], t4.dims[1], t4.dims[2], t4.dims[3]}), (std::array<int64_t, 4>{2, 5, 3, 4}));
  EXPECT_EQ((std::array<int64_t, 4>{t4.strides[0], t4.strides[1], t4.strides[2], t4.strides[3]}),
            (std::array<int64_t, 4>{60, 1, 20, 5}));
  const TensorDesc t5 = channels_last({2, 3, 4, 5, 6});  // [N, D, H, W, C]
  EXPECT_EQ(t5.dims, (std::array<int64_t, 5>{2, 6, 3, 4, 5}));
  EXPECT_EQ(t5.strides, (std::array<int64_t, 5>{360, 1, 120, 30, 6}));
}

TEST(CudaPlanLowering, EachOpGoesToItsEngine) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  int32_t h = net.op("conv", "conv", {x, net.param("w", {3, 3, 3, 4})}, {2, 4, 4, 4}, {{"padding", {1, 1}}});
  const auto bn = [&](int32_t in, const std::string& name, double group) {
    return net.op("batch_norm", name,
                  {in, net.param(name + ".g", {4}), net.param(name + ".b", {4}), net.param(name + ".m", {4}, 0),
                   net.param(name + ".v", {4}, 0)},
                  {2, 4, 4, 4}, {{"eps", 1e-3}, {"momentum", 0.01}, {"group_size", group}});
  };
  h = bn(h, "bn", 1);
  h = bn(h, "syncbn", 2);
  h = net.op("conv", "depthwise", {h, net.param("wdw", {3, 3, 1, 4})}, {2, 4, 4, 4},
             {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 4.0}});
  h = net.op("conv", "pointwise", {h, net.param("wpw", {1, 1, 4, 4})}, {2, 4, 4, 4});
  h = net.op("max_pool", "pool", {h}, {2, 2, 2, 4}, {{"kernel", {2, 2}}});
  h = net.op("conv_transpose", "up", {h, net.param("wt", {2, 2, 4, 4})}, {2, 4, 4, 4}, {{"stride", {2, 2}}});
  h = net.op("reshape", "flat", {h}, {2, 64});
  h = net.op("dense", "dense", {h, net.param("wd", {64, 2}), net.param("bd", {2})}, {2, 2});
  const Program p = net.lower(h);
  const std::vector<NodeLowering> own = lower_nodes(p);  // by default batch norm and depthwise on our kernels
  EXPECT_EQ(own[index_of(p, "bn")].engine, Engine::kernel);
  EXPECT_EQ(own[index_of(p, "depthwise")].engine, Engine::depthwise);
  EXPECT_FALSE(own[index_of(p, "depthwise")].conv);  // no cuDNN descriptors, no weight copy
  EXPECT_EQ(own[index_of(p, "pointwise")].engine, Engine::cublaslt_dense);  // and 1x1 convs on cuBLASLt
  // The options are independent: each moves its own ops only.
  const std::vector<NodeLowering> pointwise_on_cudnn = lower_nodes(p, {.pointwise = Pointwise::cudnn});
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "pointwise")].engine, Engine::cudnn_conv);
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "depthwise")].engine, Engine::depthwise);
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "bn")].engine, Engine::kernel);
  const std::vector<NodeLowering> own_on_cudnn = lower_nodes(p, {.own = {false, false}});
  EXPECT_EQ(own_on_cudnn[index_of(p, "pointwise")].engine, Engine::cublaslt_dense);
  EXPECT_EQ(own_on_cudnn[index_of(p, "depthwise")].engine, Engine::cudnn_conv);
  const std::vector<NodeLowering> l =
      lower_nodes(p, {.pointwise = Pointwise::cudnn, .own = {false, false}});  // backend.*=cudnn
  auto engine = [&](const std::string& name) { return l[index_of(p, name)].engine; };
  EXPECT_EQ(engine("conv"), Engine::cudnn_conv);
  EXPECT_EQ(engine("bn"), Engine::cudnn_batch_norm);
  EXPECT_EQ(engine("syncbn"), Engine::kernel);  // SyncBatchNorm has no cuDNN path
  EXPECT_EQ(engine("depthwise"), Engine::cudnn_conv);
  EXPECT_EQ(engine("pointwise"), Engine::cudnn_conv);
  EXPECT_EQ(engine("pool"), Engine::kernel);
  EXPECT_EQ(engine("up"), Engine::cudnn_conv_transpose);
  EXPECT_EQ(engine("flat"), Engine::alias);
  EXPECT_EQ(engine("dense"), Engine::cublaslt_dense);
  EXPECT_EQ(engine("loss"), Engine::kernel);
  const BatchNormPlan& b = *l[index_of(p, "bn")].batch_norm;
  EXPECT_EQ(b.channels, 4);
  EXPECT_DOUBLE_EQ(b.eps, 1e-3);
  EXPECT_DOUBLE_EQ(b.momentum, 0.01);  // cuDNN's exponentialAverageFactor
  EXPECT_EQ(b.x.dims, (std::array<int64_t, 5>{2, 4, 16, 1, 0}));  // [N, C, P, 1]
  EXPECT_EQ(b.x.strides[1], 1);
  EXPECT_EQ(b.x.strides[2], 4);
  EXPECT_EQ(b.x.strides[0], 64);
}

TEST(CudaPlanLowering, SpatialOpsAndComputedWeightsFailNamingTheNode) {
  Net net;
  const int32_t x = net.input("x", {1, 4, 4, 2});
  const int32_t h = net.op("halo_exchange", "halo", {x}, {1, 6, 6, 2}, {{"grid", {1, 1}}, {"halo", {1, 1}}});
  const int32_t y = net.op("conv", "conv3", {h, net.param("w", {3, 3, 2, 2})}, {1, 4, 4, 2});
  const std::string refused = error_of([&] { net.lower(y); });
  EXPECT_NE(refused.find("node 'halo' (halo_exchange)"), std::string::npos) << refused;

  Net all;  // lowered for a backend with every op: the plan still refuses, in one line
  const int32_t x2 = all.input("x", {1, 4, 4, 2});
  const int32_t h2 = all.op("halo_exchange", "halo", {x2}, {1, 6, 6, 2}, {{"grid", {1, 1}}, {"halo", {1, 1}}});
  const int32_t y2 = all.op("conv", "conv3", {h2, all.param("w", {3, 3, 2, 2})}, {1, 4, 4, 2});
  const Program p = all.lower(y2, sdk::Implements::everything());
  EXPECT_EQ(error_of([&] { lower_nodes(p); }),
            "cuda backend: node 'halo' (halo_exchange): spatial parallelism is not implemented by the cuda backend yet");

  Net computed;  // weights that a node computes
  const int32_t x3 = computed.input("x", {2, 3});
  const int32_t w = computed.op("scale", "w2", {computed.param("w", {3, 2})}, {3, 2}, {{"factor", 2.0}});
  const Program q = computed.lower(computed.op("dense", "dense1", {x3, w}, {2, 2}));
  const std::string message = error_of([&] { lower_nodes(q); });
  EXPECT_EQ(message.rfind("cuda backend: node 'dense1' (dense): its weights 'w2' are computed", 0), 0u) << message;
}

TEST(CudaPlanLowering, TensorsPastCudnns32BitIndexingFailNamingTheNode) {
  // A 1x1 conv from [4, 16384, 16384, 1] (2^30 elements) to 2 channels: 2^31 output elements, one
  // past int. Built by hand: a graph would hold gigabytes of nothing.
  Program p;
  p.values.resize(3);
  p.values[0].shape = {4, 16384, 16384, 1};
  Node node;
  node.kind = OpKind::conv, node.name = "wide", node.inputs = {0, 1}, node.output = 2;
  node.window.batch = 4;
  node.window.in[1] = node.window.in[2] = node.window.out[1] = node.window.out[2] = 16384;
  node.window.in_channels = 1, node.window.out_channels = 2;
  EXPECT_EQ(error_of([&] { plan_conv(p, node); }),
            "cuda backend: node 'wide' (conv): its output has 2147483648 elements, more than cuDNN indexes "
            "(2^31 - 1): use a smaller batch");
  node.window.out_channels = 1;
  EXPECT_EQ(error_of([&] { plan_conv(p, node); }), "");
}

#ifdef MLPH_HAVE_COSMOFLOW
// Issue 33 item 5: each of CosmoFlow's conv -> leaky_relu -> max_pool blocks is one pool chain by
// default: the max_pool reads the conv's output (kept to its backward) and writes the conv's output
// gradient first; the leaky ReLU has no step, no value and no gradient; a byte of winner per pooled
// element lives from the chain's forward to its backward; the conv leaves its bias to the chain.
// backend.pool_chain=off: three nodes as before.
TEST(CudaPlanLowering, CosmoFlowsFiveConvLeakyReluPoolBlocksArePoolChainsByDefault) {
  const Program p = cosmoflow_program(2);
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const DevicePlan plan = make_plan(p, {precision});
    const MemoryPlan& m = plan.memory;
    size_t chains = 0;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const Node& n = p.nodes[k];
      if (n.kind == OpKind::leaky_relu && p.nodes[k - 1].kind == OpKind::conv && plan.nodes[k].engine == Engine::kernel)
        ADD_FAILURE() << n.name << " unfused";  // (the dense layers' leaky ReLUs stay nodes)
      if (n.kind != OpKind::max_pool) continue;
      ASSERT_EQ(plan.nodes[k].engine, Engine::pool_chain) << n.name;
      ++chains;
      const auto conv = static_cast<size_t>(plan.nodes[k].chain_conv);
      ASSERT_EQ(conv + 2, k) << n.name;
      EXPECT_EQ(p.nodes[conv].kind, OpKind::conv);
      EXPECT_EQ(plan.nodes[conv].engine, Engine::cudnn_conv);
      EXPECT_EQ(plan.nodes[conv].bias_in_chain, p.nodes[conv].has_bias());
      EXPECT_EQ(plan.nodes[conv + 1].engine, Engine::fused);
      EXPECT_EQ(plan.nodes[conv + 1].fused_into, static_cast<int64_t>(k));
      EXPECT_EQ(plan.schedule.backward[conv + 1], -1);  // no step of its own
      const int32_t z = p.nodes[conv].output, act = p.nodes[conv + 1].output;
      EXPECT_FALSE(m.values[static_cast<size_t>(act)]) << n.name;  // never stored
      EXPECT_FALSE(m.value_gradients[static_cast<size_t>(act)]) << n.name;
      const NodeMemory& chain = m.nodes[k];
      EXPECT_EQ(chain.reads[0].region, m.values[static_cast<size_t>(z)].region);
      EXPECT_GE(region_at(m, chain.reads[0]).last, plan.schedule.backward[k]);  // z kept to the chain's backward
      EXPECT_EQ(chain.gradients[0].region, m.value_gradients[static_cast<size_t>(z)].region);
      EXPECT_FALSE(chain.accumulate[0]);  // written first: no memset, no add
      const Region& winners = region_at(m, chain.winners);
      EXPECT_EQ(winners.kind, RegionKind::winners);
      EXPECT_EQ(winners.bytes, align_up(static_cast<size_t>(p.value(n.output).numel()), kAlignment));
      EXPECT_EQ(std::pair(winners.first, winners.last), std::pair(plan.schedule.forward[k], plan.schedule.backward[k]));
      EXPECT_EQ(region_at(m, m.value_gradients[static_cast<size_t>(z)]).first, plan.schedule.backward[k]);
    }
    EXPECT_EQ(chains, 5u);
    expect_no_overlap(m, plan.schedule);
    Options off{precision};
    off.own.pool_chain = false;
    const DevicePlan three = make_plan(p, off);
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      EXPECT_NE(three.nodes[k].engine, Engine::pool_chain);
      EXPECT_NE(three.nodes[k].engine, Engine::fused);
      EXPECT_FALSE(three.nodes[k].bias_in_chain);
    }
    EXPECT_LT(m.arena_bytes, three.memory.arena_bytes);  // the activation and its gradient are gone
    std::printf("CosmoFlow 128^3 b2 %s: %zu pool chains; arena %.1f MiB (pool_chain=off: %.1f MiB)\n", name_of(precision),
                chains, static_cast<double>(m.arena_bytes) / 1048576.0, static_cast<double>(three.memory.arena_bytes) / 1048576.0);
  }
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
// Issue 33: by default no node of DeepCAM runs on cuDNN's batch norm or cuDNN's depthwise conv; the
// depthwise convs read the fp32 masters as the graph keeps them and their activations as stored (bf16
// under bf16: item 4), and write their weight gradient straight into the gradient buffer.
// backend.*=cudnn brings cuDNN back.
TEST(CudaPlanLowering, DeepCamRunsNoBatchNormAndNoDepthwiseConvOnCudnnByDefault) {
  const Program p = deepcam_program(1);
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  size_t batch_norms = 0, depthwise = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& n = p.nodes[k];
    EXPECT_NE(plan.nodes[k].engine, Engine::cudnn_batch_norm) << n.name;
    batch_norms += n.kind == OpKind::batch_norm;
    if (!is_depthwise(n)) continue;
    ++depthwise;
    EXPECT_EQ(plan.nodes[k].engine, Engine::depthwise) << n.name;
    EXPECT_EQ(plan.precision.nodes[k].reads[1], DType::f32) << n.name;
    EXPECT_EQ(plan.precision.nodes[k].reads[0], DType::bf16) << n.name;
    EXPECT_FALSE(plan.memory.weights[static_cast<size_t>(n.inputs[1])]) << n.name;
    EXPECT_FALSE(plan.memory.nodes[k].weight_gradient) << n.name;
  }
  EXPECT_GT(batch_norms, 50u);
  EXPECT_GT(depthwise, 50u);
  size_t into_batch_norm = 0, into_add = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (plan.nodes[k].fused_relu < 0) continue;
    EXPECT_EQ(plan.nodes[static_cast<size_t>(plan.nodes[k].fused_relu)].engine, Engine::fused);
    (p.nodes[k].kind == OpKind::add ? into_add : into_batch_norm) += 1;
  }
  EXPECT_GT(into_batch_norm, 40u);
  EXPECT_GT(into_add, 10u);  // the Xception blocks that end with a relu
  std::printf("DeepCAM: %zu batch norms, %zu depthwise convs on our kernels; relus fused into %zu batch norms, %zu adds\n",
              batch_norms, depthwise, into_batch_norm, into_add);
  Options cudnn{Precision::bf16};
  cudnn.own = {false, false};
  const DevicePlan library = make_plan(p, cudnn);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (p.nodes[k].kind == OpKind::batch_norm) {
      EXPECT_EQ(library.nodes[k].engine, Engine::cudnn_batch_norm);
    }
    if (is_depthwise(p.nodes[k])) {
      EXPECT_EQ(library.nodes[k].engine, Engine::cudnn_conv);
    }
  }
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
