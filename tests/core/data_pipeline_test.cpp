// The run's pipeline with several readers: every batch holds its samples in order, each sample read
// once, never two calls at a time on one dataset, reads overlapping across datasets, batches the step
// (and the backend) hold left alone while the readers run ahead, and a sample's error raised with its
// batch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "mlph/core/data_pipeline.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/tensor.hpp"

using namespace mlph;
using namespace mlph::core;

namespace {

// A dataset whose sample k is x = [k, k + 0.5] and y = [-k]; it sleeps a little in each read so that
// readers overlap, and records what it sees. Sample `failing` fails.
struct Recorder {
  std::mutex mutex;
  std::multiset<uint64_t> read;
  std::atomic<int> active{0}, most_active{0};
  uint64_t failing = UINT64_MAX;
};

struct FakeDataset {
  Recorder* recorder;
  std::atomic<int> calls{0};  // calls on this dataset now: the ABI allows one
  bool overlapped = false;
};

MLPH_Error* read_samples(MLPH_Dataset* d, const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) {
  auto* dataset = reinterpret_cast<FakeDataset*>(d);
  Recorder& r = *dataset->recorder;
  if (dataset->calls.fetch_add(1) != 0) dataset->overlapped = true;
  const int now = r.active.fetch_add(1) + 1;
  for (int seen = r.most_active.load(); now > seen && !r.most_active.compare_exchange_weak(seen, now);) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  MLPH_Error* error = nullptr;
  if (n_inputs != 2 || inputs[0].shape[0] != static_cast<int64_t>(n) || inputs[1].shape[0] != static_cast<int64_t>(n)) {
    error = host_api()->error_new(MLPH_INVALID_ARGUMENT, "shapes");
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (indices[i] == r.failing) {
        error = host_api()->error_new(MLPH_DATA_LOSS, ("sample " + std::to_string(indices[i]) + ": corrupt").c_str());
        break;
      }
      static_cast<float*>(inputs[0].data)[2 * i] = static_cast<float>(indices[i]);
      static_cast<float*>(inputs[0].data)[2 * i + 1] = static_cast<float>(indices[i]) + 0.5f;
      static_cast<float*>(inputs[1].data)[i] = -static_cast<float>(indices[i]);
      std::lock_guard lock(r.mutex);
      r.read.insert(indices[i]);
    }
  }
  r.active.fetch_sub(1);
  dataset->calls.fetch_sub(1);
  return error;
}

// The graph inputs: x [batch, 2] and y [batch].
struct Inputs {
  explicit Inputs(uint32_t batch) {
    values[0] = MLPH_Value{"x", MLPH_DTYPE_F32, 2, {batch, 2}};
    values[1] = MLPH_Value{"y", MLPH_DTYPE_F32, 1, {batch}};
    graph.struct_size = sizeof graph;
    graph.values = values;
    graph.n_values = 2;
    graph.inputs = ids;
    graph.n_inputs = 2;
  }
  MLPH_Value values[2]{};
  int32_t ids[2] = {0, 1};
  MLPH_Graph graph{};
};

struct Pipeline {
  Pipeline(uint32_t readers, uint32_t batch) : inputs(batch), datasets(readers) {
    api.struct_size = sizeof api;
    api.dataset_read = read_samples;
    for (FakeDataset& d : datasets) {
      d.recorder = &recorder;
      raw.push_back(reinterpret_cast<MLPH_Dataset*>(&d));
    }
  }
  Recorder recorder;
  Inputs inputs;
  std::vector<FakeDataset> datasets;
  std::vector<MLPH_Dataset*> raw;
  MLPH_WorkloadApi api{};
};

std::vector<uint64_t> order_of(uint64_t n) {
  std::vector<uint64_t> order = shuffled(n, 7);
  return order;
}

float x0(const Batch& b, size_t row) { return static_cast<const float*>(b.tensors[0].data)[2 * row]; }

}  // namespace

