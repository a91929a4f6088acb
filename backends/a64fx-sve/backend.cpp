// libmlph-backend-a64fx-sve.so: the op catalogue on SVE kernels, vector-length agnostic (A64FX,
// Graviton3, Grace...), OpenMP threads. Options: `threads` (default: OpenMP's, OMP_NUM_THREADS or
// every CPU of the process's affinity mask, as srun --cpu-bind sets it), and the shared `precision`
// (fp32 only) and `deterministic` (always: bitwise repeatable for a fixed thread count); anything
// else is MLPH_INVALID_ARGUMENT.
#include "mlph/sdk/util/plugin.hpp"

#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/model/compute.hpp"
#include "model.hpp"

namespace mlph::a64fx {
namespace {

class SveBackend final : public sdk::Backend {
 public:
  SveBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
    options.allow_only(sdk::with_compute_options({"threads"}), "a64fx-sve backend");
    sdk::read_compute_settings(options, {sdk::Precision::fp32}, "a64fx-sve backend");
    const long long threads = options.get_int("threads", 0);
    if (options.has("threads") && (threads < 1 || threads > 4096))
      sdk::fail(MLPH_INVALID_ARGUMENT, "a64fx-sve backend: option 'threads' must be in [1, 4096], got " + options.get("threads"));
    threads_.count = static_cast<int>(threads);
  }
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    return compile_model(host_, threads_, graph, comms);
  }

 private:
  const MLPH_HostApi* host_;
  Threads threads_;
};

}  // namespace
}  // namespace mlph::a64fx

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "a64fx-sve", "0.1.0",
                   "SVE kernels (vector-length agnostic, blocked for A64FX) with OpenMP threads, for Arm CPUs",
                   mlph::sdk::backend_api<mlph::a64fx::SveBackend>())
