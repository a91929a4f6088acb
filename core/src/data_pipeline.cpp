#include "mlph/core/data_pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <stdexcept>
#include <utility>

#include "mlph/core/crash.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::core {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; what alloc_input promises too

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// "17, 4, 9" (the first 8, then how many more).
std::string sample_list(const uint64_t* indices, uint32_t n) {
  constexpr uint32_t kShown = 8;
  std::string list;
  for (uint32_t k = 0; k < std::min(n, kShown); ++k) list += fmt::format("{}{}", k ? ", " : "", indices[k]);
  if (n > kShown) list += fmt::format(" and {} more", n - kShown);
  return list;
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

InputBuffers::InputBuffers(const MLPH_Graph& graph, const MLPH_BackendApi* api, MLPH_Backend* backend) {
  std::vector<size_t> offsets;
  size_t bytes = 0;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    offsets.push_back(bytes);
    bytes += aligned(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
  }
  bytes = std::max(bytes, kAlignment);
  pinned_ = api && backend && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_BackendApi, free_input) && api->alloc_input &&
            api->free_input;
  for (size_t k = 0; k < kBatches; ++k) {
    Block& block = memory_[k];
    if (pinned_) {
      check(api->alloc_input(backend, bytes, &block.data), fmt::format("allocating {} bytes of input memory", bytes));
      if (!block.data) throw std::runtime_error(fmt::format("the backend gave no input memory for {} bytes", bytes));
      block.free = api->free_input;
      block.backend = backend;
    } else {
      block.data = ::operator new(bytes, std::align_val_t(kAlignment));
    }
    for (size_t i = 0; i < graph.n_inputs; ++i) {
      const MLPH_Value& v = graph.values[graph.inputs[i]];
      MLPH_Tensor t = sdk::host_tensor(v.dtype, v.shape, v.ndim, static_cast<std::byte*>(block.data) + offsets[i]);
      t.device = {pinned_ ? MLPH_DEVICE_HOST_PINNED : MLPH_DEVICE_HOST, 0};
      batches_[k].tensors.push_back(t);
    }
  }
}

InputBuffers::Block::~Block() {
  if (!data) return;
  if (free)
    free(backend, data);
  else
    ::operator delete(data, std::align_val_t(kAlignment));
}

Prefetcher::Prefetcher(const MLPH_WorkloadApi* api, MLPH_Dataset* dataset, InputBuffers& buffers,
                       std::vector<uint64_t> order, uint32_t batch, ReadPlan plan, const PartOffsets& part)
    : api_(api), dataset_(dataset), buffers_(buffers), order_(std::move(order)), batch_(batch), part_(part),
      plan_(std::move(plan)) {
  if (steps() > 0) start_filling(0);
}

void Prefetcher::start_filling(uint64_t i) {
  Batch* b = &buffers_.next();
  filling_ = b;
  pending_ = std::async(std::launch::async, [this, i, b] { fill(i, *b); });
}

Prefetcher::~Prefetcher() {
  if (pending_.valid()) pending_.wait();
}

Batch& Prefetcher::get(uint64_t i) {
  if (pending_.wait_for(std::chrono::duration<double>(plan_.timeout_s)) == std::future_status::timeout) {
    const std::string file = last_file_of(reader_);
    abandon_run(fmt::format("{} (samples {}) was not read within {} s (data.read_timeout_s){}", batch_name(i),
                            sample_list(order_.data() + i * batch_, batch_), plan_.timeout_s,
                            file.empty() ? "" : "; the file being read: " + file));
  }
  pending_.get();
  Batch& ready = *filling_;
  if (i + 1 < steps()) start_filling(i + 1);
  return ready;
}

std::string Prefetcher::batch_name(uint64_t i) const {
  return fmt::format("{} batch {} of epoch {}", plan_.split, i + 1, plan_.epoch + 1);
}

void Prefetcher::fill(uint64_t i, Batch& b) {
  reader_ = current_thread();
  const uint64_t* indices = order_.data() + i * batch_;
  const Activity reading(fmt::format("reading {} (samples {})", batch_name(i), sample_list(indices, batch_)));
  if (part_.empty()) {
    check(api_->dataset_read(dataset_, indices, batch_, b.tensors.data(), b.tensors.size()), "reading data");
    return;
  }
  const MLPH_SamplePart part{sizeof(MLPH_SamplePart), nullptr, part_.data(), part_.size() / MLPH_MAX_DIMS};
  check(api_->dataset_read_part(dataset_, indices, batch_, b.tensors.data(), b.tensors.size(), &part),
        "reading data");
}

}  // namespace mlph::core
