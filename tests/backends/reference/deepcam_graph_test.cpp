// The DeepCAM ops through the executor and the C table: int32 labels, n-ary inputs, batch-norm running
// statistics as state (updated by train_step, used by eval_step, exposed by read/write_parameter), eval
// outputs of other shapes and dtypes, LAMB's global clipping and decay mask, a finite-difference check of a
// DeepCAM-like graph, and the errors of the new ops.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

namespace mlph::reference {
namespace {
using test::CallResult;
using test::random_floats;
using test::result_of;

struct Builder {
  sdk::GraphBuilder g;

  int32_t value(const std::string& name, std::vector<int64_t> shape, MLPH_DType dtype = MLPH_DTYPE_F32) {
    return g.value(name, dtype, std::move(shape));
  }
  int32_t param(const std::string& name, std::vector<int64_t> shape, std::vector<float> init,
                uint32_t flags = MLPH_PARAM_TRAINABLE, double weight_decay = 1.0) {
    const int32_t v = value(name, std::move(shape));
    g.parameter(v, std::move(init), 0.0, weight_decay, flags);
    return v;
  }
  int32_t random_param(const std::string& name, std::vector<int64_t> shape, float scale) {
    const int64_t n = sdk::numel(shape.data(), static_cast<int32_t>(shape.size()));
    return param(name, shape, random_floats(static_cast<size_t>(n), ++streams_, scale));
  }
  int32_t node(const std::string& op, const std::string& name, std::vector<int32_t> inputs, std::vector<int64_t> shape,
               std::vector<sdk::AttrInit> attrs = {}) {
    return g.node(op, name, std::move(inputs), {value(name, std::move(shape))}, std::move(attrs));
  }
  const MLPH_Value& info(int32_t v) const { return g.value_info(v); }

 private:
  uint64_t streams_ = 100;
};

CallResult compile_error(const MLPH_Graph* graph) {
  MLPH_Backend* backend = nullptr;
  core::check(test::api()->create(core::host_api(), nullptr, 0, &backend));
  MLPH_Model* model = nullptr;
  CallResult r = result_of(test::api()->compile(backend, graph, nullptr, &model));
  test::api()->model_destroy(model);  // a graph that compiles has a model to free (NULL is a no-op)
  test::api()->destroy(backend);
  return r;
}

bool mentions(const CallResult& r, const std::string& text) { return r.message.find(text) != std::string::npos; }

// ---- batch_norm state --------------------------------------------------------------------------------

// x [2, 2, 1, 2]: channel 0 holds 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14/3), channel 1 holds
// 0, 0, 4, 4 (mean 2, biased var 4, unbiased 16/3). Momentum 0.1.
TEST(ReferenceBatchNormState, TrainingUpdatesRunningStatisticsAndEvaluationUsesThem) {
  Builder b;
  const int32_t x = b.value("x", {2, 2, 1, 2}), t = b.value("t", {2, 2, 1, 2});
  const int32_t gamma = b.param("gamma", {2}, {1.5f, 0.5f}), beta = b.param("beta", {2}, {0.1f, -0.2f});
  const int32_t mean = b.param("running_mean", {2}, {0.5f, -1.0f}, 0);
  const int32_t var = b.param("running_var", {2}, {2.0f, 1.0f}, 0);
  const int32_t y = b.node("batch_norm", "bn", {x, gamma, beta, mean, var}, {2, 2, 1, 2});
  b.g.loss(b.node("mse", "loss", {y, t}, {}));
  b.g.inputs({x, t});
  b.g.eval_outputs({y});
  b.g.optimizer("sgd_keras", {{"momentum", 0.0}});
  test::Compiled model(b.g.graph());
  std::vector<float> xs{1, 0, 2, 0, 3, 4, 6, 4}, zeros(8, 0.0f);
  const std::vector<MLPH_Tensor> inputs{test::tensor_for(b.info(x), xs), test::tensor_for(b.info(t), zeros)};

  // Training normalizes with the batch statistics: loss = mean(y^2).
  const double batch_mean[2] = {3, 2}, batch_var[2] = {3.5, 4}, g[2] = {1.5, 0.5}, be[2] = {0.1, -0.2};
  double expected_loss = 0;
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = i % 2;
    const double v = g[c] * (xs[i] - batch_mean[c]) / std::sqrt(batch_var[c] + 1e-5) + be[c];
    expected_loss += v * v / 8;
  }
  EXPECT_NEAR(model.train(inputs, 0.0), expected_loss, 1e-5);
  const std::vector<float> running_mean = model.read_parameter(2, b.info(mean));
  const std::vector<float> running_var = model.read_parameter(3, b.info(var));
  EXPECT_NEAR(running_mean[0], 0.9 * 0.5 + 0.1 * 3, 1e-6);
  EXPECT_NEAR(running_mean[1], 0.9 * -1 + 0.1 * 2, 1e-6);
  EXPECT_NEAR(running_var[0], 0.9 * 2 + 0.1 * 14.0 / 3, 1e-6);  // unbiased: M/(M-1) = 4/3
  EXPECT_NEAR(running_var[1], 0.9 * 1 + 0.1 * 16.0 / 3, 1e-6);
  MLPH_Tensor t_grad = test::tensor_for(b.info(mean), zeros);
  EXPECT_EQ(result_of(test::api()->read_gradient(model.model(), 2, &t_grad)).code, MLPH_FAILED_PRECONDITION);

