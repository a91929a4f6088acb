// Shared helpers of the reference backend's tests: deterministic data, and the backend driven
// through its generated C table with the core's host services (as the runner drives a plug-in).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::reference::test {

// Uniform in [-scale, scale), deterministic per stream.
inline std::vector<float> random_floats(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.0f * mlph_uniform(1234, stream, 0, i) - 1.0f);
  return v;
}

// An error a call returned: its code and message, the error freed.
struct CallResult {
  MLPH_Code code = MLPH_OK;
  std::string message;
};
inline CallResult result_of(MLPH_Error* error) {
  if (!error) return {};
  CallResult r{core::error_code(error), core::error_message(error)};
  core::error_free(error);
  return r;
}

inline const MLPH_BackendApi* api() { return sdk::backend_api<ReferenceBackend>(); }

// A backend and one compiled model through the C table; both destroyed in the ABI's order.
class Compiled {
 public:
  explicit Compiled(const MLPH_Graph* graph, const MLPH_CommsHandle* comms = nullptr,
                    std::vector<MLPH_KeyValue> options = {{"threads", "2"}}) {
    MLPH_Backend* backend = nullptr;
    core::check(api()->create(core::host_api(), options.data(), options.size(), &backend));
    backend_.reset(backend);
    core::check(api()->compile(backend_.get(), graph, comms, &model_));
  }
  ~Compiled() { api()->model_destroy(model_); }  // before the backend
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;

  MLPH_Model* model() const { return model_; }

  double train(std::vector<MLPH_Tensor> inputs, double learning_rate, uint64_t step = 0) {
    const MLPH_StepArgs args = mlph::sdk::step_args(learning_rate, step);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    core::check(api()->train_step(model_, inputs.data(), inputs.size(), &args, &result));
    return result.loss;
  }
  std::vector<float> read_parameter(size_t index, const MLPH_Value& v) {
    std::vector<float> out(static_cast<size_t>(sdk::numel(v)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, out.data());
    core::check(api()->read_parameter(model_, index, &t));
    return out;
  }
  std::vector<float> read_gradient(size_t index, const MLPH_Value& v) {
    std::vector<float> out(static_cast<size_t>(sdk::numel(v)));
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, out.data());
    core::check(api()->read_gradient(model_, index, &t));
    return out;
  }
  void write_parameter(size_t index, const MLPH_Value& v, std::vector<float> values) {
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    core::check(api()->write_parameter(model_, index, &t));
  }

 private:
  struct DestroyBackend {
    void operator()(MLPH_Backend* b) const { api()->destroy(b); }
  };
  std::unique_ptr<MLPH_Backend, DestroyBackend> backend_;
  MLPH_Model* model_ = nullptr;
};

// A host tensor over `data` with value `v`'s dtype and shape.
template <class T>
MLPH_Tensor tensor_for(const MLPH_Value& v, std::vector<T>& data) {
  return sdk::host_tensor(v.dtype, v.shape, v.ndim, data.data());
}

}  // namespace mlph::reference::test
