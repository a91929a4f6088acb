// DeepCAM model graph (REFERENCE §2.1, §2.10), its step-based schedule and logged hyperparameters.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "mlph/sdk/graph/tensor.hpp"
#include "model.hpp"
#include "schedule.hpp"
#include "settings.hpp"

using namespace mlph;
using namespace mlph::deepcam;

namespace {

DataSettings data_of(int height, int width) {
  DataSettings d;
  d.height = height, d.width = width;
  return d;
}
DataSettings mini_data() { return data_of(96, 144); }
DataSettings tiny_data() { return data_of(16, 16); }  // the smallest input: the weights do not depend on it

// One graph per shape for the whole suite: building initializes 56 M weights.
const MLPH_Graph& graph_at(int height, int width) {
  static std::map<std::pair<int, int>, sdk::GraphBuilder> built;
  auto [it, fresh] = built.try_emplace({height, width});
  if (fresh) build_model(it->second, data_of(height, width), Normalization::identity(16), OptimizerSettings{}, 2, 7);
  return *it->second.graph();
}

const MLPH_Node* node(const MLPH_Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.n_nodes; ++i)
    if (name == g.nodes[i].name) return &g.nodes[i];
  return nullptr;
}

const MLPH_Parameter* param(const MLPH_Graph& g, const std::string& value_name) {
  for (size_t i = 0; i < g.n_params; ++i)
    if (value_name == g.values[g.params[i].value].name) return &g.params[i];
  return nullptr;
}

std::vector<int64_t> shape_of(const MLPH_Graph& g, int32_t value) {
  const MLPH_Value& v = g.values[value];
  return {v.shape, v.shape + v.ndim};
}

// Sample mean and standard deviation of a parameter's initial values.
std::pair<double, double> moments(const MLPH_Graph& g, const MLPH_Parameter& p) {
  const auto n = static_cast<size_t>(sdk::numel(g.values[p.value]));
  double sum = 0, sum_sq = 0;
  for (size_t i = 0; i < n; ++i) sum += p.init[i], sum_sq += double(p.init[i]) * p.init[i];
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

double max_abs(const MLPH_Graph& g, const MLPH_Parameter& p) {
  double m = 0;
  for (int64_t i = 0; i < sdk::numel(g.values[p.value]); ++i) m = std::max(m, std::fabs(double(p.init[i])));
  return m;
}

}  // namespace

TEST(DeepCamModel, ReferenceParameterCountTensorsAndBatchNorms) {
  const MLPH_Graph& g = graph_at(96, 144);
  EXPECT_EQ(count_parameters(g), 56454720u);  // REFERENCE §2.10
  int trainable = 0, state = 0, batch_norms = 0;
  for (size_t i = 0; i < g.n_params; ++i) (g.params[i].flags & MLPH_PARAM_TRAINABLE ? trainable : state)++;
  for (size_t i = 0; i < g.n_nodes; ++i) batch_norms += std::string(g.nodes[i].op) == "batch_norm";
  EXPECT_EQ(trainable, 301);
  EXPECT_EQ(batch_norms, 76);
  EXPECT_EQ(state, 2 * 76 + 2);  // running mean and var of every BN, normalization shift and scale
}