  auto evaluate = [&] {
    std::vector<float> out(8);
    MLPH_Tensor o = test::tensor_for(b.info(y), out);
    core::check(test::api()->eval_step(model.model(), inputs.data(), inputs.size(), &o, 1));
    return out;
  };
  std::vector<float> out = evaluate();  // normalizes with the running statistics, and leaves them alone
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = i % 2;
    EXPECT_NEAR(out[i], g[c] * (xs[i] - running_mean[c]) / std::sqrt(running_var[c] + 1e-5) + be[c], 1e-5) << i;
  }
  EXPECT_EQ(model.read_parameter(2, b.info(mean)), running_mean);
  // Written statistics (how ranks average them) are what evaluation uses.
  model.write_parameter(2, b.info(mean), {0.0f, 1.0f});
  model.write_parameter(3, b.info(var), {4.0f, 1.0f});
  out = evaluate();
  for (size_t i = 0; i < 8; ++i) {
    const size_t c = i % 2;
    const double m = c == 0 ? 0.0 : 1.0, v = c == 0 ? 4.0 : 1.0;
    EXPECT_NEAR(out[i], g[c] * (xs[i] - m) / std::sqrt(v + 1e-5) + be[c], 1e-5) << i;
  }
}

// ---- LAMB --------------------------------------------------------------------------------------------

// Parameters a = (0.6, -0.8) (decay multiplier 1), b = (1.5, 0.5) (multiplier 0: masked) and z = (0, 0)
// (||p|| = 0: trust ratio 1 at step 1); loss = mean((concat(a, b, z) - t)^2) with t = (3, 1, -2, 4, 0.5, -1.5),
// whose gradient norm is 2 at step 1. beta1 0.9, beta2 0.999, eps 0.5 (large, so that the clipping shows in the
// update), weight_decay 0.01, lr 0.1 then 0.05. Expected values from numpy (float64) with docs/ops.md's formulas.
struct LambExpectation {
  double max_grad_norm;
  double losses[2];
  float after[2][6];  // a, b, z after steps 1 and 2
};

void expect_lamb(const LambExpectation& e) {
  Builder b;
  const int32_t a = b.param("a", {1, 2}, {0.6f, -0.8f});
  const int32_t masked = b.param("b", {1, 2}, {1.5f, 0.5f}, MLPH_PARAM_TRAINABLE, 0.0);
  const int32_t z = b.param("z", {1, 2}, {0.0f, 0.0f});
  const int32_t t = b.value("t", {1, 6});
  const int32_t joined = b.node("concat", "concat", {a, masked, z}, {1, 6});
  b.g.loss(b.node("mse", "loss", {joined, t}, {}));
  b.g.inputs({t});
  b.g.optimizer(
      "lamb",
      {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 0.5}, {"weight_decay", 0.01}, {"max_grad_norm", e.max_grad_norm}});
  test::Compiled model(b.g.graph());
  std::vector<float> target{3, 1, -2, 4, 0.5f, -1.5f};
  const double lrs[2] = {0.1, 0.05};
  for (uint64_t step = 0; step < 2; ++step) {
    EXPECT_NEAR(model.train({test::tensor_for(b.info(t), target)}, lrs[step], step), e.losses[step], 1e-5);
    for (size_t p = 0; p < 3; ++p) {
      const std::vector<float> w = model.read_parameter(p, b.info(b.g.graph()->params[p].value));
      for (size_t i = 0; i < 2; ++i)
        EXPECT_NEAR(w[i], e.after[step][2 * p + i], 2e-6)
            << "step " << step + 1 << " parameter " << p << "[" << i << "]";
    }
  }
}

