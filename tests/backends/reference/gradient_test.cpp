// Finite-difference checks of every reference op through the backend's own C table: the gradient
// read back after a train step (lr 0) must match central differences of the reported loss.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "mlph/core/host.hpp"
#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "model.hpp"

using namespace mlph;

namespace {

class Backend : public sdk::Backend {
 public:
  Backend(const MLPH_HostApi* host, const sdk::Options&) : host_(host), pool_(std::make_shared<reference::ThreadPool>(2)) {}
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& g, const MLPH_CommsHandle* c) override {
    return std::make_unique<reference::ReferenceModel>(host_, pool_, g, c);
  }
  const MLPH_HostApi* host_;
  std::shared_ptr<reference::ThreadPool> pool_;
};

std::vector<float> random_values(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * mlph_uniform(99, stream, 0, i) - 1.0f);
  return v;
}

// A graph whose trainable parameters are the op's inputs, loss = mse(op(...), target).
struct Case {
  sdk::GraphBuilder g;
  int32_t target = -1;
  std::vector<int32_t> params;

  int32_t param(const std::string& name, std::vector<int64_t> shape, float scale = 1.0f) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
    g.parameter(v, random_values(static_cast<size_t>(sdk::numel(g.value_info(v))), params.size() + 1, scale));
    params.push_back(v);
    return v;
  }
  int32_t value(const std::string& name, std::vector<int64_t> shape) { return g.value(name, MLPH_DTYPE_F32, shape); }
  void finish(int32_t out, double l2_on_first = 0.0) {
    const MLPH_Value o = g.value_info(out);
    target = g.value("target", MLPH_DTYPE_F32, {o.shape, o.shape + o.ndim});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node("mse", "loss", {out, target}, {loss});
    g.inputs({target});
    g.loss(loss);
    g.optimizer("sgd_keras", {{"momentum", 0.0}});
    g.seed(5);
    (void)l2_on_first;
  }
};

// Compares analytic and numeric gradients of every parameter element (or a sample of them).
void check_gradients(Case& c, double tolerance = 2e-2) {
  const MLPH_BackendApi* api = sdk::backend_api<Backend>();
  MLPH_Backend* backend = nullptr;
  core::check(api->create(core::host_api(), nullptr, 0, &backend));
  MLPH_Model* model = nullptr;
  const MLPH_Graph* graph = c.g.graph();
  core::check(api->compile(backend, graph, nullptr, &model));
  const MLPH_Value tv = c.g.value_info(c.target);
  std::vector<float> target = random_values(static_cast<size_t>(sdk::numel(tv)), 77, 0.5f);
  MLPH_Tensor input = sdk::host_tensor(MLPH_DTYPE_F32, tv.shape, tv.ndim, target.data());
  auto loss_at = [&](uint64_t step) {
    MLPH_StepArgs args{sizeof(MLPH_StepArgs), nullptr, 0.0, step};
    MLPH_StepResult r{sizeof(MLPH_StepResult), nullptr, 0};
    core::check(api->train_step(model, &input, 1, &args, &r));
    return r.loss;
  };
  loss_at(0);
  for (size_t p = 0; p < graph->n_params; ++p) {
    const MLPH_Value& v = graph->values[graph->params[p].value];
    std::vector<float> w(static_cast<size_t>(sdk::numel(v))), grad(w.size());
    MLPH_Tensor wt = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, w.data());
    MLPH_Tensor gt = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, grad.data());
    core::check(api->read_parameter(model, p, &wt));
    loss_at(0);
    core::check(api->read_gradient(model, p, &gt));
    const size_t stride = std::max<size_t>(1, w.size() / 40);
    for (size_t i = 0; i < w.size(); i += stride) {
      const float h = 1e-2f, saved = w[i];
      w[i] = saved + h;
      core::check(api->write_parameter(model, p, &wt));
      const double up = loss_at(0);
      w[i] = saved - h;
      core::check(api->write_parameter(model, p, &wt));
      const double down = loss_at(0);
      w[i] = saved;
      core::check(api->write_parameter(model, p, &wt));
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], numeric, tolerance * std::max(1.0, std::fabs(numeric)))
          << v.name << "[" << i << "]";
    }
  }
  api->model_destroy(model);
  api->destroy(backend);
}

}  // namespace

TEST(ReferenceGradients, Conv3dPaddedWithBias) {
  Case c;
  const int32_t x = c.param("x", {2, 5, 4, 6, 3});
  const int32_t w = c.param("w", {3, 3, 3, 3, 4}, 0.5f);
  const int32_t b = c.param("b", {4});
  const int32_t y = c.value("y", {2, 5, 4, 6, 4});
  c.g.node("conv", "conv", {x, w, b}, {y}, {{"stride", {1, 1, 1}}, {"padding", {1, 1, 1}}, {"dilation", {1, 1, 1}}});
  c.finish(y);
  check_gradients(c);
}

TEST(ReferenceGradients, Conv3dEvenKernelAsymmetricPadding) {
  Case c;
  const int32_t x = c.param("x", {1, 4, 4, 4, 2});
  const int32_t w = c.param("w", {2, 2, 2, 2, 3}, 0.5f);
  const int32_t y = c.value("y", {1, 4, 4, 4, 3});
  c.g.node("conv", "conv", {x, w}, {y}, {{"padding", {0, 0, 0, 1, 1, 1}}});
  c.finish(y);
  check_gradients(c);
}

TEST(ReferenceGradients, Conv2dStrideDilationGroups) {
  Case c;
  const int32_t x = c.param("x", {2, 9, 8, 4});
  const int32_t w = c.param("w", {3, 3, 2, 6}, 0.5f);
  const int32_t y = c.value("y", {2, 3, 3, 6});  // H: (9+2-4-1)/3+1, W: (8+2-4-1)/2+1
  c.g.node("conv", "conv", {x, w}, {y},
           {{"stride", {3, 2}}, {"padding", {1, 1}}, {"dilation", {2, 2}}, {"groups", 2.0}});
  c.finish(y);
  check_gradients(c);
}

TEST(ReferenceGradients, MaxPoolLeakyReluDenseTanhScaleDropoutReshape) {
  Case c;
  const int32_t x = c.param("x", {2, 4, 4, 4, 3});
  const int32_t a = c.value("a", {2, 4, 4, 4, 3});
  c.g.node("leaky_relu", "act", {x}, {a}, {{"alpha", 0.3}});
  const int32_t p = c.value("p", {2, 2, 2, 2, 3});
  c.g.node("max_pool", "pool", {a}, {p}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
  const int32_t f = c.value("f", {2, 24});
  c.g.node("reshape", "flatten", {p}, {f}, {{"shape", {2, 24}}});
  const int32_t w = c.param("w", {24, 5}, 0.5f), b = c.param("b", {5});
  const int32_t d = c.value("d", {2, 5});
  c.g.node("dense", "dense", {f, w, b}, {d});
  const int32_t r = c.value("r", {2, 5});
  c.g.node("relu", "relu", {d}, {r});
  const int32_t dr = c.value("dr", {2, 5});
  c.g.node("dropout", "dropout", {r}, {dr}, {{"rate", 0.4}});
  const int32_t t = c.value("t", {2, 5});
  c.g.node("tanh", "tanh", {dr}, {t});
  const int32_t s = c.value("s", {2, 5});
  c.g.node("scale", "scale", {t}, {s}, {{"factor", 1.2}});
  c.finish(s);
  check_gradients(c);
}
