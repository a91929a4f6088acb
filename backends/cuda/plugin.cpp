// The cuda backend's entry point (backend.hpp).
#include "backend.hpp"
#include "mlph/sdk/model/backend.hpp"

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "cuda", "0.1.0",
                   "NVIDIA GPUs: cuDNN convolutions and batch norm, cuBLASLt dense, own kernels; CUDA graphs",
                   mlph::sdk::backend_api<mlph::cuda::CudaBackend>())
