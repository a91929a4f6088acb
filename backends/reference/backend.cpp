#include "backend.hpp"

#include "mlph/sdk/host/executor.hpp"
#include "mlph/sdk/model/compute.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/sdk/util/cpus.hpp"
#include "ops.hpp"

namespace mlph::reference {

ReferenceBackend::ReferenceBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
  options.allow_only(sdk::with_compute_options({"threads"}), "reference backend");
  // fp32 only, and deterministic whether asked or not: bitwise repeatable for a fixed thread count.
  sdk::read_compute_settings(options, {sdk::Precision::fp32}, "reference backend");
  const long long threads = options.get_int("threads", sdk::available_cpus());
  if (threads < 1 || threads > 4096)
    sdk::fail(MLPH_INVALID_ARGUMENT,
              "reference backend: option 'threads' must be in [1, 4096], got " + options.get("threads"));
  pool_ = std::make_shared<ThreadPool>(static_cast<unsigned>(threads));
}

std::unique_ptr<sdk::Model> ReferenceBackend::compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return std::make_unique<sdk::host::Executor<Kernels>>(
      host_, comms, sdk::program::lower_graph(graph, sdk::program::implements()), "reference backend", Kernels{pool_, {}});
}

}  // namespace mlph::reference