TEST(Pipeline, ReadersFillEveryBatchInOrderEachSampleOnce) {
  for (const auto& [readers, batch] : {std::pair{1u, 4u}, std::pair{3u, 2u}, std::pair{4u, 1u}, std::pair{8u, 3u}}) {
    Pipeline p(readers, batch);
    const ReadAhead ahead = read_ahead(readers, batch, 2);
    EXPECT_EQ(ahead.readers, readers);
    EXPECT_EQ(ahead.batches, std::max(1u, (readers + batch - 1) / batch));
    InputBuffers buffers(p.inputs.graph, nullptr, nullptr, ahead.batches);
    const std::vector<uint64_t> order = order_of(30);
    Prefetcher reader(&p.api, p.raw, buffers, order, batch, ReadPlan{"training", 0, 60});
    const Batch* before = nullptr;
    std::vector<float> before_x;
    for (uint64_t i = 0; i < reader.steps(); ++i) {
      const Batch& b = reader.get(i);
      for (uint32_t row = 0; row < batch; ++row) {
        const uint64_t sample = order[i * batch + row];
        ASSERT_EQ(x0(b, row), static_cast<float>(sample)) << readers << " readers, batch " << i << " row " << row;
        ASSERT_EQ(static_cast<const float*>(b.tensors[0].data)[2 * row + 1], static_cast<float>(sample) + 0.5f);
        ASSERT_EQ(static_cast<const float*>(b.tensors[1].data)[row], -static_cast<float>(sample));
      }
      // The step holds b and the backend may still read the batch before: the readers, running ahead
      // meanwhile, leave both alone.
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
      if (before) {
        for (uint32_t row = 0; row < batch; ++row) ASSERT_EQ(x0(*before, row), before_x[row]) << "batch " << i - 1;
      }
      for (uint32_t row = 0; row < batch; ++row) ASSERT_EQ(x0(b, row), static_cast<float>(order[i * batch + row]));
      before = &b;
      before_x.assign(static_cast<const float*>(b.tensors[0].data),
                      static_cast<const float*>(b.tensors[0].data) + 2 * batch);
      for (uint32_t row = 0; row < batch; ++row) before_x[row] = before_x[2 * row];
    }
    const uint64_t used = reader.steps() * batch;
    EXPECT_EQ(p.recorder.read.size(), used) << "each sample once";
    EXPECT_EQ(std::set<uint64_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(used)),
              std::set<uint64_t>(p.recorder.read.begin(), p.recorder.read.end()));
    for (const FakeDataset& d : p.datasets) EXPECT_FALSE(d.overlapped) << "two calls at once on one dataset";
    if (readers > 1) {
      EXPECT_GT(p.recorder.most_active.load(), 1) << readers << " readers never overlapped";
    }
  }
}

TEST(Pipeline, ASamplesErrorComesWithItsBatch) {
  Pipeline p(3, 2);
  const std::vector<uint64_t> order = order_of(12);
  p.recorder.failing = order[7];  // batch 4 (index 3), row 1
  InputBuffers buffers(p.inputs.graph, nullptr, nullptr, read_ahead(3, 2, 2).batches);
  Prefetcher reader(&p.api, p.raw, buffers, order, 2, ReadPlan{"training", 0, 60});
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(x0(reader.get(i), 0), static_cast<float>(order[2 * i]));
  try {
    reader.get(3);
    ADD_FAILURE() << "the corrupt sample's batch was handed out";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sample " + std::to_string(order[7]) + ": corrupt"), std::string::npos)
        << e.what();
  }
}

TEST(Pipeline, ReadersDefaultToHalfTheCpusWithinBounds) {
  EXPECT_EQ(read_ahead(5, 4, 16).readers, 5u);
  EXPECT_EQ(read_ahead(5, 4, 16).batches, 2u);
  EXPECT_EQ(read_ahead(20, 1, 16).readers, kMaxReaders);
  EXPECT_EQ(read_ahead(0, 1, 12).readers, 6u);
  EXPECT_EQ(read_ahead(0, 1, 12).batches, 6u) << "batch 1: a batch ahead per reader";
  EXPECT_EQ(read_ahead(0, 4, 64).readers, kMaxReaders);
  EXPECT_EQ(read_ahead(0, 4, 1).readers, 1u);
}

// Little's law: a reader taking 0.35 s a sample under a step of 0.1 s needs 4 batches in flight; a
// step slower than the reads keeps the batches that give every reader a sample; the cap holds.
TEST(Pipeline, ReadAheadFollowsTheStepsRate) {
  EXPECT_EQ(batches_for_rate({2, 1}, 0.1, 0.35), 4u);
  EXPECT_EQ(batches_for_rate({4, 2}, 1.0, 0.1), 2u);
  EXPECT_EQ(batches_for_rate({1, 1}, 0.001, 10.0), kMaxBatchesAhead);
  EXPECT_EQ(batches_for_rate({3, 3}, 0, 1.0), 3u) << "no rate measured: as many as the readers need";
}

