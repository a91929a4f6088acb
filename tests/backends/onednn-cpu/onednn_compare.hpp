// What the onednn-cpu tests share: both backends through their C tables, random inputs, and
// training compared step by step with the reference backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "backend.hpp"  // the reference backend
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "onednn_backend.hpp"

namespace mlph::onednn::test {

inline bool cpu_has_bf16() {
  const auto isa = unsigned(dnnl::get_effective_cpu_isa()), bf16 = unsigned(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

inline std::vector<float> random_floats(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * mlph_uniform(99, stream, 0, i) - 1.0f);
  return v;
}

// One backend and one compiled model through a C table.
class Compiled {
 public:
  Compiled(const MLPH_BackendApi* api, const MLPH_Graph* graph, std::vector<MLPH_KeyValue> options = {{"threads", "2"}})
      : api_(api) {
    core::check(api->create(core::host_api(), options.data(), options.size(), &backend_));
    if (MLPH_Error* e = api->compile(backend_, graph, nullptr, &model_)) {
      api->destroy(backend_);
      core::check(e);
    }
  }
  ~Compiled() {
    api_->model_destroy(model_);
    api_->destroy(backend_);
  }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  double train(std::vector<MLPH_Tensor> inputs, double lr, uint64_t step) {
    const MLPH_StepArgs args = mlph::sdk::step_args(lr, step);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api_->train_step(model_, inputs.data(), inputs.size(), &args, &result));
    return result.loss;
  }
  std::vector<float> eval(std::vector<MLPH_Tensor> inputs, const MLPH_Value& out) {
    std::vector<float> data(size_t(sdk::numel(out)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, out.shape, out.ndim, data.data());
    core::check(api_->eval_step(model_, inputs.data(), inputs.size(), &t, 1));
    return data;
  }
  // eval_step into `outputs`, whatever their dtypes.
  void eval_into(std::vector<MLPH_Tensor> inputs, std::vector<MLPH_Tensor> outputs) {
    core::check(api_->eval_step(model_, inputs.data(), inputs.size(), outputs.data(), outputs.size()));
  }
  std::vector<float> read(size_t index, const MLPH_Value& v, bool gradient = false) {
    std::vector<float> out(size_t(sdk::numel(v)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, out.data());
    core::check(gradient ? api_->read_gradient(model_, index, &t) : api_->read_parameter(model_, index, &t));
    return out;
  }
  void write(size_t index, const MLPH_Value& v, std::vector<float> values) {
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    core::check(api_->write_parameter(model_, index, &t));
  }

 private:
  const MLPH_BackendApi* api_;
  MLPH_Backend* backend_ = nullptr;
  MLPH_Model* model_ = nullptr;
};

inline const MLPH_BackendApi* onednn() { return sdk::backend_api<OnednnBackend>(); }
inline const MLPH_BackendApi* reference() { return sdk::backend_api<reference::ReferenceBackend>(); }

// Largest |a - b| / (tolerance_floor + |b|) over the elements.
inline double worst_relative(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / (floor + std::fabs(double(b[i]))));
  return worst;
}

// ||a - b|| / ||b||: gradients are sums with cancellation, so single elements near zero carry
// large relative rounding while the vector as a whole agrees.
inline double norm_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::pow(double(a[i]) - b[i], 2), ref += std::pow(double(b[i]), 2);
  return std::sqrt(diff / std::max(ref, 1e-30));
}

// A graph under construction: trainable tensors, a chain of ops, mse against a target input.
class Small {
 public:
  int32_t param(const std::string& name, std::vector<int64_t> shape, float scale = 0.5f, double weight_decay = 1.0,
                uint32_t flags = MLPH_PARAM_TRAINABLE) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
    g.parameter(v, random_floats(size_t(count(shape)), uint64_t(v) + 1, scale), 0.0, weight_decay, flags);
    return v;
  }
  int32_t constant(const std::string& name, std::vector<float> values) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, {int64_t(values.size())});
    g.parameter(v, std::move(values), 0.0, 0.0, 0);
    return v;
  }
  int32_t op(const std::string& op, std::vector<int32_t> inputs, std::vector<int64_t> shape,
             std::vector<sdk::AttrInit> attrs = {}) {
    const int32_t y = g.value(op + std::to_string(++ops_), MLPH_DTYPE_F32, std::move(shape));
    g.node(op, op + std::to_string(ops_), std::move(inputs), {y}, std::move(attrs));
    return y;
  }
  // Loss mse(out, target); `out` is also the eval output.
  const MLPH_Graph* finish(int32_t out, const std::string& optimizer = "sgd_keras",
                           std::vector<sdk::AttrInit> attrs = {{"momentum", 0.9}}) {
    const MLPH_Value info = g.value_info(out);
    const int32_t target = g.value("target", MLPH_DTYPE_F32, {info.shape, info.shape + info.ndim});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node("mse", "loss", {out, target}, {loss});
    inputs.push_back(target);
    g.inputs(inputs);
    g.loss(loss);
    g.eval_outputs({out});
    g.optimizer(optimizer, std::move(attrs));
    g.seed(5);
    return g.graph();
  }
  sdk::GraphBuilder g;
  std::vector<int32_t> inputs;

 private:
  static int64_t count(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int ops_ = 0;
};

