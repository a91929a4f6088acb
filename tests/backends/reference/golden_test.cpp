// The reference backend against PyTorch: tests/fixtures/golden, written by
// tools/golden/make_reference_fixtures.py (format in the fixtures' README). For each case: the
// forward output (eval_step), the loss and every parameter's gradient after the first train step, the
// running statistics after it (batch norm), and the parameters after the last step: two Keras-SGD steps
// with another learning rate, or three torch.optim Adam/AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "test_util.hpp"

namespace mlph::reference {
namespace {

struct Expected {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

std::map<std::string, Expected> load_fixture(const std::string& file) {
  const std::string path = std::string(MLPH_SOURCE_DIR) + "/tests/fixtures/golden/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::map<std::string, Expected> tensors;
  for (std::string header, data; std::getline(in, header) && std::getline(in, data);) {
    std::istringstream h(header), d(data);
    std::string tag, name;
    int ndim = -1;
    h >> tag >> name >> ndim;
    if (tag != "tensor" || ndim < 0) throw std::runtime_error(path + ": bad header '" + header + "'");
    Expected t;
    t.shape.resize(static_cast<size_t>(ndim));
    for (int64_t& dim : t.shape) h >> dim;
    for (double v; d >> v;) t.values.push_back(v);
    if (static_cast<int64_t>(t.values.size()) != sdk::numel(t.shape.data(), ndim))
      throw std::runtime_error(path + ": " + name + " has the wrong number of values");
    tensors[name] = std::move(t);
  }
  return tensors;
}

// |got - expected| <= tolerance * (the largest |expected| of the tensor): relative to its scale.
void expect_close(const std::vector<float>& got, const Expected& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), expected.values.size()) << what;
  double scale = 0;
  for (double e : expected.values) scale = std::max(scale, std::fabs(e));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected.values[i], tolerance * scale) << what << "[" << i << "]";
}

// Builds the case's graph from the fixture's parameters and inputs; the test adds the ops.
class GoldenCase {
 public:
  explicit GoldenCase(const std::string& file) : fixture_(load_fixture(file)) {}

