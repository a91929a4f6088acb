// Write a backend as C++ classes; `backend_api<Impl>()` generates the C table.
//   class MyBackend : public mlph::sdk::Backend {
//    public:
//     explicit MyBackend(const mlph::sdk::BackendContext& context);  // or (const MLPH_HostApi*, const Options&)
//     std::unique_ptr<mlph::sdk::Model> compile(const MLPH_Graph&, const MLPH_CommsHandle*) override;
//   };
//   MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "mine", "1.0", "...", mlph::sdk::backend_api<MyBackend>())
// A backend with its own input memory (pinned host memory) also has `void* alloc_input(size_t bytes)`
// and `void free_input(void*)`; the table then offers them (ABI 1.6).
#pragma once

#include <cmath>
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "mlph/backend.h"
#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/options.hpp"
#include "mlph/sdk/util/plugin.hpp"

namespace mlph::sdk {

// The arguments of one train_step. `micro_step` counts micro-batches (the counter of in-graph
// randomness); the update is applied on the last micro-batch of each accumulation window.
// `defer_loss`: the caller reads the loss later (read_loss), so the backend need not wait for the step.
inline MLPH_StepArgs step_args(double learning_rate, uint64_t step, uint64_t micro_step, bool apply_update,
                               bool defer_loss = false) {
  MLPH_StepArgs args{};
  args.struct_size = sizeof args;
  args.learning_rate = learning_rate;
  args.step = step;
  args.micro_step = micro_step;
  args.apply_update = apply_update ? 1 : 0;
  args.defer_loss = defer_loss ? 1 : 0;
  return args;
}
// One micro-batch per update: the step of ABI 1.0/1.1.
inline MLPH_StepArgs step_args(double learning_rate, uint64_t step) { return step_args(learning_rate, step, step, true); }

// What a backend reads from MLPH_StepArgs, with ABI 1.2's members defaulted for older callers.
struct StepPlan {
  double learning_rate;
  uint64_t step, micro_step;
  bool apply_update;
  bool defer_loss = false;  // ABI 1.6: the loss is read later (read_loss)
};
// `host`: the core's services, whose ABI minor says whether `defer_loss` (in 1.2's trailing padding)
// was written; without it the loss is never deferred.
inline StepPlan read_step_args(const MLPH_StepArgs& args, const std::string& who, const MLPH_HostApi* host = nullptr) {
  if (args.struct_size < MLPH_STRUCT_SIZE(MLPH_StepArgs, step))
    throw Error(MLPH_INVALID_ARGUMENT, who + ": MLPH_StepArgs is too small (an older ABI?)");
  if (args.struct_size < MLPH_STRUCT_SIZE(MLPH_StepArgs, apply_update))
    return {args.learning_rate, args.step, args.step, true};
  const bool core_knows_defer = host && host->abi_major == MLPH_ABI_MAJOR && host->abi_minor >= 6 &&
                                args.struct_size >= MLPH_STRUCT_SIZE(MLPH_StepArgs, defer_loss);
  return {args.learning_rate, args.step, args.micro_step, args.apply_update != 0,
          core_knows_defer && args.defer_loss != 0};
}

// Where a backend runs in the job (ABI 1.6 `create_with`): its rank and local rank pick its device.
// Created through ABI 1.0's `create` (an older core), the topology is that of one rank.
struct BackendContext {
  const MLPH_HostApi* host;
  Options options;
  MLPH_Topology topology;
};

inline MLPH_Topology single_rank_topology() {
  MLPH_Topology t{};
  t.struct_size = sizeof t;
  t.size = t.local_size = t.nodes = 1;
  return t;
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
  // ABI 1.6: the loss of the last train_step, waiting for it (a backend that may defer the loss). A
  // backend whose train_step always returns the loss leaves this alone: the SDK keeps that loss.
  virtual std::optional<double> read_loss() { return std::nullopt; }
};

inline void Model::read_state(size_t, const std::string& slot, MLPH_Tensor&) {
  fail(MLPH_UNIMPLEMENTED, "this backend does not save its training state (state slot '" + slot + "')");
}
inline void Model::write_state(size_t, const std::string& slot, const MLPH_Tensor&) {
  fail(MLPH_UNIMPLEMENTED, "this backend does not restore its training state (state slot '" + slot + "')");
}

// The state slots of a checkpoint (MLPH_BackendApi.read_state): this rank's open accumulation window.
inline constexpr const char* kPendingGradientSlot = "pending_gradient";

// What a backend reports of its device (MLPH_BackendAttributes), for the log and the system description.
struct DeviceAttributes {
  MLPH_Device device{MLPH_DEVICE_HOST, 0};
  std::string device_name;  // empty: the core names the host's CPU
  int32_t devices_per_node = 0;
  uint64_t device_memory_bytes = 0;
  std::string precision = "fp32";
  bool deterministic = true;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) = 0;
  // ABI 1.6: the device the models run on. The default is a CPU backend computing in fp32, deterministic.
  virtual DeviceAttributes attributes() const { return {}; }
};

