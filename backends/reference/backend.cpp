#include "backend.hpp"

#include "mlph/sdk/cpus.hpp"
#include "model.hpp"

namespace mlph::reference {

ReferenceBackend::ReferenceBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
  options.allow_only({"threads"}, "reference backend");
  const long long threads = options.get_int("threads", sdk::available_cpus());
  if (threads < 1 || threads > 4096)
    sdk::fail(MLPH_INVALID_ARGUMENT,
              "reference backend: option 'threads' must be in [1, 4096], got " + options.get("threads"));
  pool_ = std::make_shared<ThreadPool>(static_cast<unsigned>(threads));
}

std::unique_ptr<sdk::Model> ReferenceBackend::compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return std::make_unique<ReferenceModel>(host_, pool_, graph, comms);
}

}  // namespace mlph::reference