TEST(DeepCamModel, MiniShapes) {
  const MLPH_Graph& g = graph_at(96, 144);
  EXPECT_EQ(shape_of(g, g.inputs[0]), (std::vector<int64_t>{2, 96, 144, 16}));
  EXPECT_EQ(g.values[g.inputs[1]].dtype, MLPH_DTYPE_I32);
  EXPECT_EQ(shape_of(g, g.inputs[1]), (std::vector<int64_t>{2, 96, 144}));
  EXPECT_EQ(shape_of(g, node(g, "xception.conv5.relu")->outputs[0]), (std::vector<int64_t>{2, 6, 9, 2048}));
  EXPECT_EQ(shape_of(g, node(g, "decoder.low_level.relu")->outputs[0]), (std::vector<int64_t>{2, 24, 36, 48}));
  EXPECT_EQ(shape_of(g, node(g, "decoder.last_deconv")->outputs[0]), (std::vector<int64_t>{2, 96, 144, 3}));
  EXPECT_EQ(shape_of(g, g.eval_outputs[0]), (std::vector<int64_t>{2}));
  EXPECT_EQ(g.values[g.loss].ndim, 0);
  // The pooled ASPP branch is broadcast to the feature map (the reference's hard-coded tile is 48x72).
  const MLPH_Node* broadcast = node(g, "global_pool.broadcast");
  ASSERT_NE(broadcast, nullptr);
  EXPECT_EQ(sdk::Attrs(*broadcast).ints("shape"), (std::vector<int64_t>{2, 6, 9, 256}));
}

TEST(DeepCamModel, FullSizeShapes) {
  const MLPH_Graph& g = graph_at(768, 1152);
  EXPECT_EQ(shape_of(g, node(g, "xception.block1.relu")->outputs[0]), (std::vector<int64_t>{2, 192, 288, 128}));
  EXPECT_EQ(shape_of(g, node(g, "xception.block3.relu")->outputs[0]), (std::vector<int64_t>{2, 48, 72, 728}));
  EXPECT_EQ(shape_of(g, node(g, "aspp.concat")->outputs[0]), (std::vector<int64_t>{2, 48, 72, 1280}));
  EXPECT_EQ(shape_of(g, node(g, "decoder.concat")->outputs[0]), (std::vector<int64_t>{2, 192, 288, 304}));
  EXPECT_EQ(shape_of(g, node(g, "decoder.deconv2")->outputs[0]), (std::vector<int64_t>{2, 384, 576, 256}));
  EXPECT_EQ(shape_of(g, node(g, "decoder.last_deconv")->outputs[0]), (std::vector<int64_t>{2, 768, 1152, 3}));
  EXPECT_EQ(sdk::Attrs(*node(g, "global_pool.broadcast")).ints("shape"), (std::vector<int64_t>{2, 48, 72, 256}));
  EXPECT_EQ(count_parameters(g), 56454720u);
}

TEST(DeepCamModel, ForwardMacsMatchTheReference) {
  // REFERENCE §2.10: 327.67 GMAC per sample at 768x1152, 5.12 GMAC at 96x144 (batch 2 here).
  EXPECT_NEAR(forward_macs(graph_at(768, 1152)) / 2 / 1e9, 327.67, 0.01);
  EXPECT_NEAR(forward_macs(graph_at(96, 144)) / 2 / 1e9, 5.12, 0.01);
}

TEST(DeepCamModel, LowLevelFeaturesAreTakenAfterTheInPlaceRelu) {
  const MLPH_Graph& g = graph_at(96, 144);
  const MLPH_Node* low = node(g, "decoder.low_level");
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(low->inputs[0], node(g, "xception.block1.relu")->outputs[0]);
  EXPECT_EQ(node(g, "xception.block2.skip")->inputs[0], node(g, "xception.block1.relu")->outputs[0]);
}

