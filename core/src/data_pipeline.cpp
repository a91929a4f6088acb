#include "mlph/core/data_pipeline.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "mlph/core/host.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::core {
namespace {

Batch make_batch(const MLPH_Graph& graph) {
  Batch batch;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    batch.buffers.emplace_back(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
  }
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    batch.tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, batch.buffers[i].data()));
  }
  return batch;
}

}  // namespace

std::vector<uint64_t> shuffled(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    const uint64_t j = mlph_mix64(state) % i;
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<uint64_t> epoch_order(const MLPH_WorkloadApi* api, MLPH_Workload* workload, uint32_t epoch, uint64_t n,
                                  uint64_t seed) {
  if (api->struct_size < MLPH_STRUCT_SIZE(MLPH_WorkloadApi, sample_order) || !api->sample_order)
    return shuffled(n, seed + epoch);
  std::vector<uint64_t> order(n);
  check(api->sample_order(workload, epoch, n, order.data()), "sample order");
  std::vector<bool> seen(n, false);
  for (uint64_t i : order) {
    if (i >= n || seen[i])
      throw std::runtime_error(
          fmt::format("the workload's sample order for epoch {} is not a permutation of {} samples", epoch + 1, n));
    seen[i] = true;
  }
  return order;
}

std::vector<uint64_t> deal(const std::vector<uint64_t>& order, const DataShard& s) {
  std::vector<uint64_t> mine;
  for (auto i = static_cast<uint64_t>(s.index); i < order.size(); i += static_cast<uint64_t>(s.count))
    mine.push_back(order[i]);
  return mine;
}

std::vector<uint64_t> shard(const std::vector<uint64_t>& order, const DataShard& s, uint32_t batch) {
  std::vector<uint64_t> mine = deal(order, s);
  mine.resize(order.size() / (static_cast<uint64_t>(batch) * static_cast<uint64_t>(s.count)) * batch);
  return mine;
}

PartOffsets part_offsets(const MLPH_Graph& graph, const std::vector<int32_t>& spatial_dims,
                         const sdk::spatial::Dims& grid, const sdk::spatial::Dims& coordinates) {
  if (spatial_dims.size() != graph.n_inputs)
    throw std::runtime_error(fmt::format("the workload states how {} inputs are split over the ranks of a sample, but "
                                         "its graph has {}",
                                         spatial_dims.size(), graph.n_inputs));
  PartOffsets offsets(graph.n_inputs * MLPH_MAX_DIMS, 0);
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const int32_t first = spatial_dims[i];
    if (first < 0) continue;
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    if (first < 1 || first + static_cast<int64_t>(grid.size()) > v.ndim)
      throw std::runtime_error(fmt::format("graph input '{}' {} cannot be split over a grid of {} dims from dim {}",
                                           v.name ? v.name : "", sdk::shape_string(v.shape, v.ndim), grid.size(), first));
    for (size_t j = 0; j < grid.size(); ++j)
      offsets[i * MLPH_MAX_DIMS + static_cast<size_t>(first) + j] = coordinates[j] * v.shape[static_cast<size_t>(first) + j];
  }
  return offsets;
}

Prefetcher::Prefetcher(const MLPH_WorkloadApi* api, MLPH_Dataset* dataset, const MLPH_Graph& graph,
                       std::vector<uint64_t> order, uint32_t batch, const PartOffsets& part)
    : api_(api), dataset_(dataset), order_(std::move(order)), batch_(batch), part_(part) {
  slots_[0] = make_batch(graph);
  slots_[1] = make_batch(graph);
  if (steps() > 0) pending_ = std::async(std::launch::async, [this] { fill(0); });
}

Prefetcher::~Prefetcher() {
  if (pending_.valid()) pending_.wait();
}

Batch& Prefetcher::get(uint64_t i) {
  pending_.get();
  if (i + 1 < steps()) pending_ = std::async(std::launch::async, [this, i] { fill(i + 1); });
  return slots_[i % 2];
}

void Prefetcher::fill(uint64_t i) {
  Batch& b = slots_[i % 2];
  const uint64_t* indices = order_.data() + i * batch_;
  if (part_.empty()) {
    check(api_->dataset_read(dataset_, indices, batch_, b.tensors.data(), b.tensors.size()), "reading data");
    return;
  }
  const MLPH_SamplePart part{sizeof(MLPH_SamplePart), nullptr, part_.data(), part_.size() / MLPH_MAX_DIMS};
  check(api_->dataset_read_part(dataset_, indices, batch_, b.tensors.data(), b.tensors.size(), &part),
        "reading data");
}

}  // namespace mlph::core