// Random inputs for a graph's inputs (int16 counts, int32 labels in [0, classes), floats).
struct Inputs {
  std::vector<std::vector<char>> storage;
  std::vector<MLPH_Tensor> tensors;
  Inputs(const MLPH_Graph& g, uint64_t stream, int32_t classes = 3) {
    for (size_t i = 0; i < g.n_inputs; ++i) {
      const MLPH_Value& v = g.values[g.inputs[i]];
      const auto n = size_t(sdk::numel(v));
      auto& bytes = storage.emplace_back(n * mlph_dtype_size(v.dtype));
      for (size_t k = 0; k < n; ++k) {
        const float u = mlph_uniform(7, stream + i, 0, k);
        if (v.dtype == MLPH_DTYPE_I16) reinterpret_cast<int16_t*>(bytes.data())[k] = int16_t(u * 20);
        else if (v.dtype == MLPH_DTYPE_I32) reinterpret_cast<int32_t*>(bytes.data())[k] = int32_t(u * float(classes)) % classes;
        else reinterpret_cast<float*>(bytes.data())[k] = 2.0f * u - 1.0f;
      }
      tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, bytes.data()));
    }
  }
};

// Trains `steps` steps on both backends from the same weights; losses, gradients, weights and the
// first eval output must agree within `tolerance` (weights and outputs element-wise, relative with a
// floor for values near 0; gradients as whole vectors).
inline void expect_same_training(const MLPH_Graph* g, int steps, double lr, double tolerance, double floor = 1e-3,
                                 std::vector<MLPH_KeyValue> options = {{"threads", "2"}}) {
  Compiled ours(onednn(), g, std::move(options)), theirs(reference(), g);
  for (int s = 0; s < steps; ++s) {
    Inputs in(*g, uint64_t(100 * s));
    const double a = ours.train(in.tensors, lr, uint64_t(s)), b = theirs.train(in.tensors, lr, uint64_t(s));
    EXPECT_NEAR(a, b, tolerance * (floor + std::fabs(b))) << "loss at step " << s;
    for (size_t p = 0; p < g->n_params; ++p) {
      const MLPH_Value& v = g->values[g->params[p].value];
      if (g->params[p].flags & MLPH_PARAM_TRAINABLE) {
        EXPECT_LT(norm_relative(ours.read(p, v, true), theirs.read(p, v, true)), tolerance)
            << "gradient of " << v.name << " at step " << s;
      }
      EXPECT_LT(worst_relative(ours.read(p, v), theirs.read(p, v), floor), tolerance)
          << "parameter " << v.name << " after step " << s;
    }
  }
  if (g->n_eval_outputs) {
    Inputs in(*g, 999);
    const MLPH_Value& out = g->values[g->eval_outputs[0]];
    EXPECT_LT(worst_relative(ours.eval(in.tensors, out), theirs.eval(in.tensors, out), floor), tolerance);
  }
}

}  // namespace mlph::onednn::test