TEST(DeepCamModel, BlockStructureAndSeparableConvs) {
  const MLPH_Graph& g = graph_at(96, 144);
  // Depthwise: groups = channels, weight [3,3,1,C], padding = dilation.
  const MLPH_Node* depthwise = node(g, "xception.conv3.conv1");
  ASSERT_NE(depthwise, nullptr);
  EXPECT_EQ(shape_of(g, depthwise->inputs[1]), (std::vector<int64_t>{3, 3, 1, 1024}));
  EXPECT_EQ(sdk::Attrs(*depthwise).number("groups"), 1024);
  EXPECT_EQ(sdk::Attrs(*depthwise).ints("dilation"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(sdk::Attrs(*depthwise).ints("padding"), (std::vector<int64_t>{2, 2}));
  // Middle blocks: identity skip, three separable convs; the stride-2 conv of a block has no BN.
  EXPECT_EQ(node(g, "xception.block4.skip"), nullptr);
  EXPECT_NE(node(g, "xception.block4.rep2.bn"), nullptr);
  EXPECT_EQ(node(g, "xception.block4.rep2.relu"), nullptr);  // the last ReLU of rep is removed
  EXPECT_EQ(node(g, "xception.block1.down.bn"), nullptr);
  // block20 does not grow first: 728 -> 728, then 728 -> 1024; is_last adds a separable conv.
  EXPECT_EQ(shape_of(g, node(g, "xception.block20.rep0.pointwise")->inputs[1]), (std::vector<int64_t>{1, 1, 728, 728}));
  EXPECT_EQ(shape_of(g, node(g, "xception.block20.rep1.pointwise")->inputs[1]), (std::vector<int64_t>{1, 1, 728, 1024}));
  EXPECT_NE(node(g, "xception.block20.last.conv1"), nullptr);
  EXPECT_EQ(node(g, "xception.block20.relu"), nullptr);  // end_with_relu = False
  // ConvTranspose: [k,k,Co,Ci], k3 s2 p1 output_padding 1; the one biased conv is decoder.conv3.
  const MLPH_Node* up = node(g, "decoder.last_deconv");
  EXPECT_EQ(shape_of(g, up->inputs[1]), (std::vector<int64_t>{3, 3, 3, 256}));
  EXPECT_EQ(up->n_inputs, 2u);
  EXPECT_EQ(sdk::Attrs(*up).ints("output_padding"), (std::vector<int64_t>{1, 1}));
  int biased = 0;
  for (size_t i = 0; i < g.n_nodes; ++i)
    biased += (std::string(g.nodes[i].op) == "conv" || std::string(g.nodes[i].op) == "conv_transpose") &&
              g.nodes[i].n_inputs == 3;
  EXPECT_EQ(biased, 1);
  EXPECT_EQ(node(g, "decoder.conv3")->n_inputs, 3u);
}

TEST(DeepCamModel, NormalizationLossAndIou) {
  sdk::GraphBuilder b;
  Normalization norm = Normalization::identity(16);
  norm.shift[3] = -2.5f, norm.scale[3] = 0.25f;
  OptimizerSettings adam;
  adam.name = "Adam";
  build_model(b, mini_data(), norm, adam, 1, 3);
  const MLPH_Graph& g = *b.graph();
  EXPECT_STREQ(g.optimizer.name, "adam");
  ASSERT_STREQ(g.nodes[0].op, "shift_scale");
  EXPECT_EQ(g.nodes[0].inputs[0], g.inputs[0]);
  const MLPH_Parameter* shift = param(g, "normalize.shift");
  const MLPH_Parameter* scale = param(g, "normalize.scale");
  ASSERT_TRUE(shift && scale);
  EXPECT_EQ(shift->flags, 0u);
  EXPECT_EQ(shift->init[3], -2.5f);
  EXPECT_EQ(scale->init[3], 0.25f);
  EXPECT_EQ(scale->init[0], 1.0f);
  const MLPH_Node* loss = node(g, "loss");
  ASSERT_STREQ(loss->op, "softmax_cross_entropy");
  const auto weights = sdk::Attrs(*loss).numbers("class_weights");
  ASSERT_EQ(weights.size(), 3u);
  // REFERENCE §2.10: the float32 class weights.
  EXPECT_EQ(static_cast<float>(weights[0]), 1.00172996521f);
  EXPECT_EQ(static_cast<float>(weights[1]), 2.61461114883f);
  EXPECT_EQ(static_cast<float>(weights[2]), 1.71641969681f);
  EXPECT_STREQ(node(g, "iou")->op, "iou");
  EXPECT_EQ(g.eval_outputs[0], node(g, "iou")->outputs[0]);
}

TEST(DeepCamModel, MixedInitialization) {
  const MLPH_Graph& g = graph_at(96, 144);
  // kaiming_normal (fan_in, gain sqrt 2) on encoder convs, depthwise included, and ASPP.
  const auto [pw_mean, pw_std] = moments(g, *param(g, "xception.block10.rep1.pointwise.weight"));
  EXPECT_NEAR(pw_mean, 0.0, 0.002);
  EXPECT_NEAR(pw_std, std::sqrt(2.0 / 728), 0.01 * std::sqrt(2.0 / 728));
  const auto [dw_mean, dw_std] = moments(g, *param(g, "xception.conv5.conv1.weight"));  // 1536 x 9 values
  EXPECT_NEAR(dw_std, std::sqrt(2.0 / 9), 0.03 * std::sqrt(2.0 / 9));
  const auto [aspp_mean, aspp_std] = moments(g, *param(g, "aspp2.weight"));
  EXPECT_NEAR(aspp_std, std::sqrt(2.0 / (2048 * 9)), 0.01 * std::sqrt(2.0 / (2048 * 9)));
  // PyTorch defaults elsewhere: U(+-1/sqrt(fan_in)), ConvTranspose fan_in = out_channels * 9.
  const double conv_bound = 1.0 / std::sqrt(304.0 * 9), deconv_bound = 1.0 / std::sqrt(256.0 * 9);
  const MLPH_Parameter& conv1 = *param(g, "decoder.conv1.weight");
  EXPECT_LE(max_abs(g, conv1), conv_bound);
  EXPECT_GT(max_abs(g, conv1), 0.999 * conv_bound);
  EXPECT_NEAR(moments(g, conv1).second, conv_bound / std::sqrt(3.0), 0.01 * conv_bound);
  const MLPH_Parameter& deconv = *param(g, "decoder.deconv1a.weight");
  EXPECT_LE(max_abs(g, deconv), deconv_bound);
  EXPECT_GT(max_abs(g, deconv), 0.999 * deconv_bound);
  const MLPH_Parameter& last = *param(g, "decoder.last_deconv.weight");  // fan_in = 3 * 9
  EXPECT_LE(max_abs(g, last), 1.0 / std::sqrt(27.0));
  EXPECT_GT(max_abs(g, last), 0.99 / std::sqrt(27.0));
  EXPECT_LE(max_abs(g, *param(g, "decoder.conv3.bias")), 1.0 / 16);
  EXPECT_LE(max_abs(g, *param(g, "global_pool.conv.weight")), 1.0 / std::sqrt(2048.0));
  // BN 1/0 with running 0/1, trainable affine 1/0.
  const MLPH_Parameter& gamma = *param(g, "aspp1.bn.weight");
  EXPECT_EQ(gamma.flags, static_cast<uint32_t>(MLPH_PARAM_TRAINABLE));
  EXPECT_EQ(gamma.init[7], 1.0f);
  EXPECT_EQ(param(g, "aspp1.bn.bias")->init[7], 0.0f);
  EXPECT_EQ(param(g, "aspp1.bn.running_mean")->init[7], 0.0f);
  EXPECT_EQ(param(g, "aspp1.bn.running_var")->init[7], 1.0f);
  EXPECT_EQ(param(g, "aspp1.bn.running_var")->flags, 0u);
  EXPECT_EQ(param(g, "global_pool.affine.weights")->init[5], 1.0f);
  EXPECT_EQ(param(g, "global_pool.affine.bias")->init[5], 0.0f);
  // One param group: weight decay on every trainable parameter, BN and biases included.
  for (size_t i = 0; i < g.n_params; ++i)
    if (g.params[i].flags & MLPH_PARAM_TRAINABLE) {
      EXPECT_EQ(g.params[i].weight_decay, 1.0) << g.values[g.params[i].value].name;
    }
}

TEST(DeepCamModel, SameSeedSameWeightsOtherSeedOther) {
  const DataSettings tiny = tiny_data();
  const MLPH_Graph& seven = graph_at(96, 144);
  sdk::GraphBuilder again, other;
  build_model(again, tiny, Normalization::identity(16), OptimizerSettings{}, 1, 7);
  build_model(other, tiny, Normalization::identity(16), OptimizerSettings{}, 1, 8);
  for (const char* name : {"xception.conv1.weight", "decoder.conv3.bias", "aspp4.weight"}) {
    EXPECT_EQ(param(seven, name)->init[5], param(*again.graph(), name)->init[5]) << name;
    EXPECT_NE(param(seven, name)->init[5], param(*other.graph(), name)->init[5]) << name;
  }
}

TEST(DeepCamModel, OptimizerInTheGraph) {
  const MLPH_Graph& lamb = graph_at(96, 144);
  EXPECT_STREQ(lamb.optimizer.name, "lamb");
  const sdk::Attrs attrs(lamb.optimizer.attrs, lamb.optimizer.n_attrs, "lamb");
  EXPECT_EQ(attrs.number("beta1"), 0.9);
  EXPECT_EQ(attrs.number("beta2"), 0.999);
  EXPECT_EQ(attrs.number("eps"), 1e-6);
  EXPECT_EQ(attrs.number("weight_decay"), 0.01);
  EXPECT_EQ(attrs.number("max_grad_norm"), 1.0);
  sdk::GraphBuilder b;
  OptimizerSettings adamw;
  adamw.name = "AdamW";
  const DataSettings tiny = tiny_data();
  build_model(b, tiny, Normalization::identity(16), adamw, 1, 1);
  EXPECT_STREQ(b.graph()->optimizer.name, "adamw");
  EXPECT_FALSE(sdk::Attrs(b.graph()->optimizer.attrs, b.graph()->optimizer.n_attrs, "adamw").has("max_grad_norm"));
}

// Gradient accumulation: the reference divides the loss by the frequency, so the window's gradients
// sum to its mean; the graph's loss is then a scale node after the cross-entropy.
TEST(DeepCamModel, AccumulationDividesTheLoss) {
  const DataSettings tiny = tiny_data();
  TrainingSettings every4;
  every4.gradient_accumulation_frequency = 4;
  sdk::GraphBuilder b;
  build_model(b, tiny, Normalization::identity(16), OptimizerSettings{}, 1, 1, every4);
  const MLPH_Graph& g = *b.graph();
  const MLPH_Node* scale = node(g, "loss.per_window");
  ASSERT_NE(scale, nullptr);
  EXPECT_STREQ(scale->op, "scale");
  EXPECT_EQ(g.loss, scale->outputs[0]);
  EXPECT_EQ(scale->inputs[0], node(g, "loss")->outputs[0]);
  EXPECT_EQ(sdk::Attrs(scale->attrs, scale->n_attrs, "scale").number("factor"), 0.25);
  EXPECT_EQ(node(graph_at(96, 144), "loss.per_window"), nullptr) << "no accumulation: the cross-entropy is the loss";
  Settings s;
  s.training.gradient_accumulation_frequency = 4;
  const auto log = hyperparameter_log(s);
  std::map<std::string, std::string> by_key(log.begin(), log.end());
  EXPECT_EQ(by_key["gradient_accumulation_frequency"], "4");
}

// batchnorm_group_size > 1 puts every batch norm over that many ranks (the reference's GBN); 1 leaves
// the attribute out, so backends without group support still run the usual model.
TEST(DeepCamModel, BatchNormGroupsReachEveryBatchNorm) {
  const DataSettings tiny = tiny_data();
  TrainingSettings pairs;
  pairs.batchnorm_group_size = 2;
  sdk::GraphBuilder b;
  build_model(b, tiny, Normalization::identity(16), OptimizerSettings{}, 1, 1, pairs);
  int grouped = 0, plain = 0;
  for (size_t i = 0; i < b.graph()->n_nodes; ++i) {
    const MLPH_Node& n = b.graph()->nodes[i];
    if (std::string(n.op) != "batch_norm") continue;
    grouped += sdk::Attrs(n).number("group_size", 1) == 2;
  }
  const MLPH_Graph& usual = graph_at(96, 144);
  for (size_t i = 0; i < usual.n_nodes; ++i)
    plain += std::string(usual.nodes[i].op) == "batch_norm" && !sdk::Attrs(usual.nodes[i]).has("group_size");
  EXPECT_EQ(grouped, 76);
  EXPECT_EQ(plain, 76);
}

// ---- the schedule: values computed by hand from the reference's schedulers (REFERENCE §2.4,
// §2.10), cross-checked once against the reference classes run in PyTorch.

namespace {
ScheduleSettings schedule(double lr, const std::string& type, int64_t warmup, std::vector<int64_t> milestones = {},
                          int64_t t_max = 9000, double eta_min = 0.0) {
  ScheduleSettings s;
  s.start_lr = lr, s.type = type, s.warmup_steps = warmup, s.milestones = std::move(milestones), s.t_max = t_max;
  s.eta_min = eta_min, s.warmup_factor = 1.0, s.decay_rate = 0.1;
  return s;
}
}  // namespace

TEST(DeepCamSchedule, Gbs256MultistepWithoutWarmupDecaysOneStepEarly) {
  const ScheduleSettings s = schedule(0.002, "multistep", 0, {4096, 8192});
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.002);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4094), 0.002);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4095), 0.0002);  // milestone m hits optimizer step m-1
  EXPECT_DOUBLE_EQ(learning_rate(s, 8190), 0.0002);
  EXPECT_DOUBLE_EQ(learning_rate(s, 8191), 2e-05);
}

