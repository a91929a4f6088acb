// libmlph-backend-tracing.so: the reference backend that appends, for every train_step, one line
// "micro_step step apply_update learning_rate" to the file of option `trace`: what the runner asked
// for, for the tests of gradient accumulation and schedules. Option `losses` names a second file that
// gets "step <defer_loss>" for every train_step and "read" for every read_loss (ABI 1.6: how often the
// runner waits for a loss). Option `step_seconds` makes every train_step last that much longer (signal
// tests: a long step). Other options go to the reference backend.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "backend.hpp"
#include "forwarding_model.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace {

using namespace mlph;

// Appends one line to `path` (nothing for an empty path).
void append(const std::string& path, const std::string& line) {
  if (path.empty()) return;
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "a"), &std::fclose);
  if (!file) sdk::fail(MLPH_UNAVAILABLE, "tracing backend: cannot append to " + path);
  std::fputs((line + "\n").c_str(), file.get());
}

class TracingModel final : public test::ForwardingModel {
 public:
  TracingModel(std::unique_ptr<sdk::Model> inner, const MLPH_HostApi* host, std::string trace, std::string losses,
               double step_seconds)
      : ForwardingModel(std::move(inner)),
        host_(host),
        trace_(std::move(trace)),
        losses_(std::move(losses)),
        step_seconds_(step_seconds) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    const sdk::StepPlan plan = sdk::read_step_args(args, "tracing backend", host_);
    append(trace_, fmt::format("{} {} {} {}", plan.micro_step, plan.step, plan.apply_update ? 1 : 0, plan.learning_rate));
    append(losses_, fmt::format("step {}", plan.defer_loss ? 1 : 0));
    ForwardingModel::train_step(inputs, n, args, out);
    std::this_thread::sleep_for(std::chrono::duration<double>(step_seconds_));
  }
  std::optional<double> read_loss() override {
    append(losses_, "read");
    return ForwardingModel::read_loss();
  }

 private:
  const MLPH_HostApi* host_;
  std::string trace_, losses_;
  double step_seconds_;
};

class TracingBackend final : public sdk::Backend {
 public:
  TracingBackend(const MLPH_HostApi* host, const sdk::Options& options)
      : host_(host),
        reference_(host, options.without({"trace", "losses", "step_seconds"})),
        trace_(options.get("trace")),
        losses_(options.has("losses") ? options.get("losses") : ""),
        step_seconds_(options.has("step_seconds") ? options.get_number("step_seconds") : 0.0) {
    if (trace_.empty()) sdk::fail(MLPH_INVALID_ARGUMENT, "tracing backend: option 'trace' (a file) is required");
  }
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    return std::make_unique<TracingModel>(reference_.compile(graph, comms), host_, trace_, losses_, step_seconds_);
  }

 private:
  const MLPH_HostApi* host_;
  reference::ReferenceBackend reference_;
  std::string trace_, losses_;
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
