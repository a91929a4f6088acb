// Trained weights for PyTorch (--export-weights, mlph-export): every parameter under the reference
// implementation's name and in its layout, as the workload's reference_layout (ABI 1.4) says, in an
// .npz (see npz.hpp for the three lines that load it into a PyTorch model).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/workload.h"

namespace mlph::core {

// One graph parameter's values, as read from a model or a checkpoint.
struct ParameterValues {
  std::string name;  // the graph value's name
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The workload's reference_layout, or null when it has none (older than ABI 1.4, or it cannot say).
decltype(MLPH_WorkloadApi::reference_layout) reference_layout_of(const LoadedPlugin& workload);

// Writes the reference's tensors of `params` to `file` (made beforehand: a run reserves its export
// before it starts); `micro_batches` fills the batch counters (PyTorch BatchNorm's
// num_batches_tracked). Returns how many arrays it wrote. Throws std::runtime_error naming the
// parameter when the workload does not know one, or when a shape does not hold its values.
size_t export_weights(decltype(MLPH_WorkloadApi::reference_layout) layout, const std::vector<ParameterValues>& params,
                      uint64_t micro_batches, AtomicFile file);

}  // namespace mlph::core