TEST(ReferenceLamb, GlobalNormClipsWhenAboveMaxGradNorm) {
  expect_lamb({1.0,
               {6.0, 5.7584411},
               {{0.67531203f, -0.734211717f, 1.44615385f, 0.553846154f, 0.0142857143f, -0.0333333333f},
                {0.712909087f, -0.701436052f, 1.41919589f, 0.580804106f, 0.0149981039f, -0.0350008113f}}});
}

TEST(ReferenceLamb, NoClippingBelowMaxGradNorm) {
  expect_lamb({100.0,
               {6.0, 5.71176077},
               {{0.674026133f, -0.732768076f, 1.43f, 0.57f, 0.025f, -0.05f},
                {0.710920387f, -0.699347054f, 1.39512541f, 0.60487459f, 0.0262389357f, -0.0525055016f}}});
}

// ---- labels, iou and eval outputs ----------------------------------------------------------------------

// Logits [2, 1, 3, 3] (a trainable parameter), int32 labels [2, 1, 3]; eval outputs: iou [2] and the labels.
struct Segmentation {
  Builder b;
  int32_t logits, labels, iou;
  std::vector<float> logit_values{2, 0, 0, 0, 3, 1, 0, 0, 1,   // sample 0 predicts 0, 1, 2
                                  0, 5, 0, 1, 0, 0, 1, 0, 0};  // sample 1 predicts 1, 0, 0
  std::vector<int32_t> label_values{0, 1, 2, 1, 1, 0};

  Segmentation() {
    logits = b.param("logits", {2, 1, 3, 3}, logit_values);
    labels = b.value("labels", {2, 1, 3}, MLPH_DTYPE_I32);
    b.g.loss(b.node("softmax_cross_entropy", "ce", {logits, labels}, {},
                    {{"class_weights", {1.00172996521, 2.61461114883, 1.71641969681}}}));
    iou = b.node("iou", "iou", {logits, labels}, {2});
    b.g.inputs({labels});
    b.g.eval_outputs({iou, labels});
    b.g.optimizer("adam", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.0}});
  }
};

TEST(ReferenceSegmentation, IouAndInt32LabelsAsEvalOutputs) {
  Segmentation s;
  test::Compiled model(s.b.g.graph());
  std::vector<MLPH_Tensor> in{test::tensor_for(s.b.info(s.labels), s.label_values)};
  std::vector<float> iou(2);
  std::vector<int32_t> labels_back(6, -1);
  MLPH_Tensor out[2] = {test::tensor_for(s.b.info(s.iou), iou), test::tensor_for(s.b.info(s.labels), labels_back)};
  core::check(test::api()->eval_step(model.model(), in.data(), in.size(), out, 2));
  // Sample 0 is perfect; sample 1: class 0 tp 1 fp 1 -> 1/2, class 1 tp 1 fn 1 -> 1/2, class 2 absent -> 1.
  EXPECT_FLOAT_EQ(iou[0], 1.0f);
  EXPECT_NEAR(iou[1], (0.5 + 0.5 + 1.0) / 3, 1e-6);
  EXPECT_EQ(labels_back, s.label_values);
  EXPECT_GT(model.train(in, 0.01), 0.0);  // the loss path runs on int32 labels too
}

TEST(ReferenceSegmentation, LabelOutsideTheClassesIsAnErrorNamingTheNode) {
  Segmentation s;
  test::Compiled model(s.b.g.graph());
  s.label_values[4] = 3;
  std::vector<MLPH_Tensor> in{test::tensor_for(s.b.info(s.labels), s.label_values)};
  const MLPH_StepArgs args = mlph::sdk::step_args(0.1, 0);
  MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
  const CallResult e = result_of(test::api()->train_step(model.model(), in.data(), in.size(), &args, &result));
  EXPECT_EQ(e.code, MLPH_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(e, "'ce'") && mentions(e, "label 3")) << e.message;
}

// ---- a DeepCAM-like graph, by finite differences of the reported loss ---------------------------------------

