#include <gtest/gtest.h>

#include <cmath>

#include "model.hpp"
#include "schedule.hpp"
#include "settings.hpp"

using namespace mlph;
using namespace mlph::cosmoflow;

TEST(CosmoFlowModel, ReferenceParameterCount) {
  sdk::GraphBuilder g;
  build_model(g, ModelSettings{}, 0.9, 1, 7);
  EXPECT_EQ(count_parameters(*g.graph()), 8907556u);  // Keras summary of the v1.0+ reference
}

TEST(CosmoFlowModel, V07KernelTwoParameterCount) {
  sdk::GraphBuilder g;
  ModelSettings v07;
  v07.kernel_size = 2;
  build_model(g, v07, 0.9, 1, 7);
  EXPECT_EQ(count_parameters(*g.graph()), 5597604u);  // "Total params: 5,597,604" in the v0.7 TACC log
}

TEST(CosmoFlowModel, ShapesAndKerasSamePadding) {
  sdk::GraphBuilder g;
  ModelSettings mini;
  mini.edge = 32;
  mini.kernel_size = 2;
  build_model(g, mini, 0.9, 2, 7);
  const MLPH_Graph& graph = *g.graph();
  const MLPH_Node& conv1 = graph.nodes[1];
  ASSERT_STREQ(conv1.op, "conv");
  sdk::Attrs attrs(conv1);
  EXPECT_EQ(attrs.ints("padding"), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));  // even kernel: the extra pad after
  const MLPH_Value& flat = graph.values[graph.nodes[1 + 5 * 3].outputs[0]];
  EXPECT_EQ(flat.shape[1], 512);  // 32^3 halved five times -> 1^3 x 512
  EXPECT_EQ(graph.values[graph.inputs[0]].dtype, MLPH_DTYPE_I16);
  EXPECT_EQ(graph.values[graph.loss].ndim, 0);
}

TEST(CosmoFlowModel, GlorotUniformInitAndZeroBias) {
  sdk::GraphBuilder g;
  build_model(g, ModelSettings{}, 0.9, 1, 11);
  const MLPH_Graph& graph = *g.graph();
  // conv1 kernel: fan_in 27*4, fan_out 27*32 -> limit sqrt(6/972)
  const double limit = std::sqrt(6.0 / (27 * 4 + 27 * 32));
  const MLPH_Parameter& kernel = graph.params[0];
  const size_t n = 3 * 3 * 3 * 4 * 32;
  double max_abs = 0, mean = 0;
  for (size_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(double(kernel.init[i]))), mean += kernel.init[i];
  EXPECT_LE(max_abs, limit);
  EXPECT_GT(max_abs, 0.95 * limit);
  EXPECT_NEAR(mean / n, 0.0, 0.01);
  const MLPH_Parameter& bias = graph.params[1];
  for (int i = 0; i < 32; ++i) EXPECT_EQ(bias.init[i], 0.0f);
  // l2 on the dense kernels only
  for (size_t i = 0; i < graph.n_params; ++i) EXPECT_EQ(graph.params[i].l2, 0.0);
  sdk::GraphBuilder decayed;
  ModelSettings wd;
  wd.weight_decay = 0.01;
  build_model(decayed, wd, 0.9, 1, 11);
  int with_l2 = 0;
  for (size_t i = 0; i < decayed.graph()->n_params; ++i) with_l2 += decayed.graph()->params[i].l2 == 0.01;
  EXPECT_EQ(with_l2, 2);
}

TEST(CosmoFlowModel, SameSeedSameWeightsOtherSeedOther) {
  sdk::GraphBuilder a, b, c;
  build_model(a, ModelSettings{}, 0.9, 1, 5);
  build_model(b, ModelSettings{}, 0.9, 1, 5);
  build_model(c, ModelSettings{}, 0.9, 1, 6);
  EXPECT_EQ(a.graph()->params[0].init[17], b.graph()->params[0].init[17]);
  EXPECT_NE(a.graph()->params[0].init[17], c.graph()->params[0].init[17]);
}

TEST(CosmoFlowSchedule, ReferenceWarmupAndStrictDecay) {
  ScheduleSettings s;  // base_lr 0.001, linear, base 64, warmup 4, {32: 0.25, 64: 0.125}
  s.global_batch_size = 256;  // scale 4: peak 0.004
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.001);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.001 + 0.003 / 4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.001 + 3 * 0.003 / 4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 0.004);
  EXPECT_DOUBLE_EQ(learning_rate(s, 32), 0.004);   // boundary 32 is not < 32
  EXPECT_DOUBLE_EQ(learning_rate(s, 33), 0.001);   // 0.25 * peak
  EXPECT_DOUBLE_EQ(learning_rate(s, 64), 0.001);
  EXPECT_DOUBLE_EQ(learning_rate(s, 65), 0.0005);  // absolute factor, not cumulative
  s.scaling = "sqrt";
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 0.002);
}

TEST(CosmoFlowSchedule, LogsTheReferenceKeys) {
  Settings s;
  s.schedule.global_batch_size = 128;
  s.model.weight_decay = 0.01;
  const auto log = hyperparameter_log(s);
  ASSERT_EQ(log.size(), 8u);
  EXPECT_EQ(log[0], (std::pair<std::string, std::string>{"opt_weight_decay", "0.01"}));
  EXPECT_EQ(log[1], (std::pair<std::string, std::string>{"dropout", "0.5"}));
  EXPECT_EQ(log[2], (std::pair<std::string, std::string>{"opt_name", "\"sgd\""}));
  EXPECT_EQ(log[3], (std::pair<std::string, std::string>{"opt_base_learning_rate", "0.002"}));
  EXPECT_EQ(log[5], (std::pair<std::string, std::string>{"opt_learning_rate_warmup_factor", "2.0"}));
  EXPECT_EQ(log[6], (std::pair<std::string, std::string>{"opt_learning_rate_decay_boundary_epochs", "[32, 64]"}));
  EXPECT_EQ(log[7], (std::pair<std::string, std::string>{"opt_learning_rate_decay_factor", "0.25"}));
}