TEST(DeepCamSchedule, Gbs512MultistepWarmupPlateauAndShiftedMilestones) {
  const ScheduleSettings s = schedule(0.004, "multistep", 100, {2048, 4096});
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 4e-05);       // t = 1: 0.004 * 1/100
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 8e-05);
  EXPECT_DOUBLE_EQ(learning_rate(s, 98), 0.00396);    // t = 99
  EXPECT_DOUBLE_EQ(learning_rate(s, 99), 0.00396);    // plateau: lr(W-1) = 0.004 * 99/100, never 0.004
  EXPECT_DOUBLE_EQ(learning_rate(s, 2147), 0.00396);
  EXPECT_DOUBLE_EQ(learning_rate(s, 2148), 0.000396);  // first decayed step: m + W
  EXPECT_DOUBLE_EQ(learning_rate(s, 4195), 0.000396);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4196), 3.96e-05);
}

TEST(DeepCamSchedule, Gbs1024AndGbs2048) {
  const ScheduleSettings s1024 = schedule(0.004, "multistep", 200, {1100, 4096});
  EXPECT_DOUBLE_EQ(learning_rate(s1024, 0), 2e-05);
  EXPECT_DOUBLE_EQ(learning_rate(s1024, 199), 0.00398);
  EXPECT_DOUBLE_EQ(learning_rate(s1024, 1299), 0.00398);
  EXPECT_DOUBLE_EQ(learning_rate(s1024, 1300), 0.000398);
  EXPECT_DOUBLE_EQ(learning_rate(s1024, 4296), 3.98e-05);
  const ScheduleSettings s2048 = schedule(0.0055, "multistep", 400, {800});
  EXPECT_DOUBLE_EQ(learning_rate(s2048, 0), 0.0055 / 400);
  EXPECT_DOUBLE_EQ(learning_rate(s2048, 398), 0.00548625);  // 0.0055 * 399/400
  EXPECT_DOUBLE_EQ(learning_rate(s2048, 1199), 0.00548625);
  EXPECT_DOUBLE_EQ(learning_rate(s2048, 1200), 0.000548625);
}

