// The cuda backend (libmlph-backend-cuda.so): binds one CUDA device at create (local rank % devices,
// or the `device` option), reports it, gives the core pinned input buffers, and compiles models on it
// (model_impl.hpp). Options: settings.hpp. No CUDA header here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mlph/sdk/model/backend.hpp"
#include "settings.hpp"

namespace mlph::cuda {

class CudaBackend final : public sdk::Backend {
 public:
  // Throws one line for an unknown or bad option, or without a usable device:
  //   cuda backend: no CUDA device: cudaGetDeviceCount: ... (cudaErrorInsufficientDriver)
  explicit CudaBackend(const sdk::BackendContext& context);

  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override;
  sdk::DeviceAttributes attributes() const override;

  // Pinned host memory for the input batches (cudaHostAlloc), which the device copies asynchronously.
  void* alloc_input(size_t bytes);
  void free_input(void* data);

 private:
  const MLPH_HostApi* host_;
  Settings settings_;
  int device_ = 0, devices_ = 0;
  std::string name_;
  uint64_t memory_bytes_ = 0;
};

}  // namespace mlph::cuda
