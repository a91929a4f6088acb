// The cuda backend's host-side decisions, on the CPU (backends/cuda/settings.hpp, step_plan.hpp): how
// its options are read and refused, which device a rank takes, how gradients travel, the training
// step's task list and the CUDA-graph policy.
#include <gtest/gtest.h>

#include <functional>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/test/error_of.hpp"
#include "profile_report.hpp"
#include "settings.hpp"
#include "step_plan.hpp"

namespace mlph::cuda {
namespace {

sdk::Options options(std::vector<std::pair<std::string, std::string>> pairs) {
  sdk::KeyValues kv(pairs);
  return sdk::Options(kv.data(), kv.size());
}

using ::mlph::test::error_of;

MLPH_Topology rank(int32_t local_rank, int32_t local_size) {
  MLPH_Topology t = sdk::single_rank_topology();
  t.local_rank = local_rank, t.local_size = local_size;
  return t;
}

// ---- options ---------------------------------------------------------------------------------------

TEST(CudaSettings, DefaultsAreFp32NondeterministicGraphsOnAndAGibOfWorkspace) {
  const Settings s = read_settings(options({}));
  EXPECT_FALSE(s.device);
  EXPECT_EQ(s.compute.precision, sdk::Precision::fp32);
  EXPECT_FALSE(s.compute.deterministic);
  EXPECT_TRUE(s.graphs);
  EXPECT_EQ(s.workspace_bytes, size_t{1} << 30);
  EXPECT_EQ(s.loss_scale, 65536.0f);
  EXPECT_EQ(s.profile_dir, "");  // backend.profile off
  EXPECT_TRUE(s.own_batch_norm);  // issue 33: batch norm and depthwise convs on our kernels
  EXPECT_FALSE(s.batch_norm_one_pass);  // the reference's two passes for the statistics
  EXPECT_TRUE(s.own_depthwise);
  EXPECT_EQ(s.pointwise, plan::Pointwise::gemm);
  EXPECT_TRUE(s.pool_chain);  // CosmoFlow's bias + leaky ReLU + max-pool fused
  EXPECT_TRUE(s.fold_taps);   // small_channels=fold
}

TEST(CudaSettings, EveryOptionIsRead) {
  const Settings s = read_settings(options(
      {{"device", "3"}, {"precision", "bf16"}, {"deterministic", "1"}, {"workspace_mb", "256"}, {"graphs", "0"},
       {"loss_scale", "1024"}, {"profile", "/tmp/profile"}, {"batch_norm", "cudnn"}, {"depthwise", "cudnn"},
       {"pointwise", "cudnn"}, {"pool_chain", "off"}, {"small_channels", "pad"}}));
  EXPECT_EQ(s.device, 3);
  EXPECT_EQ(s.compute.precision, sdk::Precision::bf16);
  EXPECT_TRUE(s.compute.deterministic);
  EXPECT_EQ(s.workspace_bytes, size_t{256} << 20);
  EXPECT_FALSE(s.graphs);
  EXPECT_EQ(s.loss_scale, 1024.0f);
  EXPECT_EQ(s.profile_dir, "/tmp/profile");
  EXPECT_FALSE(s.own_batch_norm);
  EXPECT_FALSE(s.own_depthwise);
  EXPECT_TRUE(read_settings(options({{"batch_norm", "own"}, {"depthwise", "own"}})).own_batch_norm);
  EXPECT_FALSE(s.batch_norm_one_pass);
  const Settings one_pass = read_settings(options({{"batch_norm", "one_pass"}}));
  EXPECT_TRUE(one_pass.own_batch_norm);
  EXPECT_TRUE(one_pass.batch_norm_one_pass);
  EXPECT_FALSE(read_settings(options({{"depthwise", "cudnn"}})).own_depthwise);
  EXPECT_TRUE(read_settings(options({{"depthwise", "cudnn"}})).own_batch_norm);
  EXPECT_EQ(s.pointwise, plan::Pointwise::cudnn);
  EXPECT_EQ(read_settings(options({{"pointwise", "gemm"}})).pointwise, plan::Pointwise::gemm);
  for (const char* p : {"fp32", "tf32", "bf16", "fp16"})
    EXPECT_EQ(sdk::precision_name(read_settings(options({{"precision", p}})).compute.precision), std::string(p));
  EXPECT_TRUE(read_settings(options({{"graphs", "true"}})).graphs);
  EXPECT_FALSE(read_settings(options({{"graphs", "no"}})).graphs);  // every backend's spellings (sdk::bool_value)
  EXPECT_FALSE(s.pool_chain);
  EXPECT_TRUE(read_settings(options({{"pool_chain", "own"}})).pool_chain);
  EXPECT_FALSE(s.fold_taps);
  EXPECT_TRUE(read_settings(options({{"small_channels", "fold"}})).fold_taps);
}

TEST(CudaSettings, BadOrUnknownOptionsFailInOneLineNamingThem) {
  EXPECT_EQ(error_of([] { read_settings(options({{"threads", "4"}})); }), "cuda backend: unknown option 'threads'");
  EXPECT_EQ(error_of([] { read_settings(options({{"precision", "fp8"}})); }),
            "cuda backend: option 'precision' is 'fp8'; this backend computes in fp32, tf32, bf16, fp16");
  EXPECT_EQ(error_of([] { read_settings(options({{"graphs", "maybe"}})); }),
            "cuda backend: option 'graphs' is 'maybe'; expected 0, 1, false or true");
  EXPECT_NE(error_of([] { read_settings(options({{"device", "-1"}})); }).find("'device'"), std::string::npos);
  EXPECT_NE(error_of([] { read_settings(options({{"workspace_mb", "lots"}})); }).find("'workspace_mb'"), std::string::npos);
  EXPECT_EQ(error_of([] { read_settings(options({{"loss_scale", "1000"}})); }),
            "cuda backend: option 'loss_scale' is 1000; expected a power of two from 1 to 2^24");
  EXPECT_NE(error_of([] { read_settings(options({{"loss_scale", "0"}})); }).find("'loss_scale'"), std::string::npos);
  EXPECT_EQ(error_of([] { read_settings(options({{"batch_norm", "cuDNN"}})); }),
            "cuda backend: option 'batch_norm' is 'cuDNN'; expected own, one_pass or cudnn");
  EXPECT_EQ(error_of([] { read_settings(options({{"depthwise", "1"}})); }),
            "cuda backend: option 'depthwise' is '1'; expected own or cudnn");
  EXPECT_EQ(error_of([] { read_settings(options({{"pointwise", "cublas"}})); }),
            "cuda backend: option 'pointwise' is 'cublas'; expected gemm or cudnn");
  EXPECT_EQ(error_of([] { read_settings(options({{"pool_chain", "0"}})); }),
            "cuda backend: option 'pool_chain' is '0'; expected own or off");
  EXPECT_EQ(error_of([] { read_settings(options({{"small_channels", "8"}})); }),
            "cuda backend: option 'small_channels' is '8'; expected fold or pad");
}

// ---- the device of a rank --------------------------------------------------------------------------

TEST(CudaSettings, EachRankOfANodeTakesItsLocalRanksDeviceModuloTheDevices) {
  const Settings s = read_settings(options({}));
  EXPECT_EQ(select_device(s, rank(0, 4), 4), 0);
  EXPECT_EQ(select_device(s, rank(3, 4), 4), 3);
  EXPECT_EQ(select_device(s, rank(5, 8), 4), 1);  // more ranks than devices: they share, round robin
  EXPECT_EQ(select_device(s, rank(2, 4), 1), 0);  // CUDA_VISIBLE_DEVICES giving each rank its one device
}

TEST(CudaSettings, TheDeviceOptionWinsAndMustExist) {
  EXPECT_EQ(select_device(read_settings(options({{"device", "2"}})), rank(0, 1), 4), 2);
  EXPECT_EQ(error_of([] { select_device(read_settings(options({{"device", "1"}})), rank(0, 1), 1); }),
            "cuda backend: option 'device' is 1 but this process sees 1 CUDA device (0..0)");
}

// ---- how gradients travel --------------------------------------------------------------------------

TEST(CudaStepPlan, GradientsTravelOnTheDeviceOnlyWithDeviceCollectives) {
  EXPECT_EQ(comms_path(1, true), CommsPath::none);
  EXPECT_EQ(comms_path(1, false), CommsPath::none);
  EXPECT_EQ(comms_path(4, true), CommsPath::device);
  EXPECT_EQ(comms_path(4, false), CommsPath::host);  // comms/mpi: through pinned host memory
}

// ---- the task list ---------------------------------------------------------------------------------

using Kind = Task::Kind;

// x -> conv -> relu -> reshape -> dense -> mse, sgd_keras; buckets of `bucket_bytes`.
struct Mini {
  plan::Program program;
  plan::DevicePlan plan;
  explicit Mini(size_t bucket_bytes = plan::kBucketBytes) {
    sdk::GraphBuilder g;
    auto param = [&](const char* name, std::vector<int64_t> shape) {
      const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      g.parameter(v, std::vector<float>(static_cast<size_t>(n), 0.5f), 0.0, 1.0, MLPH_PARAM_TRAINABLE);
      return v;
    };
    const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 4, 4, 2});
    const int32_t c = g.value("c", MLPH_DTYPE_F32, {2, 4, 4, 3});
    g.node("conv", "c", {x, param("w", {3, 3, 2, 3})}, {c}, {{"padding", {1, 1}}});
    const int32_t r = g.value("r", MLPH_DTYPE_F32, {2, 4, 4, 3});
    g.node("relu", "r", {c}, {r});
    const int32_t f = g.value("f", MLPH_DTYPE_F32, {2, 48});
    g.node("reshape", "f", {r}, {f});
    const int32_t d = g.value("d", MLPH_DTYPE_F32, {2, 2});
    g.node("dense", "d", {f, param("wd", {48, 2}), param("bd", {2})}, {d});
    const int32_t t = g.value("target", MLPH_DTYPE_F32, {2, 2});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node("mse", "loss", {d, t}, {loss});
    g.loss(loss);
    g.inputs({x, t});
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
    program = sdk::program::lower_graph(*g.graph(), plan::implemented());
    plan = plan::make_plan(program, {sdk::Precision::fp32, false, plan::kDefaultWorkspaceCap, bucket_bytes});
  }
  std::string tasks(CommsPath path, bool update) const { return describe(train_tasks(plan, program, path, update), program); }
};