TEST(DeepCamSchedule, Gbs128CosineWithoutWarmup) {
  const ScheduleSettings s = schedule(0.00155, "cosine_annealing", 0, {}, 9000);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.00155);  // built with last_epoch -1: step k uses t = k
  EXPECT_NEAR(learning_rate(s, 1), 0.0015499999527843003, 1e-17);
  EXPECT_NEAR(learning_rate(s, 3000), 0.00155 * 0.75, 1e-17);
  EXPECT_NEAR(learning_rate(s, 4500), 0.000775, 1e-17);
  EXPECT_NEAR(learning_rate(s, 9000), 0.0, 1e-17);
  EXPECT_NEAR(learning_rate(s, 9100), 4.7210906020078497e-07, 1e-15);
}

TEST(DeepCamSchedule, CosineWithWarmupIsAnchoredAtThePlateau) {
  const ScheduleSettings s = schedule(0.01, "cosine_annealing", 10, {}, 100, 0.001);
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.001);              // t = 1: 0.01 / 10
  EXPECT_DOUBLE_EQ(learning_rate(s, 8), 0.009000000000000001);  // t = 9
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 0.009000000000000001);  // e = 0: the plateau
  EXPECT_NEAR(learning_rate(s, 10), 0.008998026241462925, 1e-15);
  EXPECT_NEAR(learning_rate(s, 59), 0.005, 1e-15);           // e = 50: eta + (P - eta)/2
  EXPECT_NEAR(learning_rate(s, 109), 0.001, 1e-15);          // e = T
  // Past T the reference's recursion restarts from lr0, not the plateau.
  EXPECT_NEAR(learning_rate(s, 110), 0.0010022204783542079, 1e-15);
  EXPECT_NEAR(learning_rate(s, 120), 0.0012660365397059905, 1e-15);
}

