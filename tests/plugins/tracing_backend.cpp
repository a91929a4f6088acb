// libmlph-backend-tracing.so: the reference backend that appends, for every train_step, one line
// "micro_step step apply_update learning_rate" to the file of option `trace`: what the runner asked
// for, for the tests of gradient accumulation and schedules. Option `step_seconds` makes every
// train_step last that much longer (signal tests: a long step). Other options go to the reference backend.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "backend.hpp"
#include "forwarding_model.hpp"
#include "mlph/sdk/backend.hpp"

namespace {

using namespace mlph;

class TracingModel final : public test::ForwardingModel {
 public:
  TracingModel(std::unique_ptr<sdk::Model> inner, std::string trace, double step_seconds)
      : ForwardingModel(std::move(inner)), trace_(std::move(trace)), step_seconds_(step_seconds) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    const sdk::StepPlan plan = sdk::read_step_args(args, "tracing backend");
    const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(trace_.c_str(), "a"), &std::fclose);
    if (!file) sdk::fail(MLPH_UNAVAILABLE, "tracing backend: cannot append to " + trace_);
    fmt::print(file.get(), "{} {} {} {}\n", plan.micro_step, plan.step, plan.apply_update ? 1 : 0, plan.learning_rate);
    std::fflush(file.get());
    ForwardingModel::train_step(inputs, n, args, out);
    std::this_thread::sleep_for(std::chrono::duration<double>(step_seconds_));
  }

 private:
  std::string trace_;
  double step_seconds_;
};

class TracingBackend final : public sdk::Backend {
 public:
  TracingBackend(const MLPH_HostApi* host, const sdk::Options& options)
      : reference_(host, options.without({"trace", "step_seconds"})),
        trace_(options.get("trace")),
        step_seconds_(options.has("step_seconds") ? options.get_number("step_seconds") : 0.0) {
    if (trace_.empty()) sdk::fail(MLPH_INVALID_ARGUMENT, "tracing backend: option 'trace' (a file) is required");
  }
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    return std::make_unique<TracingModel>(reference_.compile(graph, comms), trace_, step_seconds_);
  }

 private:
  reference::ReferenceBackend reference_;
  std::string trace_;
  double step_seconds_;
};

}  // namespace

#ifdef TRACING_ABI13
// Built a second time as libmlph-backend-tracing-abi13.so: the table as a 1.3 build has it, without the
// checkpoint state members 1.4 appended (the core must refuse --checkpoint-dir with it, in one line).
static const MLPH_BackendApi* abi13_table() {
  static const MLPH_BackendApi api = [] {
    MLPH_BackendApi a = *mlph::sdk::backend_api<TracingBackend>();
    a.struct_size = MLPH_STRUCT_SIZE(MLPH_BackendApi, read_gradient);
    return a;
  }();
  return &api;
}
extern "C" MLPH_EXPORT const MLPH_Plugin* mlph_plugin(void) {
  static const MLPH_Plugin descriptor = {sizeof(MLPH_Plugin), nullptr, MLPH_ABI_MAJOR, 3, MLPH_KIND_BACKEND,
                                         "tracing-abi13", "0.1.0", "test only: the tracing backend as an ABI 1.3 build",
                                         abi13_table()};
  return &descriptor;
}
#else
MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "tracing", "0.1.0",
                   "test only: the reference backend, tracing each train_step's arguments to a file",
                   mlph::sdk::backend_api<TracingBackend>())
#endif