namespace detail {
using BackendBox = Boxed<Backend>;
struct BackendHandle {  // what MLPH_Backend* points to: the box, and the strings attributes() lent out
  BackendBox box;
  DeviceAttributes reported;
};
struct ModelHandle {  // what MLPH_Model* points to
  Boxed<Model> box;
  std::optional<double> last_loss;  // what the last train_step returned, for read_loss
};
inline BackendHandle* unbox(MLPH_Backend* b) { return reinterpret_cast<BackendHandle*>(b); }
inline ModelHandle* unbox(MLPH_Model* m) { return reinterpret_cast<ModelHandle*>(m); }

template <class Impl>
concept HasInputAllocator = requires(Impl& backend, size_t bytes, void* data) {
  { backend.alloc_input(bytes) } -> std::same_as<void*>;
  backend.free_input(data);
};

template <class Impl>
std::unique_ptr<Backend> make_backend(const BackendContext& context) {
  if constexpr (std::is_constructible_v<Impl, const BackendContext&>)
    return std::make_unique<Impl>(context);
  else
    return std::make_unique<Impl>(context.host, context.options);
}

inline MLPH_Error* create_backend(const MLPH_HostApi* host, std::unique_ptr<Backend> (*make)(const BackendContext&),
                                  const BackendContext& context, MLPH_Backend** out) {
  return guard(host, [&] {
    auto handle = std::make_unique<BackendHandle>(BackendHandle{BackendBox{host, make(context)}, {}});
    *out = reinterpret_cast<MLPH_Backend*>(handle.release());
  });
}

// Fills the caller's MLPH_BackendAttributes up to its struct_size.
inline void report_attributes(BackendHandle& handle, MLPH_BackendAttributes& out) {
  if (out.struct_size < MLPH_STRUCT_SIZE(MLPH_BackendAttributes, deterministic))
    fail(MLPH_INVALID_ARGUMENT, "MLPH_BackendAttributes is too small (an older ABI?)");
  handle.reported = handle.box.impl->attributes();
  const DeviceAttributes& a = handle.reported;
  out.ext = nullptr;
  out.device = a.device;
  out.device_name = a.device_name.empty() ? nullptr : a.device_name.c_str();
  out.devices_per_node = a.devices_per_node;
  out.device_memory_bytes = a.device_memory_bytes;
  out.precision = a.precision.c_str();
  out.deterministic = a.deterministic ? 1 : 0;
}
}  // namespace detail

namespace detail {
using AllocInputFn = decltype(MLPH_BackendApi::alloc_input);
using FreeInputFn = decltype(MLPH_BackendApi::free_input);
template <class Impl>
AllocInputFn alloc_input_member() {
  if constexpr (HasInputAllocator<Impl>) {
    return [](MLPH_Backend* b, size_t bytes, void** out) {
      BackendHandle& handle = *unbox(b);
      return guard(handle.box.host, [&] { *out = static_cast<Impl&>(*handle.box.impl).alloc_input(bytes); });
    };
  } else {
    return nullptr;
  }
}
template <class Impl>
FreeInputFn free_input_member() {
  if constexpr (HasInputAllocator<Impl>) {
    return [](MLPH_Backend* b, void* data) {
      if (data) static_cast<Impl&>(*unbox(b)->box.impl).free_input(data);
    };
  } else {
    return nullptr;
  }
}
}  // namespace detail