TEST(CudaStepPlan, OneRankRunsForwardSeedBackwardAndTheUpdateWithNoAliasWork) {
  const Mini m;
  EXPECT_EQ(m.tasks(CommsPath::none, true),
            "forward c, forward r, forward d, forward loss, seed, backward loss, backward d, backward r, backward c, update");
  EXPECT_EQ(m.tasks(CommsPath::none, false),  // an accumulation window's micro-batch: no update
            "forward c, forward r, forward d, forward loss, seed, backward loss, backward d, backward r, backward c");
}

TEST(CudaStepPlan, BucketsAreReducedInOrderAsSoonAsBackwardIsDoneWithThemThenJoined) {
  const Mini m(1);  // a byte per bucket: one parameter each, last layers first: bd, wd, w
  ASSERT_EQ(m.plan.buckets.size(), 3u);
  EXPECT_EQ(m.tasks(CommsPath::device, true),
            "forward c, forward r, forward d, forward loss, seed, backward loss, backward d, bucket 0, bucket 1, "
            "backward r, backward c, bucket 2, join, update");
  // No update, no reduction: the window's sum stays this rank's.
  EXPECT_EQ(m.tasks(CommsPath::device, false),
            "forward c, forward r, forward d, forward loss, seed, backward loss, backward d, backward r, backward c");
  // Host collectives: the whole buffer once backward is done, then the update.
  EXPECT_EQ(m.tasks(CommsPath::host, true),
            "forward c, forward r, forward d, forward loss, seed, backward loss, backward d, backward r, backward c, "
            "host allreduce, update");
}

