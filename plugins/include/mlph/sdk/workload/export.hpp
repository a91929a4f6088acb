// The reference implementation's names and layouts of a workload's parameters (ABI 1.4,
// MLPH_WorkloadApi.reference_layout), for exporting trained weights that the reference's PyTorch
// model loads as its state_dict. A workload's Impl provides
//   static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param);
// usually with the PyTorch helpers below.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/util/error.hpp"
#include "mlph/workload.h"

namespace mlph::sdk {

struct ExportEntry {
  std::string key;  // the reference's name
  MLPH_ExportKind kind = MLPH_EXPORT_TENSOR;
  std::vector<int64_t> shape;  // the reference's shape
  std::vector<int32_t> perm;   // TENSOR: dim i of the transpose is the parameter's dim perm[i]

  MLPH_ExportEntry to_c() const {
    MLPH_ExportEntry e{};
    e.struct_size = sizeof e;
    e.key = key.c_str();
    e.kind = kind;
    e.ndim = static_cast<int32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), e.shape);
    std::copy(perm.begin(), perm.end(), e.perm);
    return e;
  }
};

// The parameter as it is (a bias, a batch norm's vector), optionally reshaped to `shape` (same count).
inline ExportEntry torch_as_is(std::string key, const MLPH_Value& param, std::vector<int64_t> shape = {}) {
  std::vector<int32_t> perm(static_cast<size_t>(param.ndim));
  std::iota(perm.begin(), perm.end(), 0);
  if (shape.empty()) shape.assign(param.shape, param.shape + param.ndim);
  if (numel(shape.data(), static_cast<int32_t>(shape.size())) != numel(param))
    fail(MLPH_INTERNAL, key + ": the shape " + shape_string(shape.data(), static_cast<int32_t>(shape.size())) +
                            " does not hold the " + std::to_string(numel(param)) + " values of '" + param.name + "'");
  return {std::move(key), MLPH_EXPORT_TENSOR, std::move(shape), std::move(perm)};
}

// A conv weight [K..., Ci/groups, Co] (graph.h) as PyTorch's Conv{2,3}d weight [Co, Ci/groups, K...];
// a conv_transpose weight [K..., Co, Ci] likewise becomes ConvTranspose's [Ci, Co, K...].
inline ExportEntry torch_conv(std::string key, const MLPH_Value& param) {
  const int32_t n = param.ndim;
  if (n < 3) fail(MLPH_INTERNAL, key + ": '" + param.name + "' has no conv weight's rank");
  std::vector<int32_t> perm = {n - 1, n - 2};
  for (int32_t d = 0; d < n - 2; ++d) perm.push_back(d);
  std::vector<int64_t> shape;
  for (int32_t d : perm) shape.push_back(param.shape[d]);
  return {std::move(key), MLPH_EXPORT_TENSOR, std::move(shape), std::move(perm)};
}

// A dense weight [in, out] as PyTorch's Linear weight [out, in].
inline ExportEntry torch_linear(std::string key, const MLPH_Value& param) {
  if (param.ndim != 2) fail(MLPH_INTERNAL, key + ": '" + param.name + "' is not a dense weight [in, out]");
  return {std::move(key), MLPH_EXPORT_TENSOR, {param.shape[1], param.shape[0]}, {1, 0}};
}

// PyTorch BatchNorm's num_batches_tracked, an int64 scalar the reference keeps beside the statistics.
inline ExportEntry torch_batches_tracked(std::string key) { return {std::move(key), MLPH_EXPORT_BATCH_COUNT, {}, {}}; }

}  // namespace mlph::sdk
