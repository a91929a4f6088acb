// The reference backend against PyTorch (tests/fixtures/golden, written by
// tools/golden/make_reference_fixtures.py): loss, every parameter gradient, and the weights after
// two Keras-SGD steps.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "mlph/core/host.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "model.hpp"

using namespace mlph;

namespace {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
};
using Fixture = std::map<std::string, Tensor>;

Fixture load(const std::string& name) {
  std::ifstream in(std::string(MLPH_SOURCE_DIR) + "/tests/fixtures/golden/" + name);
  EXPECT_TRUE(in) << name;
  Fixture f;
  for (std::string header, data; std::getline(in, header) && std::getline(in, data);) {
    std::istringstream h(header), d(data);
    std::string tag, key;
    int ndim = 0;
    h >> tag >> key >> ndim;
    Tensor t;
    t.shape.resize(static_cast<size_t>(ndim));
    for (auto& dim : t.shape) h >> dim;
    for (double v; d >> v;) t.values.push_back(v);
    f[key] = std::move(t);
  }
  return f;
}

std::vector<float> floats(const Tensor& t) { return {t.values.begin(), t.values.end()}; }

// Builds a graph from the fixture's parameters, with `body` adding the ops between them.
class GoldenCase {
 public:
  GoldenCase(const std::string& file, const std::function<int32_t(GoldenCase&)>& body) : f_(load(file)) {
    const int32_t out = body(*this);
    const Tensor& target = f_.at("target");
    target_ = g_.value("target", MLPH_DTYPE_F32, target.shape);
    const int32_t loss = g_.value("loss", MLPH_DTYPE_F32, {});
    g_.node("mse", "loss", {out, target_}, {loss});
    inputs_.push_back(target_);
    g_.inputs(inputs_);
    g_.loss(loss);
    const Tensor& sgd = f_.at("sgd");
    g_.optimizer("sgd_keras", {{"momentum", sgd.values[1]}});
    lr_ = sgd.values[0];
  }

  int32_t param(const std::string& name) {
    const Tensor& t = f_.at("param:" + name);
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, t.shape);
    g_.parameter(v, floats(t));
    names_.push_back(name);
    return v;
  }
  int32_t input(const std::string& name, MLPH_DType dtype) {
    const Tensor& t = f_.at("input:" + name);
    const int32_t v = g_.value(name, dtype, t.shape);
    inputs_.push_back(v);
    return v;
  }
  int32_t value(const std::string& name, std::vector<int64_t> shape) { return g_.value(name, MLPH_DTYPE_F32, shape); }
  sdk::GraphBuilder& graph() { return g_; }

  void check(double tolerance) {
    auto pool = std::make_shared<reference::ThreadPool>(2);
    reference::ReferenceModel model(core::host_api(), pool, *g_.graph(), nullptr);
    // Inputs in graph order: data (as int16 where declared), then the target.
    std::vector<std::vector<float>> f32;
    std::vector<std::vector<int16_t>> i16;
    std::vector<MLPH_Tensor> tensors;
    for (int32_t id : inputs_) {
      const MLPH_Value& v = g_.value_info(id);
      const Tensor& t = id == target_ ? f_.at("target") : f_.at(std::string("input:") + v.name);
      if (v.dtype == MLPH_DTYPE_I16) {
        i16.emplace_back(t.values.begin(), t.values.end());
        tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, i16.back().data()));
      } else {
        f32.push_back(floats(t));
        tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, f32.back().data()));
      }
    }
    for (int step = 0; step < 2; ++step) {
      MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0};
      model.train_step(tensors.data(), tensors.size(), {sizeof(MLPH_StepArgs), nullptr, lr_, uint64_t(step)}, result);
      if (step > 0) continue;
      EXPECT_NEAR(result.loss, f_.at("loss").values[0], tolerance * std::fabs(f_.at("loss").values[0]));
      for (size_t p = 0; p < names_.size(); ++p) compare(model, p, "grad:", tolerance, true);
    }
    for (size_t p = 0; p < names_.size(); ++p) compare(model, p, "after2:", tolerance, false);
  }

 private:
  void compare(reference::ReferenceModel& model, size_t p, const std::string& prefix, double tolerance, bool gradient) {
    const Tensor& expected = f_.at(prefix + names_[p]);
    const MLPH_Value& v = g_.value_info(g_.graph()->params[p].value);
    std::vector<float> got(expected.values.size());
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, got.data());
    gradient ? model.read_gradient(p, t) : model.read_parameter(p, t);
    double scale = 0;
    for (double e : expected.values) scale = std::max(scale, std::fabs(e));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expected.values[i], tolerance * scale) << prefix << names_[p] << "[" << i << "]";
  }

  Fixture f_;
  sdk::GraphBuilder g_;
  std::vector<int32_t> inputs_;
  std::vector<std::string> names_;
  int32_t target_ = -1;
  double lr_ = 0;
};

}  // namespace

