#include "mlph/core/data_pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <new>
#include <stdexcept>
#include <utility>

#include "mlph/core/crash.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/util/cpus.hpp"

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

ReadAhead read_ahead(int64_t configured, uint32_t batch, unsigned cpus) {
  const auto readers = configured > 0 ? static_cast<uint32_t>(std::min<int64_t>(configured, kMaxReaders))
                                      : std::clamp(cpus / 2, 1u, kMaxReaders);
  return {readers, std::max(1u, (readers + batch - 1) / std::max(1u, batch))};
}

ReadAhead read_ahead(const Config& config, uint32_t batch, int32_t comms_local_size) {
  const unsigned machine = std::max(1u, std::thread::hardware_concurrency());
  return read_ahead(static_cast<int64_t>(as_number("data.readers", config.get("data.readers"))), batch,
                    rank_cpus(sdk::available_cpus(), machine, local_ranks(comms_local_size)));
}

uint32_t batches_for_rate(const ReadAhead& ahead, double step_s, double sample_read_s) {
  if (!(step_s > 0) || !(sample_read_s > 0)) return ahead.batches;
  const double in_flight = std::ceil(sample_read_s / step_s);
  return std::max(ahead.batches, static_cast<uint32_t>(std::min<double>(in_flight, kMaxBatchesAhead)));
}

unsigned rank_cpus(unsigned affinity, unsigned machine, uint32_t local_ranks) {
  if (affinity < machine || local_ranks <= 1) return std::max(1u, affinity);
  return std::max(1u, affinity / local_ranks);
}

uint32_t local_ranks(int32_t comms_local_size) {
  if (comms_local_size > 1) return static_cast<uint32_t>(comms_local_size);
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const char* value = std::getenv(name);
    if (!value) continue;
    char* end = nullptr;
    const unsigned long n = std::strtoul(value, &end, 10);  // SLURM_TASKS_PER_NODE "4(x2),3": this node's is unknown, the first
    if (end != value && n >= 1 && n <= 1u << 20) return static_cast<uint32_t>(n);
  }
  return 1;
}

struct SharedListing::Forward {
  static SharedListing& self(MLPH_Storage* s) { return *reinterpret_cast<SharedListing*>(s); }
  static void collect(void* ctx, const char* path) { static_cast<std::vector<std::string>*>(ctx)->emplace_back(path); }
  static MLPH_Error* list(MLPH_Storage* s, const char* dir, const char* suffix, MLPH_PathFn each, void* ctx) {
    SharedListing& me = self(s);
    std::vector<std::string> paths;
    {
      const std::lock_guard lock(me.mutex_);
      const auto key = std::make_pair(std::string(dir ? dir : ""), std::string(suffix ? suffix : ""));
      auto found = me.listed_.find(key);
      if (found == me.listed_.end()) {
        std::vector<std::string> fresh;
        if (MLPH_Error* e = me.inner_.api->list(me.inner_.storage, dir, suffix, collect, &fresh)) return e;
        found = me.listed_.emplace(key, std::move(fresh)).first;
      }
      paths = found->second;
    }
    for (const std::string& p : paths) each(ctx, p.c_str());
    return nullptr;
  }
  static MLPH_Error* read(MLPH_Storage* s, const char* path, MLPH_AllocFn alloc, void* ctx, size_t* size) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->read(inner.storage, path, alloc, ctx, size);
  }
  static MLPH_Error* stats(MLPH_Storage* s, MLPH_IoStats* out) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->stats(inner.storage, out);
  }
  static MLPH_Error* read_range(MLPH_Storage* s, const char* path, uint64_t offset, size_t bytes, void* dst) {
    const MLPH_StorageHandle& inner = self(s).inner_;
    return inner.api->read_range(inner.storage, path, offset, bytes, dst);
  }
};