  const Expected& at(const std::string& name) const {
    auto it = fixture_.find(name);
    if (it == fixture_.end()) throw std::runtime_error("fixture has no tensor '" + name + "'");
    return it->second;
  }
  bool has(const std::string& name) const { return fixture_.count(name) > 0; }
  int32_t param(const std::string& name) {
    const Expected& t = at("param:" + name);
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, t.shape);
    const double decay = has("decay:" + name) ? at("decay:" + name).values[0] : 1.0;
    g_.parameter(v, {t.values.begin(), t.values.end()}, 0.0, decay);
    params_.push_back(name);
    return v;
  }
  // Batch-norm running statistics: a parameter without MLPH_PARAM_TRAINABLE.
  int32_t state(const std::string& name) {
    const Expected& t = at("state:" + name);
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, t.shape);
    g_.parameter(v, {t.values.begin(), t.values.end()}, 0.0, 1.0, 0);
    states_.push_back({params_.size() + states_.size(), name});  // its index in graph.params
    return v;
  }
  int32_t input(const std::string& name, MLPH_DType dtype) {
    const int32_t v = g_.value(name, dtype, at("input:" + name).shape);
    inputs_.push_back({v, "input:" + name});
    return v;
  }
  int32_t value(const std::string& name, std::vector<int64_t> shape) {
    return g_.value(name, MLPH_DTYPE_F32, std::move(shape));
  }
  // A batch_norm node over x with parameters g<k>, b<k> and states m<k>, v<k> (PyTorch's defaults).
  int32_t batch_norm(int32_t x, const std::string& k) {
    const MLPH_Value& in = g_.value_info(x);
    std::vector<int64_t> shape(in.shape, in.shape + in.ndim);  // copied now: new values move the table
    const int32_t gamma = param("g" + k), beta = param("b" + k), mean = state("m" + k), var = state("v" + k);
    return node("batch_norm", x, std::move(shape), {}, {gamma, beta, mean, var});
  }
  int32_t node(const std::string& op, int32_t x, std::vector<int64_t> shape, std::vector<sdk::AttrInit> attrs = {},
               std::vector<int32_t> more_inputs = {}) {
    std::vector<int32_t> in{x};
    in.insert(in.end(), more_inputs.begin(), more_inputs.end());
    const std::string name = op + std::to_string(++nodes_);
    return g_.node(op, name, in, {value(name, std::move(shape))}, std::move(attrs));
  }

  // loss = mse(out, target); then runs and compares everything.
  void check(int32_t out, double tolerance = 1e-4) {
    const int32_t target = g_.value("target", MLPH_DTYPE_F32, at("target").shape);
    inputs_.push_back({target, "target"});
    finish(out, g_.node("mse", "loss", {out, target}, {value("loss", {})}), tolerance);
  }
  // `loss` is the case's output itself (a loss node).
  void check_loss(int32_t loss, double tolerance = 1e-4) { finish(loss, loss, tolerance); }

 private:
  void finish(int32_t out, int32_t loss, double tolerance) {
    std::vector<int32_t> ids;
    for (const auto& [id, name] : inputs_) ids.push_back(id);
    g_.inputs(ids);
    g_.loss(loss);
    g_.eval_outputs({out});
    std::vector<double> learning_rates;
    if (has("sgd")) {
      const std::vector<double>& sgd = at("sgd").values;  // lr step 1, lr step 2, momentum
      learning_rates = {sgd[0], sgd[1]};
      g_.optimizer("sgd_keras", {{"momentum", sgd[2]}});
    } else {
      const std::string kind = has("adam") ? "adam" : "adamw";
      const std::vector<double>& h = at(kind).values;  // beta1, beta2, eps, weight_decay
      learning_rates = at("lrs").values;
      g_.optimizer(kind, {{"beta1", h[0]}, {"beta2", h[1]}, {"eps", h[2]}, {"weight_decay", h[3]}});
    }
    run(out, learning_rates, tolerance);
  }

  void run(int32_t out, const std::vector<double>& learning_rates, double tolerance) {
    test::Compiled model(g_.graph());
    std::vector<std::vector<float>> f32;
    std::vector<std::vector<int16_t>> i16;
    std::vector<std::vector<int32_t>> i32;
    f32.reserve(inputs_.size()), i16.reserve(inputs_.size()), i32.reserve(inputs_.size());
    std::vector<MLPH_Tensor> tensors;
    for (const auto& [id, name] : inputs_) {
      const Expected& t = at(name);
      if (g_.value_info(id).dtype == MLPH_DTYPE_I16)
        tensors.push_back(test::tensor_for(g_.value_info(id), i16.emplace_back(t.values.begin(), t.values.end())));
      else if (g_.value_info(id).dtype == MLPH_DTYPE_I32)
        tensors.push_back(test::tensor_for(g_.value_info(id), i32.emplace_back(t.values.begin(), t.values.end())));
      else
        tensors.push_back(test::tensor_for(g_.value_info(id), f32.emplace_back(t.values.begin(), t.values.end())));
    }
    std::vector<float> y(static_cast<size_t>(sdk::numel(g_.value_info(out))));
    MLPH_Tensor y_tensor = test::tensor_for(g_.value_info(out), y);
    core::check(test::api()->eval_step(model.model(), tensors.data(), tensors.size(), &y_tensor, 1));
    // Evaluation mode: batch norm uses the (initial) running statistics.
    expect_close(y, at(has("eval_output") ? "eval_output" : "output"), tolerance, "output");

    const double loss = model.train(tensors, learning_rates[0], 0);
    EXPECT_NEAR(loss, at("loss").values[0], tolerance * std::fabs(at("loss").values[0])) << "loss";
    for (size_t p = 0; p < params_.size(); ++p)
      expect_close(model.read_gradient(index_of(p), value_of(p)), at("grad:" + params_[p]), tolerance,
                   "grad:" + params_[p]);
    for (const auto& [index, name] : states_)
      expect_close(model.read_parameter(index, value_at(index)), at("state1:" + name), tolerance, "state1:" + name);
    for (size_t step = 1; step < learning_rates.size(); ++step) model.train(tensors, learning_rates[step], step);
    const std::string after = "after" + std::to_string(learning_rates.size()) + ":";
    for (size_t p = 0; p < params_.size(); ++p)
      expect_close(model.read_parameter(index_of(p), value_of(p)), at(after + params_[p]), tolerance,
                   after + params_[p]);
  }
  // Trainable parameters and states share graph.params: the p-th trainable one's index there.
  size_t index_of(size_t p) {
    const MLPH_Graph* graph = g_.graph();
    for (size_t i = 0, seen = 0; i < graph->n_params; ++i)
      if ((graph->params[i].flags & MLPH_PARAM_TRAINABLE) && seen++ == p) return i;
    throw std::runtime_error("no trainable parameter " + std::to_string(p));
  }
  const MLPH_Value& value_at(size_t index) { return g_.value_info(g_.graph()->params[index].value); }
  const MLPH_Value& value_of(size_t p) { return value_at(index_of(p)); }

  std::map<std::string, Expected> fixture_;
  sdk::GraphBuilder g_;
  std::vector<std::string> params_;                      // trainable, in graph order
  std::vector<std::pair<size_t, std::string>> states_;   // graph.params index, fixture name
  std::vector<std::pair<int32_t, std::string>> inputs_;  // value, fixture name
  int nodes_ = 0;
};

