// DeepCAM's parameters under the reference's PyTorch state_dict keys (deeplab_xception.py,
// REFERENCE §2.10 "Parameter names"): every batch norm inside its GBN wrapper (`….bn.weight`,
// `….bn.running_mean`, and `….bn.num_batches_tracked`), nn.Sequential indices counting the ReLUs
// (`upsample.conv1.6.bias`, `xception_features.block20.rep.5.conv1.weight`), the trainable affine's
// `weights` and `bias` of shape (256, 1, 1); conv weights [C_out, C_in/groups, k, k], transposed-conv
// weights [C_in, C_out, k, k]. No `module.` prefix (that is DistributedDataParallel's wrapper).
#pragma once

#include <vector>

#include "mlph/sdk/workload/export.hpp"

namespace mlph::deepcam {

// ABI 1.4 MLPH_WorkloadApi.reference_layout: the entries of one parameter of the graph build_model
// makes; none for the input normalization (the reference normalizes in its data loader).
std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param);

}  // namespace mlph::deepcam