SharedListing::SharedListing(const MLPH_StorageHandle& inner) : inner_(inner) {
  // As WatchedStorage (crash.cpp): every member forwards or stays NULL; readers never stage.
  const MLPH_StorageApi& in = *inner.api;
  api_.struct_size = sizeof api_;
  api_.list = Forward::list;
  api_.read = Forward::read;
  api_.stats = Forward::stats;
  if (in.struct_size >= MLPH_STRUCT_SIZE(MLPH_StorageApi, read_range) && in.read_range) api_.read_range = Forward::read_range;
  handle_ = {sizeof handle_, nullptr, &api_, reinterpret_cast<MLPH_Storage*>(this)};
}

Datasets::Datasets(const MLPH_WorkloadApi* api, MLPH_Workload* workload, MLPH_Split split,
                   const MLPH_StorageHandle* storage, uint32_t readers, const char* what)
    : listing_(std::make_unique<SharedListing>(*storage)) {
  for (uint32_t r = 0; r < std::max(1u, readers); ++r) {
    MLPH_Dataset* raw = nullptr;
    check(api->dataset_open(workload, split, listing_->handle(), &raw), what);
    owned_.emplace_back(raw, api->dataset_close);
    raw_.push_back(raw);
  }
  check(api->dataset_size(raw_.front(), &size_), what);
  for (size_t r = 1; r < raw_.size(); ++r) {
    uint64_t size = 0;
    check(api->dataset_size(raw_[r], &size), what);
    if (size != size_)
      throw std::runtime_error(fmt::format("{}: reader {} counts {} samples, reader 0 {}: the dataset changed while "
                                           "they opened it",
                                           what, r, size, size_));
  }
}

