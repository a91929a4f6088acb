// The data side of a run: the epoch's sample order (the same on every rank), each rank's share of
// it, and batches decoded ahead by reader threads, a sample at a time each, into buffers allocated
// once (the backend's pinned memory where it has some), so reading overlaps the backend's step.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "mlph/backend.h"
#include "mlph/core/config.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/storage.h"
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

// How a run reads: `readers` threads, each with its own opened dataset (the ABI allows one call at a
// time per dataset), decode a sample at a time, `batches` batches ahead of the step, so that every
// reader has a sample to decode even at batch size 1.
struct ReadAhead {
  uint32_t readers = 1, batches = 1;
};
// data.readers: `configured` readers, or 0: half of `cpus` (the CPUs this rank may use, rank_cpus),
// 1 to kMaxReaders; batches ahead: enough to give every reader a sample.
constexpr uint32_t kMaxReaders = 8;
ReadAhead read_ahead(int64_t configured, uint32_t batch, unsigned cpus);
// The same from a run's configuration (its data.readers), for a rank that shares its node with
// `comms_local_size` ranks as the comms counts them (0 or 1: as the launcher's environment says).
ReadAhead read_ahead(const Config& config, uint32_t batch, int32_t comms_local_size);

// Batches ahead that hide a reader's time per sample at the rate the step consumes: a sample must be
// started `sample_read_s` before its batch is taken and the step takes a batch every `step_s`, so
// ceil(sample_read_s / step_s) batches are in flight (Little's law); never fewer than `ahead`
// gives every reader, at most kMaxBatchesAhead (each is a batch of pinned memory).
constexpr uint32_t kMaxBatchesAhead = 16;
uint32_t batches_for_rate(const ReadAhead& ahead, double step_s, double sample_read_s);

// The CPUs a rank may use: its affinity (`affinity` CPUs, as Slurm or mpirun bind it), shared with
// the other ranks of the node when that is every CPU of the machine (`machine`): under mpirun
// without binding, every rank sees them all, and each taking half of them would oversubscribe the node.
unsigned rank_cpus(unsigned affinity, unsigned machine, uint32_t local_ranks);
// The ranks on this node: the comms' count when it says more than 1, else the launcher's
// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE's first
// count), else 1.
uint32_t local_ranks(int32_t comms_local_size);

// The storage a split's readers open it through: every `list` of a directory after the first replays
// the first's answer, so that the readers share one listing (one index-to-file map) even when a file
// is added, removed or renamed while they open. Everything else goes to `inner`.
class SharedListing {
 public:
  explicit SharedListing(const MLPH_StorageHandle& inner);
  SharedListing(const SharedListing&) = delete;
  SharedListing& operator=(const SharedListing&) = delete;
  const MLPH_StorageHandle* handle() const { return &handle_; }

 private:
  struct Forward;
  MLPH_StorageHandle inner_, handle_{};
  MLPH_StorageApi api_{};
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> listed_;  // (dir, suffix): paths
};

// One split of the dataset opened once per reader, all through one SharedListing; readers that still
// count different sizes are refused, naming the split.
class Datasets {
 public:
  Datasets(const MLPH_WorkloadApi* api, MLPH_Workload* workload, MLPH_Split split, const MLPH_StorageHandle* storage,
           uint32_t readers, const char* what);
  uint64_t size() const { return size_; }
  std::span<MLPH_Dataset* const> readers() const { return raw_; }

 private:
  std::unique_ptr<SharedListing> listing_;  // outlives the datasets opened through it
  std::vector<std::unique_ptr<MLPH_Dataset, void (*)(MLPH_Dataset*)>> owned_;
  std::vector<MLPH_Dataset*> raw_;
  uint64_t size_ = 0;
};

// Tensors shaped like the graph inputs, over memory an InputBuffers owns, filled by the workload's reader.
struct Batch {
  std::vector<MLPH_Tensor> tensors;
};

