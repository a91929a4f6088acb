// libmlph-backend-crashing.so: the reference backend that crashes in train_step number `at_step`
// (1-based) as option `crash` says: "segv" raises SIGSEGV, "stack_overflow" recurses until the stack
// runs out. For the tests of mlperf-run's crash handler (it must name the step, also when the stack
// is gone). Other options go to the reference backend.
#include <csignal>
#include <memory>
#include <string>

#include "backend.hpp"
#include "mlph/sdk/backend.hpp"

namespace {

using namespace mlph;

// Deeper and deeper, with a frame the compiler must keep; `until` is never reached.
[[gnu::noinline]] int recurse(volatile const char* above, long depth, long until) {
  volatile char frame[1024];
  frame[0] = above ? above[0] : 1;
  if (depth == until) return frame[0];
  return recurse(frame, depth + 1, until) + frame[0];
}

class CrashingModel final : public sdk::Model {
 public:
  CrashingModel(std::unique_ptr<sdk::Model> inner, std::string crash, long at_step)
      : inner_(std::move(inner)), crash_(std::move(crash)), at_step_(at_step) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    if (++steps_ == at_step_) {
      if (crash_ == "segv") std::raise(SIGSEGV);
      if (crash_ == "stack_overflow") out.loss = recurse(nullptr, 0, -1);
    }
    inner_->train_step(inputs, n, args, out);
  }
  void eval_step(const MLPH_Tensor* inputs, size_t n, MLPH_Tensor* outputs, size_t n_outputs) override {
    inner_->eval_step(inputs, n, outputs, n_outputs);
  }
  void read_parameter(size_t index, MLPH_Tensor& dst) override { inner_->read_parameter(index, dst); }
  void write_parameter(size_t index, const MLPH_Tensor& src) override { inner_->write_parameter(index, src); }
  void read_gradient(size_t index, MLPH_Tensor& dst) override { inner_->read_gradient(index, dst); }
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) override { inner_->read_state(index, slot, dst); }
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) override {
    inner_->write_state(index, slot, src);
  }

 private:
  std::unique_ptr<sdk::Model> inner_;
  std::string crash_;
  long at_step_, steps_ = 0;
};

class CrashingBackend final : public sdk::Backend {
 public:
  CrashingBackend(const MLPH_HostApi* host, const sdk::Options& options)
      : reference_(host, options.without({"crash", "at_step"})),
        crash_(options.get("crash")),
        at_step_(options.get_int("at_step", 1)) {
    if (crash_ != "segv" && crash_ != "stack_overflow")
      sdk::fail(MLPH_INVALID_ARGUMENT, "crashing backend: option 'crash' must be segv or stack_overflow");
  }
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    return std::make_unique<CrashingModel>(reference_.compile(graph, comms), crash_, at_step_);
  }

 private:
  reference::ReferenceBackend reference_;
  std::string crash_;
  long at_step_;
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "crashing", "0.1.0",
                   "test only: the reference backend, crashing in a chosen train_step", mlph::sdk::backend_api<CrashingBackend>())
