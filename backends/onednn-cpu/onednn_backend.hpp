// The onednn-cpu backend: the op catalogue (docs/ops.md) on oneDNN primitives for CPUs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/model/compute.hpp"

namespace mlph::onednn {

struct BackendOptions {
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else the CPUs of the affinity mask: srun --cpu-bind)
  // `precision: bf16`: convolutions compute in bf16, and the activations between bf16-capable ops
  // (convs, pools, relus, batch norms) are stored in bf16 with their gradients; master weights,
  // optimizer state, statistics and losses stay fp32.
  bool bf16 = false;
  // Convs with fewer input channels are zero-padded to this many inside the backend (0: never);
  // option `pad_input_channels`, `auto` being 16 under bf16 on a CPU with AMX, else 0.
  int64_t pad_input_channels = 0;
};

class OnednnBackend final : public sdk::Backend {
 public:
  // Options: `threads`, and the shared `precision` (fp32 | bf16) and `deterministic` (mlph/sdk/model/compute.hpp).
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

// What a compiled model holds for its activations (values other than inputs and parameters):
// bytes of distinct buffers (aliases, such as a fused activation's output, once) and which are bf16.
struct ActivationMemory {
  size_t value_bytes = 0, gradient_bytes = 0;
  std::map<std::string, bool> bf16;  // by value name
};
ActivationMemory activation_memory(const sdk::Model& model);  // a model compile_model made
// The convs a model runs otherwise than as written, each as "node 'name' (conv): how": input
// channels zero-padded (BackendOptions::pad_input_channels), the backward over a dilated conv's phases.
std::vector<std::string> conv_rewrites(const sdk::Model& model);

}  // namespace mlph::onednn