TEST(CudaStepPlan, EveryBucketIsReducedOnceAfterItsLastWriterWhateverTheBucketSize) {
  for (size_t bytes : {size_t{1}, size_t{200}, size_t{1000}, plan::kBucketBytes}) {
    const Mini m(bytes);
    const std::vector<Task> tasks = train_tasks(m.plan, m.program, CommsPath::device, true);
    std::vector<int> seen;
    int last_backward_step = -1;
    for (const Task& t : tasks) {
      if (t.kind == Kind::backward) last_backward_step = m.plan.schedule.backward[static_cast<size_t>(t.index)];
      if (t.kind != Kind::reduce_bucket) continue;
      seen.push_back(t.index);
      EXPECT_GE(last_backward_step, m.plan.buckets[static_cast<size_t>(t.index)].after_step) << bytes;
    }
    ASSERT_EQ(seen.size(), m.plan.buckets.size()) << bytes;
    for (size_t b = 0; b < seen.size(); ++b) EXPECT_EQ(seen[b], static_cast<int>(b)) << bytes;
    EXPECT_EQ(tasks.back().kind, Kind::update);
    EXPECT_EQ(tasks[tasks.size() - 2].kind, Kind::join_buckets);
  }
}

// ---- CUDA graphs -----------------------------------------------------------------------------------