TEST(ReferenceGolden, Conv3d) {
  GoldenCase c("conv3d.txt");
  const int32_t x = c.param("x"), w = c.param("w"), b = c.param("b");
  c.check(c.node("conv", x, {2, 5, 4, 6, 4}, {{"padding", {1, 1, 1}}}, {w, b}));
}

TEST(ReferenceGolden, Conv3dStridedDilatedAsymmetricPadding) {
  GoldenCase c("conv3d_strided.txt");
  const int32_t x = c.param("x"), w = c.param("w");
  // D: (7+0+1-1-1)/2+1 = 4, H: (6+1+1-4-1)/1+1 = 4, W: (5+1+0-1-1)/2+1 = 3
  c.check(c.node("conv", x, {1, 4, 4, 3, 5},
                 {{"stride", {2, 1, 2}}, {"dilation", {1, 2, 1}}, {"padding", {0, 1, 1, 1, 1, 0}}}, {w}));
}

TEST(ReferenceGolden, Conv2dGroupedDilatedStrided) {
  GoldenCase c("conv2d_grouped.txt");
  const int32_t x = c.param("x"), w = c.param("w"), b = c.param("b");
  c.check(c.node("conv", x, {2, 3, 3, 6},
                 {{"stride", {3, 2}}, {"padding", {1, 1}}, {"dilation", {2, 2}}, {"groups", 2.0}}, {w, b}));
}

TEST(ReferenceGolden, MaxPool3d) {
  GoldenCase c("max_pool3d.txt");
  c.check(c.node("max_pool", c.param("x"), {2, 3, 2, 2, 3}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}}));
}

TEST(ReferenceGolden, MaxPool2dOverlapping) {
  GoldenCase c("max_pool2d_overlapping.txt");
  c.check(c.node("max_pool", c.param("x"), {2, 3, 5, 3}, {{"kernel", {3, 2}}, {"stride", {2, 1}}}));
}

TEST(ReferenceGolden, Dense) {
  GoldenCase c("dense.txt");
  const int32_t x = c.param("x"), w = c.param("w"), b = c.param("b");
  c.check(c.node("dense", x, {3, 5}, {}, {w, b}));
}

TEST(ReferenceGolden, LeakyRelu) {
  GoldenCase c("leaky_relu.txt");
  c.check(c.node("leaky_relu", c.param("x"), {4, 9}, {{"alpha", 0.3}}));
}

TEST(ReferenceGolden, Tanh) {
  GoldenCase c("tanh.txt");
  c.check(c.node("tanh", c.param("x"), {4, 9}));
}

TEST(ReferenceGolden, Mse) {
  GoldenCase c("mse.txt");
  c.check(c.param("x"));
}

// ---- DeepCAM ops --------------------------------------------------------------------------------------

TEST(ReferenceGolden, ConvTranspose2dUpsample) {  // PyTorch ConvTranspose2d(k3, s2, p1, output_padding=1)
  GoldenCase c("conv_transpose2d_upsample.txt");
  const int32_t x = c.param("x"), w = c.param("w"), b = c.param("b");
  c.check(c.node("conv_transpose", x, {2, 6, 10, 6},
                 {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}}, {w, b}));
}

TEST(ReferenceGolden, ConvTranspose2dOddGeometry) {
  GoldenCase c("conv_transpose2d_odd.txt");
  const int32_t x = c.param("x"), w = c.param("w");
  // H: (3-1)*3 - 0 + 1*(2-1) + 2 + 1 = 10, W: (4-1)*1 - 2 + 2*(3-1) + 1 + 1 = 7
  c.check(c.node("conv_transpose", x, {1, 10, 7, 2},
                 {{"stride", {3, 1}}, {"padding", {0, 1}}, {"dilation", {1, 2}}, {"output_padding", {2, 1}}}, {w}));
}

TEST(ReferenceGolden, DepthwiseDilatedConv2d) {
  GoldenCase c("depthwise_dilated.txt");
  const int32_t x = c.param("x"), w = c.param("w"), b = c.param("b");
  c.check(c.node("conv", x, {2, 7, 9, 6}, {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 6.0}}, {w, b}));
}

