// Write a backend as C++ classes; `backend_api<Impl>()` generates the C table.
//   class MyBackend : public mlph::sdk::Backend {
//    public:
//     MyBackend(const MLPH_HostApi* host, const mlph::sdk::Options& options);
//     std::unique_ptr<mlph::sdk::Model> compile(const MLPH_Graph&, const MLPH_CommsHandle*) override;
//   };
//   MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "mine", "1.0", "...", mlph::sdk::backend_api<MyBackend>())
#pragma once

#include <memory>
#include <string>

#include "mlph/backend.h"
#include "mlph/sdk/error.hpp"
#include "mlph/sdk/options.hpp"
#include "mlph/sdk/plugin.hpp"

namespace mlph::sdk {

// The arguments of one train_step. `micro_step` counts micro-batches (the counter of in-graph
// randomness); the update is applied on the last micro-batch of each accumulation window.
inline MLPH_StepArgs step_args(double learning_rate, uint64_t step, uint64_t micro_step, bool apply_update) {
  MLPH_StepArgs args{};
  args.struct_size = sizeof args;
  args.learning_rate = learning_rate;
  args.step = step;
  args.micro_step = micro_step;
  args.apply_update = apply_update ? 1 : 0;
  return args;
}
// One micro-batch per update: the step of ABI 1.0/1.1.
inline MLPH_StepArgs step_args(double learning_rate, uint64_t step) { return step_args(learning_rate, step, step, true); }

// What a backend reads from MLPH_StepArgs, with ABI 1.2's members defaulted for older callers.
struct StepPlan {
  double learning_rate;
  uint64_t step, micro_step;
  bool apply_update;
};
inline StepPlan read_step_args(const MLPH_StepArgs& args, const std::string& who) {
  if (args.struct_size < MLPH_STRUCT_SIZE(MLPH_StepArgs, step))
    throw Error(MLPH_INVALID_ARGUMENT, who + ": MLPH_StepArgs is too small (an older ABI?)");
  if (args.struct_size < MLPH_STRUCT_SIZE(MLPH_StepArgs, apply_update))
    return {args.learning_rate, args.step, args.step, true};
  return {args.learning_rate, args.step, args.micro_step, args.apply_update != 0};
}

class Model {
 public:
  virtual ~Model() = default;
  virtual void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                          MLPH_StepResult& out) = 0;
  virtual void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) = 0;
  virtual void read_parameter(size_t index, MLPH_Tensor& dst) = 0;
  virtual void write_parameter(size_t index, const MLPH_Tensor& src) = 0;
  virtual void read_gradient(size_t index, MLPH_Tensor& dst) = 0;
  // ABI 1.4, checkpoints: state slot `slot` of parameter `index` (MLPH_BackendApi.read_state: the
  // optimizer's "velocity", "m", "v" and "pending_gradient"). A backend that keeps no state beyond
  // its parameters leaves these alone; checkpoints then say in one line that it cannot save any.
  virtual void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst);
  virtual void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src);
};

inline void Model::read_state(size_t, const std::string& slot, MLPH_Tensor&) {
  fail(MLPH_UNIMPLEMENTED, "this backend does not save its training state (state slot '" + slot + "')");
}
inline void Model::write_state(size_t, const std::string& slot, const MLPH_Tensor&) {
  fail(MLPH_UNIMPLEMENTED, "this backend does not restore its training state (state slot '" + slot + "')");
}

// The state slots of a checkpoint (MLPH_BackendApi.read_state): this rank's open accumulation window.
inline constexpr const char* kPendingGradientSlot = "pending_gradient";

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) = 0;
};

namespace detail {
using BackendBox = Boxed<Backend>;
using ModelBox = Boxed<Model>;
inline BackendBox* unbox(MLPH_Backend* b) { return reinterpret_cast<BackendBox*>(b); }
inline ModelBox* unbox(MLPH_Model* m) { return reinterpret_cast<ModelBox*>(m); }
}  // namespace detail

template <class Impl>
const MLPH_BackendApi* backend_api() {
  using namespace detail;
  static const MLPH_BackendApi api = {
      sizeof(MLPH_BackendApi),
      nullptr,
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Backend** out) {
        return guard(host, [&] {
          auto box = std::make_unique<BackendBox>(BackendBox{host, std::make_unique<Impl>(host, Options(kv, n))});
          *out = reinterpret_cast<MLPH_Backend*>(box.release());
        });
      },
      [](MLPH_Backend* b) { delete unbox(b); },
      [](MLPH_Backend* b, const MLPH_Graph* graph, const MLPH_CommsHandle* comms, MLPH_Model** out) {
        BackendBox* box = unbox(b);
        return guard(box->host, [&] {
          auto model = std::make_unique<ModelBox>(ModelBox{box->host, box->impl->compile(*graph, comms)});
          *out = reinterpret_cast<MLPH_Model*>(model.release());
        });
      },
      [](MLPH_Model* m) { delete unbox(m); },
      [](MLPH_Model* m, const MLPH_Tensor* in, size_t n, const MLPH_StepArgs* args, MLPH_StepResult* out) {
        return guard(unbox(m)->host, [&] {
          MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
          unbox(m)->impl->train_step(in, n, *args, result);
          *out = result;
        });
      },
      [](MLPH_Model* m, const MLPH_Tensor* in, size_t n, MLPH_Tensor* outs, size_t n_out) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->eval_step(in, n, outs, n_out); });
      },
      [](MLPH_Model* m, size_t i, MLPH_Tensor* dst) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->read_parameter(i, *dst); });
      },
      [](MLPH_Model* m, size_t i, const MLPH_Tensor* src) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->write_parameter(i, *src); });
      },
      [](MLPH_Model* m, size_t i, MLPH_Tensor* dst) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->read_gradient(i, *dst); });
      },
      [](MLPH_Model* m, size_t i, const char* slot, MLPH_Tensor* dst) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->read_state(i, slot, *dst); });
      },
      [](MLPH_Model* m, size_t i, const char* slot, const MLPH_Tensor* src) {
        return guard(unbox(m)->host, [&] { unbox(m)->impl->write_state(i, slot, *src); });
      },
  };
  return &api;
}

}  // namespace mlph::sdk
