// libmlph-backend-faulty.so: the reference backend with one deliberate, small error, for the
// conformance tests: in graphs that contain op `fault_op`, it scales either every evaluation output
// (`fault=forward`, the default) or every gradient it reports (`fault=gradient`) by 1 + 1e-3, or
// ignores gradient accumulation, updating on every micro-batch (`fault=accumulation`); or it does
// not implement `fault_op`: compile refuses such graphs (`fault=unimplemented`, as docs/ops.md asks),
// or compiles them and then refuses every train_step (`fault=unimplemented_step`, as it must not); or
// it words the compile errors of every graph its own way (`fault=validation`, a backend with its own checks);
// or it saves its training state but restores none of it (`fault=state`: write_state does nothing); or
// it reports itself not deterministic even with backend.deterministic=1 (`fault=nondeterministic`); or
// it reports every parameter one ulp further from zero than it holds (`fault=rounding`: what an FMA
// or a gradient off in its last bits does to an updated parameter, which conformance must tolerate).
// Other options (threads, the shared precision and deterministic) go to the reference backend.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend.hpp"
#include "forwarding_model.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace {

using namespace mlph;

constexpr float kError = 1.001f;

void perturb(MLPH_Tensor& t) {
  if (t.dtype != MLPH_DTYPE_F32) return;
  float* data = static_cast<float*>(t.data);
  std::for_each(data, data + sdk::numel(t), [](float& x) { x *= kError; });
}

class FaultyModel final : public test::ForwardingModel {
 public:
  FaultyModel(std::unique_ptr<sdk::Model> inner, bool forward, bool gradient, bool accumulation, bool refuse_steps,
              bool forget_state, bool rounding)
      : ForwardingModel(std::move(inner)),
        forward_(forward),
        gradient_(gradient),
        accumulation_(accumulation),
        refuse_steps_(refuse_steps),
        forget_state_(forget_state),
        rounding_(rounding) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    if (refuse_steps_)
      sdk::fail(MLPH_UNIMPLEMENTED, "faulty backend: train_step is not implemented (fault=unimplemented_step)");
    MLPH_StepArgs every = args;
    every.apply_update = 1;
    ForwardingModel::train_step(inputs, n, accumulation_ ? every : args, out);
  }
  void eval_step(const MLPH_Tensor* inputs, size_t n, MLPH_Tensor* outputs, size_t n_outputs) override {
    ForwardingModel::eval_step(inputs, n, outputs, n_outputs);
    for (size_t i = 0; forward_ && i < n_outputs; ++i) perturb(outputs[i]);
  }
  void read_gradient(size_t index, MLPH_Tensor& dst) override {
    ForwardingModel::read_gradient(index, dst);
    if (gradient_) perturb(dst);
  }
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) override {
    if (!forget_state_) ForwardingModel::write_state(index, slot, src);
  }
  void read_parameter(size_t index, MLPH_Tensor& dst) override {
    ForwardingModel::read_parameter(index, dst);
    if (!rounding_ || dst.dtype != MLPH_DTYPE_F32) return;
    float* data = static_cast<float*>(dst.data);
    std::for_each(data, data + sdk::numel(dst), [](float& x) {
      x = std::nextafter(x, std::copysign(std::numeric_limits<float>::infinity(), x));
    });
  }

 private:
  bool forward_, gradient_, accumulation_, refuse_steps_, forget_state_, rounding_;
};

class FaultyBackend final : public sdk::Backend {
 public:
  FaultyBackend(const MLPH_HostApi* host, const sdk::Options& options)
      : reference_(host, options.without({"fault", "fault_op"})),
        fault_(options.get("fault", "forward")),
        fault_op_(options.get("fault_op")) {
    if (fault_op_.empty()) sdk::fail(MLPH_INVALID_ARGUMENT, "faulty backend: option 'fault_op' (an op name) is required");
    if (fault_ != "forward" && fault_ != "gradient" && fault_ != "accumulation" && fault_ != "unimplemented" &&
        fault_ != "unimplemented_step" && fault_ != "validation" && fault_ != "state" && fault_ != "nondeterministic" &&
        fault_ != "rounding")
      sdk::fail(MLPH_INVALID_ARGUMENT, "faulty backend: option 'fault' must be forward, gradient, accumulation, "
                                       "unimplemented, unimplemented_step, validation, state, nondeterministic or "
                                       "rounding");
  }

  sdk::DeviceAttributes attributes() const override {
    sdk::DeviceAttributes a = reference_.attributes();
    a.deterministic = fault_ != "nondeterministic";
    return a;
  }

  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    if (fault_ == "validation") {
      try {
        return reference_.compile(graph, comms);
      } catch (const sdk::Error& e) {
        sdk::fail(e.code(), std::string("faulty backend: ") + e.what());
      }
    }
    bool has_op = false;
    for (size_t i = 0; i < graph.n_nodes; ++i) has_op = has_op || fault_op_ == graph.nodes[i].op;
    if (has_op && fault_ == "unimplemented")
      sdk::fail(MLPH_UNIMPLEMENTED, "faulty backend: op '" + fault_op_ + "' is not implemented (fault=unimplemented)");
    return std::make_unique<FaultyModel>(reference_.compile(graph, comms), has_op && fault_ == "forward",
                                         has_op && fault_ == "gradient", has_op && fault_ == "accumulation",
                                         has_op && fault_ == "unimplemented_step", has_op && fault_ == "state",
                                         has_op && fault_ == "rounding");
  }

 private:
  reference::ReferenceBackend reference_;
  std::string fault_, fault_op_;
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "faulty", "0.1.0",
                   "test only: the reference backend with a 1e-3 relative error in one op's outputs or gradients",
                   mlph::sdk::backend_api<FaultyBackend>())
