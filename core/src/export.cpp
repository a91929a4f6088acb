#include "mlph/core/export.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

#include "mlph/core/host.hpp"
#include "mlph/core/npz.hpp"
#include "mlph/core/tensor_bytes.hpp"
#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::core {
namespace {

struct Entry {
  std::string key;
  MLPH_ExportKind kind;
  std::vector<int64_t> shape;
  std::vector<int32_t> perm;
};

std::vector<Entry> entries_of(decltype(MLPH_WorkloadApi::reference_layout) layout, const ParameterValues& p) {
  if (p.shape.size() > MLPH_MAX_DIMS)
    throw std::runtime_error(fmt::format("exporting '{}': {} dims, more than the {} of a tensor", p.name, p.shape.size(),
                                         MLPH_MAX_DIMS));
  MLPH_Value value{};
  value.name = p.name.c_str();
  value.dtype = MLPH_DTYPE_F32;
  value.ndim = static_cast<int32_t>(p.shape.size());
  std::copy(p.shape.begin(), p.shape.end(), value.shape);
  std::vector<Entry> out;
  const auto emit = [](void* ctx, const MLPH_ExportEntry* e) {
    auto& list = *static_cast<std::vector<Entry>*>(ctx);
    const int32_t ndim = std::clamp(e->ndim, 0, MLPH_MAX_DIMS);
    list.push_back({e->key ? e->key : "", e->kind, {e->shape, e->shape + ndim}, {e->perm, e->perm + MLPH_MAX_DIMS}});
  };
  check(layout(host_api(), &value, emit, &out), "exporting '" + p.name + "'");
  for (Entry& e : out) e.perm.resize(e.kind == MLPH_EXPORT_TENSOR ? p.shape.size() : 0);  // the parameter's dims
  return out;
}

// reshape(transpose(x, perm), shape): checked, then the transpose (the reshape is free, row-major).
std::vector<float> arrange(const ParameterValues& p, const Entry& e) {
  const size_t n = p.shape.size();
  std::vector<int32_t> sorted = e.perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity)
    throw std::runtime_error(fmt::format("exporting '{}' as '{}': the permutation is not one of its {} dims", p.name, e.key, n));
  // Counted without overflow: the walk below stays inside p.data only when both shapes hold its values.
  const uint64_t values = p.data.size();
  if (tensor_bytes(p.shape, 1) != values)
    throw std::runtime_error(fmt::format("exporting '{}': its shape {} does not hold its {} values", p.name,
                                         sdk::shape_string(p.shape.data(), static_cast<int32_t>(n)), values));
  if (tensor_bytes(e.shape, 1) != values)
    throw std::runtime_error(fmt::format("exporting '{}' as '{}': shape {} does not hold its {} values", p.name, e.key,
                                         sdk::shape_string(e.shape.data(), static_cast<int32_t>(e.shape.size())), values));
  std::vector<int64_t> strides(n, 1);  // of the source, row-major
  for (size_t d = n; d-- > 1;) strides[d - 1] = strides[d] * p.shape[d];
  std::vector<int64_t> index(n, 0);  // over the transposed dims, last fastest
  std::vector<float> out(p.data.size());
  for (float& v : out) {
    int64_t source = 0;
    for (size_t i = 0; i < n; ++i) source += index[i] * strides[static_cast<size_t>(e.perm[i])];
    v = p.data[static_cast<size_t>(source)];
    for (size_t i = n; i-- > 0;) {
      if (++index[i] < p.shape[static_cast<size_t>(e.perm[i])]) break;
      index[i] = 0;
    }
  }
  return out;
}

}  // namespace

decltype(MLPH_WorkloadApi::reference_layout) reference_layout_of(const LoadedPlugin& workload) {
  const auto* api = workload.api<MLPH_WorkloadApi>();
  if (workload.descriptor->abi_minor < 4 || api->struct_size < MLPH_STRUCT_SIZE(MLPH_WorkloadApi, reference_layout))
    return nullptr;
  return api->reference_layout;
}

size_t export_weights(decltype(MLPH_WorkloadApi::reference_layout) layout, const std::vector<ParameterValues>& params,
                      uint64_t micro_batches, AtomicFile file) {
  NpzWriter npz(std::move(file));
  std::set<std::string> keys;
  for (const ParameterValues& p : params) {
    for (const Entry& e : entries_of(layout, p)) {
      if (!keys.insert(e.key).second)
        throw std::runtime_error(fmt::format("exporting '{}': the reference name '{}' is given twice", p.name, e.key));
      if (e.kind == MLPH_EXPORT_BATCH_COUNT) {
        const auto count = static_cast<int64_t>(micro_batches);
        npz.add(e.key, MLPH_DTYPE_I64, {}, &count);
      } else {
        npz.add(e.key, MLPH_DTYPE_F32, e.shape, arrange(p, e).data());
      }
    }
  }
  npz.finish();
  return keys.size();
}

}  // namespace mlph::core
