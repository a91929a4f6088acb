// CosmoFlow's parameters as the PyTorch port names them (NVIDIA's model/cosmoflow.py, REFERENCE
// §1.8; the MLCommons reference is Keras): conv_seq.<i>.conv.{weight,bias} with weights
// [C_out, C_in, k, k, k], dense1, dense2 and output as Linear layers with weights [out, in].
#pragma once

#include <vector>

#include "mlph/sdk/workload/export.hpp"

namespace mlph::cosmoflow {

// ABI 1.4 MLPH_WorkloadApi.reference_layout: one entry per parameter of the graph build_model makes.
std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param);

}  // namespace mlph::cosmoflow