TEST(DeepCamSchedule, OneWarmupStepKeepsTheStartLr) {
  const ScheduleSettings s = schedule(0.01, "multistep", 1, {5});
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(s, 6), 0.001);  // milestone 5 + W + 1 = t 7
}

TEST(DeepCamSchedule, WarmupFactorAndRepeatedMilestones) {
  ScheduleSettings s = schedule(0.01, "multistep", 4, {3, 3});
  s.warmup_factor = 2.0, s.decay_rate = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.0125);  // 0.01 * ((2-1) * 1/4 + 1)
  EXPECT_DOUBLE_EQ(learning_rate(s, 2), 0.0175);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.0175);  // plateau below 2 x 0.01
  EXPECT_DOUBLE_EQ(learning_rate(s, 6), 0.0175);
  EXPECT_DOUBLE_EQ(learning_rate(s, 7), 0.004375);  // a milestone listed twice decays twice
}

TEST(DeepCamSchedule, LogsTheReferenceKeys) {
  Settings s;
  auto log = hyperparameter_log(s);
  std::map<std::string, std::string> by_key(log.begin(), log.end());
  EXPECT_EQ(by_key["batchnorm_group_size"], "1");
  EXPECT_EQ(by_key["gradient_accumulation_frequency"], "1");
  EXPECT_EQ(by_key["opt_name"], "\"LAMB\"");
  EXPECT_EQ(by_key["opt_lr"], "0.0055");
  EXPECT_EQ(by_key["opt_betas"], "[0.9, 0.999]");
  EXPECT_EQ(by_key["opt_eps"], "1e-06");
  EXPECT_EQ(by_key["opt_weight_decay"], "0.01");
  EXPECT_EQ(by_key["opt_bias_correction"], "true");
  EXPECT_EQ(by_key["opt_grad_averaging"], "true");
  EXPECT_EQ(by_key["opt_max_grad_norm"], "1.0");
  EXPECT_EQ(by_key["scheduler_type"], "\"multistep\"");
  EXPECT_EQ(by_key["scheduler_milestones"], "[800]");
  EXPECT_EQ(by_key["scheduler_decay_rate"], "0.1");
  EXPECT_EQ(by_key["scheduler_lr_warmup_steps"], "400");
  EXPECT_EQ(by_key["scheduler_lr_warmup_factor"], "1.0");
  EXPECT_EQ(by_key.count("scheduler_t_max"), 0u);
  s.optimizer.name = "AdamW";
  s.schedule.type = "cosine_annealing";
  log = hyperparameter_log(s);
  by_key = {log.begin(), log.end()};
  EXPECT_EQ(by_key.count("opt_max_grad_norm"), 0u);
  EXPECT_EQ(by_key["opt_amsgrad"], "false");
  EXPECT_EQ(by_key["scheduler_t_max"], "9000");
  EXPECT_EQ(by_key["scheduler_eta_min"], "0.0");
  EXPECT_EQ(by_key.count("scheduler_milestones"), 0u);
}

