// The data side of a run: the epoch's sample order (the same on every rank), each rank's share of
// it, and batches decoded one ahead on a second thread, into buffers allocated once (the backend's
// pinned memory where it has some), so reading overlaps the backend's step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "mlph/backend.h"
#include "mlph/sdk/spatial.hpp"
#include "mlph/workload.h"

namespace mlph::core {

// Which readers share one listing of the dataset, and which of them this rank is.
struct DataShard {
  int32_t index = 0, count = 1;
};

// 0..n-1 in a deterministic Fisher-Yates order (SplitMix64), identical on every rank and platform.
std::vector<uint64_t> shuffled(uint64_t n, uint64_t seed);

// The order of the `n` training samples in `epoch`, the same on every rank: the workload's own
// (sample_order, ABI 1.2; checked to be a permutation) or shuffled(n, seed + epoch).
std::vector<uint64_t> epoch_order(const MLPH_WorkloadApi* api, MLPH_Workload* workload, uint32_t epoch, uint64_t n,
                                  uint64_t seed);

// This reader's share of `order`: elements index, index + count, ...
std::vector<uint64_t> deal(const std::vector<uint64_t>& order, const DataShard& reader);
// The same, cut to whole batches of all `count` readers.
std::vector<uint64_t> shard(const std::vector<uint64_t>& order, const DataShard& reader, uint32_t batch);

// Spatial parallelism: where this rank's part of each graph input starts in the whole sample, per
// dim (MLPH_SamplePart.offsets: input i's at [i * MLPH_MAX_DIMS, (i + 1) * MLPH_MAX_DIMS)). Input i's
// dims spatial_dims[i] + j are split over grid dim j, the rank at `coordinates` holding block
// coordinates[j] of the graph input's (block) size; -1: whole. Throws std::runtime_error when the
// workload's dims do not fit the graph's inputs or the grid.
using PartOffsets = std::vector<int64_t>;
PartOffsets part_offsets(const MLPH_Graph& graph, const std::vector<int32_t>& spatial_dims,
                         const sdk::spatial::Dims& grid, const sdk::spatial::Dims& coordinates);

// Tensors shaped like the graph inputs, over memory an InputBuffers owns, filled by the workload's reader.
struct Batch {
  std::vector<MLPH_Tensor> tensors;
};

// The input batches of a whole run, allocated once and reused for every epoch, training and evaluation
// alike: the backend's own input memory (ABI 1.6 alloc_input: pinned host memory it copies from
// fastest) where it offers it, else ordinary host memory. Handed out in rotation: a backend of ABI 1.6
// may still read a batch until its next call on the model returns, so one batch is being read by the
// backend, one waits for its step and one is being filled.
class InputBuffers {
 public:
  static constexpr size_t kBatches = 3;
  // `api` and `backend` may be null (host memory); otherwise they outlive this object.
  InputBuffers(const MLPH_Graph& graph, const MLPH_BackendApi* api, MLPH_Backend* backend);

  // The next batch in rotation (called from one thread).
  Batch& next() { return batches_[next_++ % kBatches]; }
  // Whether the batches are the backend's memory (MLPH_DEVICE_HOST_PINNED).
  bool pinned() const { return pinned_; }

 private:
  // One batch's memory, freed the way it was allocated.
  struct Block {
    void* data = nullptr;
    void (*free)(MLPH_Backend*, void*) = nullptr;  // the backend's free_input, or null: operator new
    MLPH_Backend* backend = nullptr;
    Block() = default;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block();
  };
  std::unique_ptr<Block[]> memory_ = std::make_unique<Block[]>(kBatches);
  Batch batches_[kBatches];
  bool pinned_ = false;
  uint64_t next_ = 0;
};

// Which batches a Prefetcher reads, as its messages name them ("training batch 3 of epoch 1"), and
// how long a batch may take (data.read_timeout_s).
struct ReadPlan {
  std::string split;  // "training", "validation"
  uint32_t epoch = 0;
  double timeout_s = 600;
};

// Reads the batches of `order` (whole batches; a remainder is not read) one ahead on a second thread,
// into `buffers`' batches: whole samples, or with `part` (not empty) this rank's part of each
// (dataset_read_part). The thread publishes what it reads (Activity). A batch not read within the
// plan's timeout ends the process (abandon_run) naming the batch and the reader's samples and file: a
// reader stuck in a library cannot be cancelled, and waiting for it would hang the run.
class Prefetcher {
 public:
  Prefetcher(const MLPH_WorkloadApi* api, MLPH_Dataset* dataset, InputBuffers& buffers, std::vector<uint64_t> order,
             uint32_t batch, ReadPlan plan, const PartOffsets& part = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  uint64_t steps() const { return order_.size() / batch_; }
  // The batch of step `i` (called with i = 0, 1, 2, ... in order); rethrows the reader's error.
  Batch& get(uint64_t i);

 private:
  void start_filling(uint64_t i);
  void fill(uint64_t i, Batch& b);
  std::string batch_name(uint64_t i) const;

  const MLPH_WorkloadApi* api_;
  MLPH_Dataset* dataset_;
  InputBuffers& buffers_;
  std::vector<uint64_t> order_;
  uint32_t batch_;
  PartOffsets part_;
  ReadPlan plan_;
  std::atomic<pid_t> reader_{0};  // the thread reading (its activity names the samples and file)
  Batch* filling_ = nullptr;  // the batch of the step being read ahead
  std::future<void> pending_;
};

}  // namespace mlph::core