TEST(ReferenceGolden, BatchNorm2dTrainingAndEvaluation) {
  GoldenCase c("batch_norm2d.txt");
  const int32_t x = c.param("x"), gamma = c.param("gamma"), beta = c.param("beta");
  const int32_t mean = c.state("mean"), var = c.state("var");
  c.check(c.node("batch_norm", x, {4, 5, 6, 3}, {{"eps", 1e-5}, {"momentum", 0.1}}, {gamma, beta, mean, var}));
}

TEST(ReferenceGolden, WeightedCrossEntropyPlainMean) {
  GoldenCase c("weighted_cross_entropy.txt");
  const int32_t x = c.param("x"), labels = c.input("labels", MLPH_DTYPE_I32);
  c.check_loss(c.node("softmax_cross_entropy", x, {},
                      {{"class_weights", {1.00172996521, 2.61461114883, 1.71641969681}}}, {labels}));
}

TEST(ReferenceGolden, AdamThreeStepsWithMaskedDecay) {
  GoldenCase c("adam.txt");
  const int32_t x = c.input("x", MLPH_DTYPE_F32), w = c.param("w"), b = c.param("b");
  c.check(c.node("dense", x, {3, 4}, {}, {w, b}));
}

TEST(ReferenceGolden, AdamWThreeStepsWithMaskedDecay) {
  GoldenCase c("adamw.txt");
  const int32_t x = c.input("x", MLPH_DTYPE_F32), w = c.param("w"), b = c.param("b");
  c.check(c.node("dense", x, {3, 4}, {}, {w, b}));
}

// h = relu(bn1(pointwise(depthwise_dil2(x)))) + bn2(skip1x1(x)); the pooling branch
// relu(affine(conv1x1(avgpool(h)) + bias)) broadcast back; out = concat(h, pooled).
TEST(ReferenceGolden, DeepCamLikeBlock) {
  GoldenCase c("deepcam_block.txt");
  const int32_t x = c.param("x"), dw = c.param("dw"), pw = c.param("pw");
  int32_t a = c.node("conv", x, {2, 6, 8, 4}, {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 4.0}}, {dw});
  a = c.node("conv", a, {2, 6, 8, 8}, {}, {pw});
  a = c.node("relu", c.batch_norm(a, "1"), {2, 6, 8, 8});
  const int32_t skip_w = c.param("skip");
  const int32_t skip = c.batch_norm(c.node("conv", x, {2, 6, 8, 8}, {}, {skip_w}), "2");
  const int32_t h = c.node("add", a, {2, 6, 8, 8}, {}, {skip});
  const int32_t pool_w = c.param("pool_w"), pool_b = c.param("pool_b");
  int32_t p = c.node("conv", c.node("global_avg_pool", h, {2, 1, 1, 8}), {2, 1, 1, 4}, {}, {pool_w, pool_b});
  const int32_t aff_w = c.param("aff_w"), aff_b = c.param("aff_b");
  p = c.node("relu", c.node("channel_affine", p, {2, 1, 1, 4}, {}, {aff_w, aff_b}), {2, 1, 1, 4});
  p = c.node("broadcast", p, {2, 6, 8, 4}, {{"shape", {2, 6, 8, 4}}});
  c.check(c.node("concat", h, {2, 6, 8, 12}, {}, {p}));
}

TEST(ReferenceGolden, CosmoFlowShapedNetwork) {
  GoldenCase c("cosmo_net.txt");
  int32_t h = c.node("log1p", c.input("counts", MLPH_DTYPE_I16), {2, 16, 16, 16, 4});
  int64_t edge = 16, channels = 4;
  for (const std::string block : {"c1", "c2"}) {
    const int32_t w = c.param(block + "w"), b = c.param(block + "b");
    channels *= 2;
    h = c.node("conv", h, {2, edge, edge, edge, channels}, {{"padding", {1, 1, 1}}}, {w, b});
    h = c.node("leaky_relu", h, {2, edge, edge, edge, channels}, {{"alpha", 0.3}});
    edge /= 2;
    h = c.node("max_pool", h, {2, edge, edge, edge, channels}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
  }
  h = c.node("reshape", h, {2, 1024}, {{"shape", {2, 1024}}});
  const int32_t d1w = c.param("d1w"), d1b = c.param("d1b");
  h = c.node("leaky_relu", c.node("dense", h, {2, 16}, {}, {d1w, d1b}), {2, 16}, {{"alpha", 0.3}});
  const int32_t d2w = c.param("d2w"), d2b = c.param("d2b");
  h = c.node("tanh", c.node("dense", h, {2, 4}, {}, {d2w, d2b}), {2, 4});
  c.check(c.node("scale", h, {2, 4}, {{"factor", 1.2}}));
}

}  // namespace
}  // namespace mlph::reference