TEST(CudaGraphPolicy, EachKindOfStepWarmsUpThenIsCapturedOnceThenReplayed) {
  using Action = GraphPolicy::Action;
  GraphPolicy p(true, 2);
  std::vector<Action> updates;
  for (int i = 0; i < 5; ++i) {
    const Action a = p.next(true);
    updates.push_back(a);
    if (a == Action::eager) p.ran_eagerly(true);
    if (a == Action::capture) p.captured(true);
  }
  EXPECT_EQ(updates, (std::vector<Action>{Action::eager, Action::eager, Action::capture, Action::replay, Action::replay}));
  EXPECT_EQ(p.next(false), Action::eager);  // the other kind (accumulation's micro-batches) warms up on its own
  p.ran_eagerly(false);
  p.ran_eagerly(false);
  EXPECT_EQ(p.next(false), Action::capture);
}

TEST(CudaGraphPolicy, OffMeansEagerAndAFailedCaptureTurnsGraphsOffWithItsReason) {
  GraphPolicy off(false);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(off.next(true), GraphPolicy::Action::eager), off.ran_eagerly(true);
  GraphPolicy p(true, 0);
  EXPECT_EQ(p.next(true), GraphPolicy::Action::capture);
  p.capture_failed("cudaStreamEndCapture: operation not permitted when stream is capturing");
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.next(true), GraphPolicy::Action::eager);
  EXPECT_EQ(p.why_disabled(), "cudaStreamEndCapture: operation not permitted when stream is capturing");
}

// ---- backend.profile's reports (profile_report.hpp) ---------------------------------------------------

TEST(CudaProfileReport, FindJsonHasEveryRowWithTheRulesVerdictAndTheChoice) {
  const std::vector<FindRow> rows = {
      {"conv1", "forward", 1, true, 0.5f, 1024, "tensor", true, true, true},
      {"conv1", "forward", 6, true, 0.25f, size_t{1} << 31, "tensor", false, false, false},
      {"conv1", "backward_data", 7, false, 0, 0, "fma", true, false, false}};
  EXPECT_EQ(find_json(rows),
            "{\"rows\": [\n"
            " {\"node\": \"conv1\", \"pass\": \"forward\", \"algo\": 1, \"status\": \"success\", \"ms\": 0.5, "
            "\"workspace\": 1024, \"math\": \"tensor\", \"deterministic\": true, \"allowed\": true, \"chosen\": true},\n"
            " {\"node\": \"conv1\", \"pass\": \"forward\", \"algo\": 6, \"status\": \"success\", \"ms\": 0.25, "
            "\"workspace\": 2147483648, \"math\": \"tensor\", \"deterministic\": false, \"allowed\": false, "
            "\"chosen\": false},\n"
            " {\"node\": \"conv1\", \"pass\": \"backward_data\", \"algo\": 7, \"status\": \"failed\", \"ms\": null, "
            "\"workspace\": 0, \"math\": \"fma\", \"deterministic\": true, \"allowed\": false, \"chosen\": false}]}\n");
}