TEST(ReferenceGolden, Conv3dMatchesPyTorch) {
  GoldenCase c("conv3d.txt", [](GoldenCase& c) {
    const int32_t x = c.input("x", MLPH_DTYPE_F32), w = c.param("w"), b = c.param("b");
    const int32_t y = c.value("y", {2, 5, 4, 6, 4});
    c.graph().node("conv", "conv", {x, w, b}, {y}, {{"padding", {1, 1, 1}}});
    return y;
  });
  c.check(1e-5);
}

TEST(ReferenceGolden, GroupedDilatedStridedConv2dMatchesPyTorch) {
  GoldenCase c("conv2d_grouped.txt", [](GoldenCase& c) {
    const int32_t x = c.input("x", MLPH_DTYPE_F32), w = c.param("w");
    const int32_t y = c.value("y", {2, 3, 3, 6});
    c.graph().node("conv", "conv", {x, w}, {y},
                   {{"stride", {3, 2}}, {"padding", {1, 1}}, {"dilation", {2, 2}}, {"groups", 2.0}});
    return y;
  });
  c.check(1e-5);
}

TEST(ReferenceGolden, CosmoFlowShapedNetworkMatchesPyTorch) {
  GoldenCase c("cosmo_net.txt", [](GoldenCase& c) {
    auto& g = c.graph();
    const int32_t counts = c.input("counts", MLPH_DTYPE_I16);
    int32_t h = c.value("log", {2, 16, 16, 16, 4});
    g.node("log1p", "log1p", {counts}, {h});
    int64_t edge = 16, channels = 4;
    for (int i = 1; i <= 2; ++i) {
      const std::string n = std::to_string(i);
      const int64_t out = channels * 2;
      const int32_t w = c.param("c" + n + "w"), b = c.param("c" + n + "b");
      const int32_t y = c.value("conv" + n, {2, edge, edge, edge, out});
      g.node("conv", "conv" + n, {h, w, b}, {y}, {{"padding", {1, 1, 1}}});
      const int32_t a = c.value("act" + n, {2, edge, edge, edge, out});
      g.node("leaky_relu", "act" + n, {y}, {a}, {{"alpha", 0.3}});
      edge /= 2;
      h = c.value("pool" + n, {2, edge, edge, edge, out});
      g.node("max_pool", "pool" + n, {a}, {h}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
      channels = out;
    }
    const int32_t flat = c.value("flat", {2, 1024});
    g.node("reshape", "flatten", {h}, {flat}, {{"shape", {2, 1024}}});
    const int32_t d1w = c.param("d1w"), d1b = c.param("d1b");
    const int32_t d1 = c.value("d1", {2, 16}), a1 = c.value("a1", {2, 16});
    g.node("dense", "d1", {flat, d1w, d1b}, {d1});
    g.node("leaky_relu", "a1", {d1}, {a1}, {{"alpha", 0.3}});
    const int32_t d2w = c.param("d2w"), d2b = c.param("d2b");
    const int32_t d2 = c.value("d2", {2, 4}), t = c.value("t", {2, 4}), s = c.value("s", {2, 4});
    g.node("dense", "d2", {a1, d2w, d2b}, {d2});
    g.node("tanh", "tanh", {d2}, {t});
    g.node("scale", "scale", {t}, {s}, {{"factor", 1.2}});
    return s;
  });
  c.check(2e-5);
}