// The input batches of a whole run, allocated once and reused for every epoch, training and evaluation
// alike: the backend's own input memory (ABI 1.6 alloc_input: pinned host memory it copies from
// fastest) where it offers it, else ordinary host memory. Handed out in rotation: a backend of ABI 1.6
// may still read a batch until its next call on the model returns, so one batch is being read by the
// backend, one waits for its step and `ahead` are being filled.
class InputBuffers {
 public:
  // `plugin` and `backend` may be null (host memory); otherwise they outlive this object. The
  // backend's memory is used where its plug-in is of ABI 1.6 (backend_is_1_6) and offers it.
  InputBuffers(const MLPH_Graph& graph, const LoadedPlugin* plugin, MLPH_Backend* backend, uint32_t ahead = 1);

  // The next batch in rotation (called from one thread).
  Batch& next() { return batches_[next_++ % batches_.size()]; }
  size_t count() const { return batches_.size(); }
  // Batches that can be filled while the backend holds two (see above).
  uint32_t ahead() const { return static_cast<uint32_t>(batches_.size() - 2); }
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
  std::unique_ptr<Block[]> memory_;
  std::vector<Batch> batches_;
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

// Reads the batches of `order` (whole batches; a remainder is not read) ahead of the step on a reader
// thread per dataset of `readers`, a sample per call, into `buffers`' batches (as far ahead as they
// allow): whole samples, or with `part` (not empty) this rank's part of each (dataset_read_part).
// Every input's first dim is the batch: a sample's tensors are the batch's, one row of it. Each reader
// publishes what it reads (Activity). A batch not read within the plan's timeout ends the process
// (abandon_run) naming the batch, its samples and the files being read: a reader stuck in a library
// cannot be cancelled, and waiting for it would hang the run.
class Prefetcher {
 public:
  Prefetcher(const MLPH_WorkloadApi* api, std::span<MLPH_Dataset* const> readers, InputBuffers& buffers,
             std::vector<uint64_t> order, uint32_t batch, ReadPlan plan, const PartOffsets& part = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  uint64_t steps() const { return order_.size() / batch_; }
  // The batch of step `i` (called with i = 0, 1, 2, ... in order); rethrows a reader's error.
  Batch& get(uint64_t i);

 private:
  // A batch being read: its memory and how its samples went.
  struct Filling {
    Batch* batch = nullptr;
    uint32_t settled = 0;      // samples read, or skipped after an error in the batch
    std::exception_ptr error;  // the first sample's error
  };
  // What a reader thread is doing, for the timeout's message.
  struct Reader {
    pid_t thread = 0;
    uint64_t sample = kIdle;  // position in order_, or kIdle
  };
  static constexpr uint64_t kIdle = UINT64_MAX;

  void start(uint64_t i);  // batch i's samples go to the readers; the caller holds mutex_
  void read_samples(size_t reader);
  void read_sample(size_t reader, uint64_t position, const Batch& batch);
  Filling& filling(uint64_t i) { return filling_[static_cast<size_t>(i - first_filling_)]; }
  std::string files_being_read(uint64_t i);
  std::string batch_name(uint64_t i) const;

  const MLPH_WorkloadApi* api_;
  std::vector<MLPH_Dataset*> datasets_;
  InputBuffers& buffers_;
  std::vector<uint64_t> order_;
  uint32_t batch_;
  PartOffsets part_;
  ReadPlan plan_;
  std::vector<size_t> row_bytes_;  // per input: one sample's bytes

  std::mutex mutex_;  // guards what follows
  std::condition_variable work_, settled_;
  std::deque<Filling> filling_;  // batches first_filling_, first_filling_ + 1, ... (each started)
  uint64_t first_filling_ = 0;
  uint64_t next_sample_ = 0, started_samples_ = 0;  // positions in order_: handed to a reader, started
  bool stopping_ = false;
  std::vector<Reader> readers_;
  std::vector<std::jthread> threads_;  // last: joined before the rest goes
};

}  // namespace mlph::core