// Separable conv (depthwise dilated + pointwise), batch norm, a 1x1 skip conv, add; the pooling branch
// (global average pool, 1x1 conv, channel affine, broadcast); concat; a transposed conv upsampling 2x; weighted
// cross-entropy on int32 labels. lr 0, so training moves nothing but the running statistics, which training
// does not read.
TEST(ReferenceDeepCamGraph, GradientsMatchFiniteDifferences) {
  Builder b;
  const int32_t x = b.random_param("x", {2, 4, 6, 3}, 1.0f);
  const int32_t dw = b.random_param("dw", {3, 3, 1, 3}, 0.5f), pw = b.random_param("pw", {1, 1, 3, 4}, 0.5f);
  const int32_t gamma = b.random_param("gamma", {4}, 1.0f), beta = b.random_param("beta", {4}, 1.0f);
  const int32_t mean = b.param("mean", {4}, std::vector<float>(4, 0.0f), 0);
  const int32_t var = b.param("var", {4}, std::vector<float>(4, 1.0f), 0);
  const int32_t skip_w = b.random_param("skip_w", {1, 1, 3, 4}, 0.5f), skip_b = b.random_param("skip_b", {4}, 0.5f);
  const int32_t pool_w = b.random_param("pool_w", {1, 1, 4, 2}, 0.5f), pool_b = b.random_param("pool_b", {2}, 0.5f);
  const int32_t aff_w = b.random_param("aff_w", {2}, 1.0f), aff_b = b.random_param("aff_b", {2}, 1.0f);
  const int32_t up_w = b.random_param("up_w", {3, 3, 3, 6}, 0.4f), up_b = b.random_param("up_b", {3}, 0.5f);
  int32_t h =
      b.node("conv", "depthwise", {x, dw}, {2, 4, 6, 3}, {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 3.0}});
  h = b.node("conv", "pointwise", {h, pw}, {2, 4, 6, 4});
  h = b.node("batch_norm", "bn", {h, gamma, beta, mean, var}, {2, 4, 6, 4});
  const int32_t skip = b.node("conv", "skip", {x, skip_w, skip_b}, {2, 4, 6, 4});
  h = b.node("add", "add", {h, skip}, {2, 4, 6, 4});
  int32_t p = b.node("global_avg_pool", "gap", {h}, {2, 1, 1, 4});
  p = b.node("conv", "pool_conv", {p, pool_w, pool_b}, {2, 1, 1, 2});
  p = b.node("channel_affine", "affine", {p, aff_w, aff_b}, {2, 1, 1, 2});
  p = b.node("broadcast", "tile", {p}, {2, 4, 6, 2}, {{"shape", {2, 4, 6, 2}}});
  h = b.node("concat", "concat", {h, p}, {2, 4, 6, 6});
  h = b.node("conv_transpose", "up", {h, up_w, up_b}, {2, 8, 12, 3},
             {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
  const int32_t labels = b.value("labels", {2, 8, 12}, MLPH_DTYPE_I32);
  b.g.loss(b.node("softmax_cross_entropy", "loss", {h, labels}, {},
                  {{"class_weights", {1.00172996521, 2.61461114883, 1.71641969681}}}));
  b.g.inputs({labels});
  b.g.optimizer("sgd_keras", {{"momentum", 0.9}});
  const MLPH_Graph* graph = b.g.graph();
  test::Compiled model(graph);
  std::vector<int32_t> label_values(2 * 8 * 12);
  for (size_t i = 0; i < label_values.size(); ++i) label_values[i] = static_cast<int32_t>(i * 5 % 7 % 3);
  const std::vector<MLPH_Tensor> inputs{test::tensor_for(b.info(labels), label_values)};
  const float step = 1e-2f;
  for (size_t k = 0; k < graph->n_params; ++k) {
    if (!(graph->params[k].flags & MLPH_PARAM_TRAINABLE)) continue;
    const MLPH_Value& v = graph->values[graph->params[k].value];
    std::vector<float> w = model.read_parameter(k, v);
    model.train(inputs, 0.0);
    const std::vector<float> grad = model.read_gradient(k, v);
    double largest = 0;
    for (size_t i = 0; i < w.size(); i += std::max<size_t>(1, w.size() / 12)) {
      const float saved = w[i];
      w[i] = saved + step;
      model.write_parameter(k, v, w);
      const double up = model.train(inputs, 0.0);
      w[i] = saved - step;
      model.write_parameter(k, v, w);
      const double down = model.train(inputs, 0.0);
      w[i] = saved;
      model.write_parameter(k, v, w);
      const double numeric = (up - down) / (2.0 * step);
      largest = std::max(largest, std::fabs(numeric));
      EXPECT_NEAR(grad[i], numeric, 3e-3 * (1.0 + std::fabs(numeric))) << v.name << "[" << i << "]";
    }
    EXPECT_GT(largest, 1e-4) << v.name << ": a vanishing gradient proves nothing";
  }
}

// ---- errors ------------------------------------------------------------------------------------------

// A one-node graph around `op` on x [1, 4, 4, 2]: the node is named "probe".
CallResult probe(const std::string& op, std::vector<sdk::AttrInit> attrs, std::vector<int64_t> out_shape,
                 bool trainable_statistics = false) {
  Builder b;
  const int32_t x = b.param("x", {1, 4, 4, 2}, std::vector<float>(32, 0.5f));
  std::vector<int32_t> inputs{x};
  if (op == "conv_transpose") inputs.push_back(b.param("w", {3, 3, 2, 2}, std::vector<float>(36, 0.1f)));
  if (op == "batch_norm") {
    const uint32_t flags = trainable_statistics ? MLPH_PARAM_TRAINABLE : 0;
    for (const char* name : {"gamma", "beta"}) inputs.push_back(b.param(name, {2}, {1.0f, 1.0f}));
    for (const char* name : {"running_mean", "running_var"}) inputs.push_back(b.param(name, {2}, {0.0f, 1.0f}, flags));
  }
  const int32_t y = b.node(op, "probe", inputs, std::move(out_shape), std::move(attrs));
  b.g.loss(b.node("mse", "loss", {y, y}, {}));
  b.g.optimizer("sgd_keras", {});
  return compile_error(b.g.graph());
}

TEST(ReferenceDeepCamErrors, NewOpsRejectWhatTheyDoNotImplement) {
  const CallResult groups = probe("conv_transpose", {{"groups", 2.0}}, {1, 4, 4, 2});
  EXPECT_EQ(groups.code, MLPH_UNIMPLEMENTED);
  EXPECT_TRUE(mentions(groups, "'probe'") && mentions(groups, "groups")) << groups.message;
  const CallResult shape = probe("conv_transpose", {{"stride", {2, 2}}}, {1, 8, 8, 2});  // 9x9 without padding
  EXPECT_EQ(shape.code, MLPH_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(shape, "[1,9,9,2]")) << shape.message;
  EXPECT_EQ(probe("conv_transpose", {{"stride", {2, 2}}}, {1, 9, 9, 2}).code, MLPH_OK);
  const CallResult trainable = probe("batch_norm", {}, {1, 4, 4, 2}, true);
  EXPECT_EQ(trainable.code, MLPH_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(trainable, "'probe'") && mentions(trainable, "running_mean")) << trainable.message;
  EXPECT_EQ(probe("batch_norm", {{"eps", 1e-3}, {"momentum", 0.01}}, {1, 4, 4, 2}).code, MLPH_OK);
  EXPECT_EQ(probe("batch_norm", {{"affine", 1.0}}, {1, 4, 4, 2}).code, MLPH_UNIMPLEMENTED);
  EXPECT_EQ(probe("global_avg_pool", {}, {1, 1, 1, 2}).code, MLPH_OK);
  EXPECT_EQ(probe("global_avg_pool", {}, {1, 2}).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(probe("broadcast", {{"shape", {1, 4, 4, 2}}}, {1, 4, 4, 2}).code, MLPH_OK);
  EXPECT_EQ(probe("broadcast", {}, {1, 8, 4, 2}).code, MLPH_INVALID_ARGUMENT);  // 4 is not 1
}

TEST(ReferenceDeepCamErrors, LabelsMustBeInt32AndAdamNeedsItsHyperparameters) {
  Builder b;
  const int32_t logits = b.param("logits", {2, 3}, std::vector<float>(6, 0.0f));
  const int32_t labels = b.value("labels", {2}, MLPH_DTYPE_F32);
  b.g.loss(b.node("softmax_cross_entropy", "ce", {logits, labels}, {}));
  b.g.inputs({labels});
  b.g.optimizer("adam", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.0}});
  const CallResult dtype = compile_error(b.g.graph());
  EXPECT_EQ(dtype.code, MLPH_UNIMPLEMENTED);
  EXPECT_TRUE(mentions(dtype, "'ce'") && mentions(dtype, "int32")) << dtype.message;

  Segmentation s;
  s.b.g.optimizer("adamw", {{"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.0}});
  const CallResult missing = compile_error(s.b.g.graph());
  EXPECT_EQ(missing.code, MLPH_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(missing, "beta1")) << missing.message;
  s.b.g.optimizer("lamb", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.0}, {"amsgrad", 1.0}});
  EXPECT_EQ(compile_error(s.b.g.graph()).code, MLPH_UNIMPLEMENTED);
}

}  // namespace
}  // namespace mlph::reference#include "mlph/sdk/model/backend.hpp"