InputBuffers::InputBuffers(const MLPH_Graph& graph, const LoadedPlugin* plugin, MLPH_Backend* backend, uint32_t ahead)
    : memory_(std::make_unique<Block[]>(size_t{ahead} + 2)), batches_(size_t{ahead} + 2) {
  std::vector<size_t> offsets;
  size_t bytes = 0;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    offsets.push_back(bytes);
    bytes += aligned(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
  }
  bytes = std::max(bytes, kAlignment);
  const MLPH_BackendApi* api = plugin && backend && backend_is_1_6(*plugin) ? plugin->api<MLPH_BackendApi>() : nullptr;
  pinned_ = api && api->alloc_input && api->free_input;
  for (size_t k = 0; k < batches_.size(); ++k) {
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

Prefetcher::Prefetcher(const MLPH_WorkloadApi* api, std::span<MLPH_Dataset* const> readers, InputBuffers& buffers,
                       std::vector<uint64_t> order, uint32_t batch, ReadPlan plan, const PartOffsets& part)
    : api_(api), datasets_(readers.begin(), readers.end()), buffers_(buffers), order_(std::move(order)), batch_(batch),
      part_(part), plan_(std::move(plan)) {
  if (datasets_.empty()) throw std::logic_error("a Prefetcher needs a dataset to read");
  if (steps() == 0) return;
  Batch& any = buffers_.next();
  for (const MLPH_Tensor& t : any.tensors) {
    if (t.ndim < 1 || t.shape[0] != static_cast<int64_t>(batch_))
      throw std::runtime_error(fmt::format("graph input {} has no leading dim of the batch size {}: the pipeline reads "
                                           "a sample at a time", sdk::shape_string(t.shape, t.ndim), batch_));
    row_bytes_.push_back(static_cast<size_t>(sdk::numel(t) / batch_) * mlph_dtype_size(t.dtype));
  }
  readers_.resize(datasets_.size());
  {
    std::lock_guard lock(mutex_);
    filling_.push_back({&any, 0, nullptr});
    started_samples_ = batch_;
    for (uint64_t i = 1; i < std::min<uint64_t>(buffers_.ahead(), steps()); ++i) start(i);
  }
  for (size_t r = 0; r < datasets_.size(); ++r) threads_.emplace_back([this, r] { read_samples(r); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;  // samples not yet taken are not read; those being read finish
  }
  work_.notify_all();
}

void Prefetcher::start(uint64_t i) {
  filling_.push_back({&buffers_.next(), 0, nullptr});
  started_samples_ = (i + 1) * batch_;
  work_.notify_all();
}

// A reader thread: takes the next sample started, until the Prefetcher goes.
void Prefetcher::read_samples(size_t reader) {
  std::unique_lock lock(mutex_);
  readers_[reader].thread = current_thread();
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || next_sample_ < started_samples_; });
    if (stopping_) return;
    const uint64_t position = next_sample_++;
    Filling& mine = filling(position / batch_);
    if (!mine.error) {
      readers_[reader].sample = position;
      const Batch& batch = *mine.batch;
      lock.unlock();
      std::exception_ptr error;
      try {
        read_sample(reader, position, batch);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      readers_[reader].sample = kIdle;
      Filling& same = filling(position / batch_);  // the deque may have grown meanwhile
      if (error && !same.error) same.error = error;
    }
    if (++filling(position / batch_).settled == batch_) settled_.notify_all();
  }
}

// Row `position % batch` of the batch: each input's tensor cut to that one sample.
void Prefetcher::read_sample(size_t reader, uint64_t position, const Batch& batch) {
  const uint64_t row = position % batch_;
  const Activity reading(fmt::format("reading {} (sample {})", batch_name(position / batch_), order_[position]));
  std::vector<MLPH_Tensor> rows = batch.tensors;
  for (size_t k = 0; k < rows.size(); ++k) {
    rows[k].shape[0] = 1;
    rows[k].data = static_cast<std::byte*>(rows[k].data) + row * row_bytes_[k];
  }
  MLPH_Dataset* dataset = datasets_[reader];
  if (part_.empty()) {
    check(api_->dataset_read(dataset, &order_[position], 1, rows.data(), rows.size()), "reading data");
    return;
  }
  const MLPH_SamplePart part{sizeof(MLPH_SamplePart), nullptr, part_.data(), part_.size() / MLPH_MAX_DIMS};
  check(api_->dataset_read_part(dataset, &order_[position], 1, rows.data(), rows.size(), &part), "reading data");
}

Batch& Prefetcher::get(uint64_t i) {
  std::unique_lock lock(mutex_);
  if (i != first_filling_) throw std::logic_error("Prefetcher::get: batches are taken in order");
  const auto deadline = std::chrono::duration<double>(plan_.timeout_s);
  if (!settled_.wait_for(lock, deadline, [&] { return filling(i).settled == batch_; })) {
    const std::string files = files_being_read(i);
    abandon_run(fmt::format("{} (samples {}) was not read within {} s (data.read_timeout_s){}", batch_name(i),
                            sample_list(order_.data() + i * batch_, batch_), plan_.timeout_s, files));
  }
  const Filling done = filling_.front();
  filling_.pop_front();
  ++first_filling_;
  if (done.error) std::rethrow_exception(done.error);
  if (i + buffers_.ahead() < steps()) start(i + buffers_.ahead());
  return *done.batch;
}

// "; the file being read: F" (or "files", several readers on the batch), from what the readers of
// batch i last opened; "" when none is known. The caller holds mutex_.
std::string Prefetcher::files_being_read(uint64_t i) {
  std::vector<std::string> files;
  for (const Reader& r : readers_) {
    if (r.sample == kIdle || r.sample / batch_ != i) continue;
    const std::string file = last_file_of(r.thread);
    if (!file.empty() && std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  }
  if (files.empty()) return "";
  std::string list;
  for (const std::string& f : files) list += (list.empty() ? "" : ", ") + f;
  return fmt::format("; the file{} being read: {}", files.size() == 1 ? "" : "s", list);
}

std::string Prefetcher::batch_name(uint64_t i) const {
  return fmt::format("{} batch {} of epoch {}", plan_.split, i + 1, plan_.epoch + 1);
}

}  // namespace mlph::core
