#include "backend.hpp"

#include "model.hpp"
#include "runtime/cuda.hpp"

namespace mlph::cuda {

CudaBackend::CudaBackend(const sdk::BackendContext& context)
    : host_(context.host), settings_(read_settings(context.options)) {
  devices_ = runtime::device_count();
  device_ = select_device(settings_, context.topology, devices_);
  const runtime::DeviceInfo info = runtime::bind_device(device_, devices_);
  name_ = info.name;
  memory_bytes_ = info.memory_bytes;
}

std::unique_ptr<sdk::Model> CudaBackend::compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) {
  return compile_model(graph, comms, {host_, settings_, device_, name_});
}

sdk::DeviceAttributes CudaBackend::attributes() const {
  sdk::DeviceAttributes a;
  a.device = {MLPH_DEVICE_CUDA, device_};
  a.device_name = name_;
  a.devices_per_node = devices_;
  a.device_memory_bytes = memory_bytes_;
  a.precision = sdk::precision_name(settings_.compute.precision);
  a.deterministic = settings_.compute.deterministic;
  return a;
}

void* CudaBackend::alloc_input(size_t bytes) {
  const runtime::Context where = runtime::Context::for_device(device_, name_);
  runtime::use_device(where, device_);
  void* data = nullptr;
  runtime::check(where, cudaHostAlloc(&data, bytes ? bytes : 1, cudaHostAllocDefault), "cudaHostAlloc",
                 "input batches (" + runtime::gib(bytes) + ")");
  return data;
}

void CudaBackend::free_input(void* data) { cudaFreeHost(data); }

}  // namespace mlph::cuda