template <class Impl>
const MLPH_BackendApi* backend_api() {
  using namespace detail;
  static const MLPH_BackendApi api = {
      sizeof(MLPH_BackendApi),
      nullptr,
      [](const MLPH_HostApi* host, const MLPH_KeyValue* kv, size_t n, MLPH_Backend** out) {
        return create_backend(host, make_backend<Impl>, BackendContext{host, Options(kv, n), single_rank_topology()},
                              out);
      },
      [](MLPH_Backend* b) { delete unbox(b); },
      [](MLPH_Backend* b, const MLPH_Graph* graph, const MLPH_CommsHandle* comms, MLPH_Model** out) {
        BackendBox& box = unbox(b)->box;
        return guard(box.host, [&] {
          auto model = std::make_unique<ModelHandle>(ModelHandle{{box.host, box.impl->compile(*graph, comms)}, {}});
          *out = reinterpret_cast<MLPH_Model*>(model.release());
        });
      },
      [](MLPH_Model* m) { delete unbox(m); },
      [](MLPH_Model* m, const MLPH_Tensor* in, size_t n, const MLPH_StepArgs* args, MLPH_StepResult* out) {
        ModelHandle& handle = *unbox(m);
        return guard(handle.box.host, [&] {
          MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, std::nan("")};
          handle.last_loss.reset();
          handle.box.impl->train_step(in, n, *args, result);
          handle.last_loss = result.loss;
          *out = result;
        });
      },
      [](MLPH_Model* m, const MLPH_Tensor* in, size_t n, MLPH_Tensor* outs, size_t n_out) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->eval_step(in, n, outs, n_out); });
      },
      [](MLPH_Model* m, size_t i, MLPH_Tensor* dst) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->read_parameter(i, *dst); });
      },
      [](MLPH_Model* m, size_t i, const MLPH_Tensor* src) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->write_parameter(i, *src); });
      },
      [](MLPH_Model* m, size_t i, MLPH_Tensor* dst) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->read_gradient(i, *dst); });
      },
      [](MLPH_Model* m, size_t i, const char* slot, MLPH_Tensor* dst) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->read_state(i, slot, *dst); });
      },
      [](MLPH_Model* m, size_t i, const char* slot, const MLPH_Tensor* src) {
        const Boxed<Model>& box = unbox(m)->box;
        return guard(box.host, [&] { box.impl->write_state(i, slot, *src); });
      },
      // ABI 1.6
      [](const MLPH_BackendCreateArgs* args, MLPH_Backend** out) -> MLPH_Error* {
        if (args->struct_size < MLPH_STRUCT_SIZE(MLPH_BackendCreateArgs, topology))
          return args->host->error_new(MLPH_INVALID_ARGUMENT, "MLPH_BackendCreateArgs is too small (an older ABI?)");
        return create_backend(args->host, make_backend<Impl>,
                              BackendContext{args->host, Options(args->options, args->n_options), args->topology},
                              out);
      },
      [](MLPH_Backend* b, MLPH_BackendAttributes* out) {
        BackendHandle& handle = *unbox(b);
        return guard(handle.box.host, [&] { report_attributes(handle, *out); });
      },
      alloc_input_member<Impl>(),
      free_input_member<Impl>(),
      [](MLPH_Model* m, double* loss) {
        ModelHandle& handle = *unbox(m);
        return guard(handle.box.host, [&] {
          std::optional<double> value = handle.box.impl->read_loss();
          if (!value) value = handle.last_loss;
          if (!value) fail(MLPH_FAILED_PRECONDITION, "read_loss: no training step has run");
          *loss = *value;
        });
      },
  };
  return &api;
}

}  // namespace mlph::sdk
