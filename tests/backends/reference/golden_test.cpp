// The reference backend against PyTorch: tests/fixtures/golden, written by
// tools/golden/make_reference_fixtures.py (format in the fixtures' README). For each case: the
// forward output (eval_step), the loss and every parameter's gradient after the first train step,
// and the parameters after a second step with another learning rate (Keras SGD with momentum).
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
  int32_t param(const std::string& name) {
    const Expected& t = at("param:" + name);
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, t.shape);
    g_.parameter(v, {t.values.begin(), t.values.end()});
    params_.push_back(name);
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
    std::vector<int32_t> ids;
    for (const auto& [id, name] : inputs_) ids.push_back(id);
    g_.inputs(ids);
    g_.loss(g_.node("mse", "loss", {out, target}, {value("loss", {})}));
    g_.eval_outputs({out});
    const std::vector<double>& sgd = at("sgd").values;  // lr step 1, lr step 2, momentum
    g_.optimizer("sgd_keras", {{"momentum", sgd[2]}});
    run(out, sgd[0], sgd[1], tolerance);
  }

 private:
  void run(int32_t out, double lr1, double lr2, double tolerance) {
    test::Compiled model(g_.graph());
    std::vector<std::vector<float>> f32;
    std::vector<std::vector<int16_t>> i16;
    f32.reserve(inputs_.size()), i16.reserve(inputs_.size());
    std::vector<MLPH_Tensor> tensors;
    for (const auto& [id, name] : inputs_) {
      const Expected& t = at(name);
      if (g_.value_info(id).dtype == MLPH_DTYPE_I16)
        tensors.push_back(test::tensor_for(g_.value_info(id), i16.emplace_back(t.values.begin(), t.values.end())));
      else
        tensors.push_back(test::tensor_for(g_.value_info(id), f32.emplace_back(t.values.begin(), t.values.end())));
    }
    std::vector<float> y(static_cast<size_t>(sdk::numel(g_.value_info(out))));
    MLPH_Tensor y_tensor = test::tensor_for(g_.value_info(out), y);
    core::check(test::api()->eval_step(model.model(), tensors.data(), tensors.size(), &y_tensor, 1));
    expect_close(y, at("output"), tolerance, "output");

    const double loss = model.train(tensors, lr1, 0);
    EXPECT_NEAR(loss, at("loss").values[0], tolerance * std::fabs(at("loss").values[0])) << "loss";
    for (size_t p = 0; p < params_.size(); ++p)
      expect_close(model.read_gradient(p, value_of(p)), at("grad:" + params_[p]), tolerance, "grad:" + params_[p]);
    model.train(tensors, lr2, 1);
    for (size_t p = 0; p < params_.size(); ++p)
      expect_close(model.read_parameter(p, value_of(p)), at("after2:" + params_[p]), tolerance, "after2:" + params_[p]);
  }
  const MLPH_Value& value_of(size_t param) { return g_.value_info(g_.graph()->params[param].value); }

  std::map<std::string, Expected> fixture_;
  sdk::GraphBuilder g_;
  std::vector<std::string> params_;
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
