// The onednn-cpu backend: the op catalogue (docs/ops.md) on oneDNN primitives for CPUs.
#pragma once

#include <memory>

#include "mlph/sdk/backend.hpp"
#include "mlph/sdk/compute.hpp"

namespace mlph::onednn {

struct BackendOptions {
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else the CPUs of the affinity mask: srun --cpu-bind)
  bool bf16 = false;  // `precision: bf16`: convolutions compute in bf16, everything else stays fp32
};

class OnednnBackend final : public sdk::Backend {
 public:
  // Options: `threads`, and the shared `precision` (fp32 | bf16) and `deterministic` (mlph/sdk/compute.hpp).
  // Anything else is MLPH_INVALID_ARGUMENT naming it.
  OnednnBackend(const MLPH_HostApi* host, const sdk::Options& options);
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override;
  // The host, in fp32 or bf16, deterministic (fixed thread count).
  sdk::DeviceAttributes attributes() const override;

 private:
  const MLPH_HostApi* host_;
  BackendOptions options_;
};

// For tests that link the backend directly.
std::unique_ptr<sdk::Model> compile_model(const MLPH_HostApi* host, const BackendOptions& options,
                                          const MLPH_Graph& graph, const MLPH_CommsHandle* comms);

}  // namespace mlph::onednn
