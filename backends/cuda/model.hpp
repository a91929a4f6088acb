// The cuda backend's compiled model (sdk::ModelProtocol): what the plug-in calls, without a CUDA
// header (model_impl.hpp has the class). model_impl.hpp's opening comment describes the model.
#pragma once

#include <memory>
#include <string>

#include "mlph/backend.h"
#include "mlph/sdk/model/backend.hpp"
#include "settings.hpp"

namespace mlph::cuda {

struct ModelSetup {
  const MLPH_HostApi* host = nullptr;
  Settings settings;
  int device = 0;           // the bound device (cudaSetDevice'd on every entry)
  std::string device_name;  // for error lines
};

// Compiles `graph` on the device; `comms` may be null (one rank) and outlives the model.
std::unique_ptr<sdk::Model> compile_model(const MLPH_Graph& graph, const MLPH_CommsHandle* comms, const ModelSetup& setup);

}  // namespace mlph::cuda
