// The reference backend's C++ face: sdk::backend_api<ReferenceBackend>() is its C table.
#pragma once

#include <memory>

#include "mlph/sdk/model/backend.hpp"
#include "thread_pool.hpp"

namespace mlph::reference {

class ReferenceBackend final : public sdk::Backend {
 public:
  // Options: `threads` (default: the CPUs this process may run on, sdk/util/cpus.hpp: what srun --cpu-bind
  // gave the task), and the shared `precision` (fp32 only) and
  // `deterministic` (mlph/sdk/model/compute.hpp). Anything else is MLPH_INVALID_ARGUMENT.
  ReferenceBackend(const MLPH_HostApi* host, const sdk::Options& options);
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override;

  unsigned threads() const { return pool_->size(); }

 private:
  const MLPH_HostApi* host_;
  std::shared_ptr<ThreadPool> pool_;  // shared with the models, which the ABI destroys before the backend anyway
};

}  // namespace mlph::reference