// Under mpirun without binding every rank sees all 16 CPUs: 2 ranks take 8 each (4 readers), not
// 16 each; a rank bound to 8 CPUs keeps its 8 whatever the node's count.
TEST(Pipeline, ReadersShareAnUnboundNodeWithItsOtherRanks) {
  EXPECT_EQ(rank_cpus(16, 16, 2), 8u);
  EXPECT_EQ(rank_cpus(16, 16, 1), 16u);
  EXPECT_EQ(rank_cpus(8, 16, 2), 8u);
  EXPECT_EQ(rank_cpus(16, 16, 32), 1u);
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    unsetenv(v);
  EXPECT_EQ(local_ranks(0), 1u);
  setenv("SLURM_TASKS_PER_NODE", "3(x2),1", 1);
  EXPECT_EQ(local_ranks(0), 3u);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(local_ranks(1), 4u) << "the launcher's count where the comms says 1 rank";
  EXPECT_EQ(local_ranks(2), 2u) << "the comms' count first";
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "junk", 1);
  EXPECT_EQ(local_ranks(0), 3u);
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("SLURM_TASKS_PER_NODE");
}

// Issue 36, defect 11: readers that each listed the split themselves got different index-to-file maps
// when a file came or went while they opened (one epoch read 4 files twice and 4 never). A storage
// whose directory changes between every two listings: the readers opened through Datasets share the
// first listing, every one of them; a workload whose readers still count differently is refused.
namespace {

struct ChangingStorage {
  int listings = 0;
};

MLPH_Error* list_changing(MLPH_Storage* s, const char*, const char*, MLPH_PathFn each, void* ctx) {
  auto& storage = *reinterpret_cast<ChangingStorage*>(s);
  const int n = storage.listings++;
  for (int k = 0; k < 8; ++k) each(ctx, ("file-" + std::to_string(k + n) + ".npy").c_str());  // renamed each time
  return nullptr;
}

struct ListedDataset {
  std::vector<std::string> files;
  uint64_t extra = 0;  // added to its size: a workload that counts its own way
};

int g_opened = 0;
bool g_sizes_differ = false;

void collect(void* ctx, const char* path) { static_cast<std::vector<std::string>*>(ctx)->emplace_back(path); }

MLPH_Error* open_listed(MLPH_Workload*, MLPH_Split, const MLPH_StorageHandle* storage, MLPH_Dataset** out) {
  auto dataset = std::make_unique<ListedDataset>();
  if (MLPH_Error* e = storage->api->list(storage->storage, "/data/train", ".npy", collect, &dataset->files)) return e;
  dataset->extra = g_sizes_differ ? static_cast<uint64_t>(g_opened) : 0;
  ++g_opened;
  *out = reinterpret_cast<MLPH_Dataset*>(dataset.release());
  return nullptr;
}
void close_listed(MLPH_Dataset* d) { delete reinterpret_cast<ListedDataset*>(d); }
MLPH_Error* size_listed(MLPH_Dataset* d, uint64_t* out) {
  const auto* dataset = reinterpret_cast<ListedDataset*>(d);
  *out = dataset->files.size() + dataset->extra;
  return nullptr;
}

}  // namespace

TEST(Pipeline, EveryReaderSharesOneListingOfTheSplit) {
  ChangingStorage storage;
  MLPH_StorageApi storage_api{};
  storage_api.struct_size = sizeof storage_api;
  storage_api.list = list_changing;
  const MLPH_StorageHandle handle{sizeof handle, nullptr, &storage_api, reinterpret_cast<MLPH_Storage*>(&storage)};
  MLPH_WorkloadApi api{};
  api.struct_size = sizeof api;
  api.dataset_open = open_listed;
  api.dataset_close = close_listed;
  api.dataset_size = size_listed;
  g_opened = 0, g_sizes_differ = false;
  const Datasets datasets(&api, nullptr, MLPH_SPLIT_TRAIN, &handle, 4, "training data");
  ASSERT_EQ(datasets.readers().size(), 4u);
  EXPECT_EQ(storage.listings, 1) << "the split is listed once";
  const auto& first = reinterpret_cast<const ListedDataset*>(datasets.readers()[0])->files;
  ASSERT_EQ(first.size(), 8u);
  EXPECT_EQ(first.front(), "file-0.npy");
  for (MLPH_Dataset* d : datasets.readers()) EXPECT_EQ(reinterpret_cast<const ListedDataset*>(d)->files, first);
  EXPECT_EQ(datasets.size(), 8u);

  g_opened = 0, g_sizes_differ = true;
  try {
    const Datasets differing(&api, nullptr, MLPH_SPLIT_TRAIN, &handle, 3, "training data");
    ADD_FAILURE() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("training data: reader 1 counts 9 samples, reader 0 8"), std::string::npos)
        << e.what();
  }
}