TEST(CudaProfileReport, ACallsShareIsOfTheTensorPeakWithFlopsElseOfTheCopyCeilingWithBytes) {
  const Ceilings ceilings{3000.0, 1000.0};  // GB/s, TFLOP/s
  CallTime conv{"conv1", "conv", "forward", "cudnnConvolutionForward", 1, 2.0, 0, 1e12};
  EXPECT_DOUBLE_EQ(achieved_share(conv, ceilings), 1e12 / 2e-3 / 1e15);  // 0.5
  CallTime copy{"x", "batch_norm", "forward", "convert", 1, 1.0, 1.5e9, 0};
  EXPECT_DOUBLE_EQ(achieved_share(copy, ceilings), 1.5e9 / 1e-3 / 3e12);  // 0.5
  CallTime both = conv;  // a conv's node row with its bytes too: FLOPs decide
  both.bytes = 6e9;
  EXPECT_DOUBLE_EQ(achieved_share(both, ceilings), 0.5);
  EXPECT_LT(achieved_share({"x", "relu", "forward", "node", 1, 1.0, 0, 0}, ceilings), 0);  // nothing known
  EXPECT_LT(achieved_share(conv, Ceilings{}), 0);                                          // no ceiling measured
  EXPECT_LT(achieved_share({"x", "conv", "forward", "c", 1, 0.0, 0, 1e12}, ceilings), 0);  // not timed
}

TEST(CudaProfileReport, NodesJsonHasTheStepsAndEveryCallWithItsShare) {
  const std::string json = nodes_json({{"conv1", "conv", "forward", "cudnnConvolutionForward", 2, 2.0, 0, 1e12},
                                       {"conv1", "conv", "forward", "node", 2, 2.5, 0, 0}},
                                      Ceilings{3000.0, 1000.0}, {10.0, 4.0}, {3.0});
  EXPECT_EQ(json,
            "{\"ceilings\": {\"copy_gb_s\": 3000.0, \"tensor_tflop_s\": 1000.0}, \"eager_steps_ms\": [10.0, 4.0], "
            "\"graph_steps_ms\": [3.0],\n \"eager_step_ms\": 4.0, \"graph_step_ms\": 3.0,\n \"calls\": [\n"
            " {\"node\": \"conv1\", \"kind\": \"conv\", \"pass\": \"forward\", \"call\": \"cudnnConvolutionForward\", "
            "\"step\": 2, \"ms\": 2.0, \"bytes\": null, \"flops\": 1000000000000.0, \"share\": 0.5},\n"
            " {\"node\": \"conv1\", \"kind\": \"conv\", \"pass\": \"forward\", \"call\": \"node\", \"step\": 2, "
            "\"ms\": 2.5, \"bytes\": null, \"flops\": null, \"share\": null}]}\n");
  EXPECT_NE(nodes_json({}, {}, {}, {}).find("\"eager_step_ms\": null, \"graph_step_ms\": null"), std::string::npos);
  // A name from the graph is quoted whatever it holds.
  EXPECT_NE(nodes_json({{"a\"b\n", "conv", "forward", "node", 1, 1.0, 0, 0}}, {}, {}, {}).find("\"a\\\"b\\n\""),
            std::string::npos);
}

TEST(CudaProfileReport, TheTensorPeakIsKnownByTheDevicesName) {
  EXPECT_EQ(tensor_peak_tflop_s("NVIDIA H100 80GB HBM3"), 989.4);
  EXPECT_EQ(tensor_peak_tflop_s("NVIDIA H100 PCIe"), 756.0);
  EXPECT_EQ(tensor_peak_tflop_s("NVIDIA H200"), 989.4);
  EXPECT_EQ(tensor_peak_tflop_s("Some GPU"), 0.0);
}

}  // namespace
}  // namespace mlph::cuda
