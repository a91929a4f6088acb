// libmlph-backend-crashing.so: the reference backend that crashes in train_step number `at_step`
// (1-based) as option `crash` says: "segv" raises SIGSEGV, "stack_overflow" recurses until the stack
// runs out. For the tests of mlperf-run's crash handler (it must name the step, also when the stack
// is gone). Other options go to the reference backend.
#include <csignal>
#include <memory>
#include <string>

#include "backend.hpp"
#include "forwarding_model.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace {

using namespace mlph;

// Deeper and deeper, with a frame the compiler must keep; `until` is never reached.
[[gnu::noinline]] int recurse(volatile const char* above, long depth, long until) {
  volatile char frame[1024];
  frame[0] = above ? above[0] : 1;
  if (depth == until) return frame[0];
  return recurse(frame, depth + 1, until) + frame[0];
}

class CrashingModel final : public test::ForwardingModel {
 public:
  CrashingModel(std::unique_ptr<sdk::Model> inner, std::string crash, long at_step)
      : ForwardingModel(std::move(inner)), crash_(std::move(crash)), at_step_(at_step) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    if (++steps_ == at_step_) {
      if (crash_ == "segv") std::raise(SIGSEGV);
      if (crash_ == "stack_overflow") out.loss = recurse(nullptr, 0, -1);
    }
    ForwardingModel::train_step(inputs, n, args, out);
  }

 private:
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