TEST(DeepCamSettings, RejectsWhatItCannotRun) {
  auto options = [](std::map<std::string, std::string> overrides) {
    std::map<std::string, std::string> kv = {{"optimizer.betas", "[0.9, 0.999]"},
                                             {"optimizer.lr", "0.001"},
                                             {"optimizer.eps", "1e-6"},
                                             {"optimizer.weight_decay", "0.01"},
                                             {"optimizer.max_grad_norm", "1.0"},
                                             {"scheduler.milestones", "[800]"},
                                             {"scheduler.decay_rate", "0.1"},
                                             {"scheduler.eta_min", "0"},
                                             {"scheduler.lr_warmup_factor", "1.0"},
                                             {"train.target_iou", "0.82"},
                                             {"data.height", "96"},
                                             {"data.width", "144"}};
    for (auto& [k, v] : overrides) kv[k] = v;
    std::vector<MLPH_KeyValue> list;
    for (auto& [k, v] : kv) list.push_back({k.c_str(), v.c_str()});
    return parse_settings(sdk::Options(list.data(), list.size()));
  };
  EXPECT_EQ(options({}).data.height, 96);
  EXPECT_EQ(options({}).schedule.start_lr, 0.001);
  auto message = [&](std::map<std::string, std::string> overrides) {
    try {
      options(std::move(overrides));
    } catch (const sdk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"optimizer.name", "SGD"}}).find("'optimizer.name' = 'SGD'"), std::string::npos);
  EXPECT_NE(message({{"scheduler.type", "step"}}).find("multistep or cosine_annealing"), std::string::npos);
  EXPECT_NE(message({{"data.width", "150"}}).find("'data.width' = 150: must be a multiple of 16"), std::string::npos);
  EXPECT_EQ(options({{"train.gradient_accumulation_frequency", "3"}}).training.gradient_accumulation_frequency, 3u);
  EXPECT_EQ(options({{"train.batchnorm_group_size", "4"}, {"run.world_size", "8"}}).training.batchnorm_group_size, 4u);
  EXPECT_NE(message({{"train.batchnorm_group_size", "4"}, {"run.world_size", "6"}}).find("must divide the 6 ranks"),
            std::string::npos);
  // Issue 16, 1: 2^32 was cut to 0 by a 32-bit cast and divided by (SIGFPE); the settings take it as
  // uint32_t or refuse it, whatever the schema let through.
  EXPECT_EQ(message({{"train.batchnorm_group_size", "4294967296"}}),
            "'train.batchnorm_group_size' = \"4294967296\" is out of range: must be an integer from 1 to 4294967295");
  EXPECT_EQ(message({{"train.gradient_accumulation_frequency", "0"}}),
            "'train.gradient_accumulation_frequency' = \"0\" is out of range: must be an integer from 1 to 4294967295");
}
