// The plug-ins of one run, loaded, validated and created from the layered configuration.
// mlperf-run's timed loop and the benchmarks both start from a Session.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mlph/core/config.hpp"
#include "mlph/core/crash.hpp"
#include "mlph/core/launch.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/run_options.hpp"
#include "mlph/sdk/comms/spatial.hpp"

namespace mlph::core {

// A plug-in object with its destroy function; freed before the library that made it unloads.
template <class T>
using Owned = std::unique_ptr<T, void (*)(T*)>;

// Parameter `index` of `graph` read from `model` into a host float32 buffer that `view` describes
// (returning the vector moves its buffer, so `view` stays valid for writing it back).
std::vector<float> read_parameter(const MLPH_BackendApi* api, MLPH_Model* model, const MLPH_Graph& graph, size_t index,
                                  MLPH_Tensor& view);

// What the backend says of its device (ABI 1.6 attributes); an older backend is taken for a CPU one.
struct BackendDevice {
  MLPH_DeviceType type = MLPH_DEVICE_HOST;
  int32_t id = 0;
  std::string name;        // empty: a CPU backend that names no device
  int32_t per_node = 0;    // accelerators of this kind on the node
  uint64_t memory_bytes = 0;
  std::string precision = "fp32";
  bool deterministic = true;
  bool stated = false;  // false: an older backend, which cannot say
};

class Session {
 public:
  // Loads the workload, reads and checks the configuration (ConfigError), loads and creates the
  // comms, storage and workload objects (LoadError, PluginError). The backend is created later,
  // inside init, where its time counts.
  explicit Session(const RunOptions& options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Config& config() const { return config_; }
  uint64_t seed() const { return seed_; }
  // The ranks as the comms plug-in sees them, the local rank and node count checked against srun's
  // (launch.hpp); slurm(): this process as srun's task, when it is one.
  const MLPH_Topology& topology() const { return topology_; }
  const std::optional<SlurmTask>& slurm() const { return slurm_; }
  const MLPH_WorkloadInfo& info() const { return info_; }
  // Micro-batches per optimizer step: the workload's (ABI 1.2), 1 for older workloads. Checked in the
  // constructor: a backend older than ABI 1.2 cannot defer its update and is refused.
  uint32_t gradient_accumulation() const { return gradient_accumulation_; }
  // Whether the eval outputs have one row per sample (ABI 1.3 workloads that say so); older
  // workloads sum over the batch.
  bool eval_per_sample() const { return eval_per_sample_; }
  // Spatial parallelism (parallel.spatial, ABI 1.5): the grid of ranks one sample is split over, the
  // ranks per sample (consecutive ones: rank / sample_ranks is the sample group), this rank's place
  // among them, and per graph input the dim the grid's first dim splits (-1: whole), as the workload
  // says. A grid other than 1 is refused in the constructor unless the workload supports it.
  const sdk::spatial::Dims& spatial_grid() const { return spatial_grid_; }
  int64_t sample_ranks() const { return sdk::spatial::ranks(spatial_grid_); }
  int32_t sample_group() const { return topology_.rank / static_cast<int32_t>(sample_ranks()); }
  int32_t sample_groups() const { return topology_.size / static_cast<int32_t>(sample_ranks()); }
  int32_t rank_in_sample() const { return topology_.rank % static_cast<int32_t>(sample_ranks()); }
  const std::vector<int32_t>& spatial_dims() const { return spatial_dims_; }
  std::vector<const LoadedPlugin*> plugins() const { return {&workload_lib_, &backend_lib_, &comms_lib_, &storage_lib_}; }
  const LoadedPlugin& workload_plugin() const { return workload_lib_; }
  const LoadedPlugin& backend_plugin() const { return backend_lib_; }
  // Every configuration key: the core's, then the workload's.
  const std::vector<MLPH_ParamSpec>& schema() const { return schema_; }

  const MLPH_WorkloadApi* workload_api() const { return workload_lib_.api<MLPH_WorkloadApi>(); }
  const MLPH_BackendApi* backend_api() const { return backend_lib_.api<MLPH_BackendApi>(); }
  const MLPH_CommsApi* comms_api() const { return comms_lib_.api<MLPH_CommsApi>(); }
  MLPH_Workload* workload() const { return workload_.get(); }
  MLPH_Comm* comm() const { return comm_.get(); }
  const MLPH_CommsHandle* comms_handle() const { return &comms_handle_; }
  // The storage plug-in, watched: each file read is noted for the last words (crash.hpp).
  const MLPH_StorageHandle* storage_handle() const { return watched_storage_->handle(); }
  const std::string& backend_name() const { return config_.get("plugins.backend"); }

  // The backend object (created on first use) and a model compiled on it. With several ranks the
  // backend gets the comms handle (it averages gradients in train_step) and every rank then takes
  // rank 0's weights, so the replicas start identical whatever the backend did at compile time.
  // ABI 1.6 backends are created with create_with, told this process's topology so that they can
  // pick their device.
  MLPH_Backend* backend();
  // The backend's device (creating the backend first).
  BackendDevice backend_device();
  // Whether the backend's table has ABI 1.6's members (create_with ... read_loss; each may be NULL).
  bool backend_is_1_6() const;
  Owned<MLPH_Model> compile(const MLPH_Graph& graph);
  // Averages the non-trainable parameters (BatchNorm running statistics) over the ranks: each
  // replica's statistics saw only its own shard. The runner calls it after every training epoch,
  // before evaluation (as the references synchronize batch-norm statistics). No-op on one rank.
  void average_non_trainable(MLPH_Model* model, const MLPH_Graph& graph);
  // The process is about to exit without destroying the plug-ins (a signal during a long step, a
  // failed rank leaving before MPI_Finalize): the storage plug-in removes what it staged (ABI 1.4
  // `abandon`; older plug-ins cannot). Safe from any thread, while the run's threads still work.
  void abandon() const;

 private:
  // The constructor's steps, in its order.
  void load_configuration(const RunOptions& options);
  void load_plugins(PluginLoader& loader);
  void open_comms();
  void open_storage();
  void agree_on_seed();
  void create_workload(const std::string& workload);
  void read_workload_info();
  void broadcast_parameters(MLPH_Model* model, const MLPH_Graph& graph);
  void read_spatial_grid();
  void check_spatial_support();
  std::vector<MLPH_ParamSpec> schema_;
  Config config_;
  // Libraries first: members are destroyed in reverse, so every object goes before its library.
  LoadedPlugin workload_lib_, backend_lib_, comms_lib_, storage_lib_;
  Owned<MLPH_Comm> comm_{nullptr, nullptr};
  Owned<MLPH_Storage> storage_{nullptr, nullptr};
  Owned<MLPH_Workload> workload_{nullptr, nullptr};
  Owned<MLPH_Backend> backend_{nullptr, nullptr};
  MLPH_CommsHandle comms_handle_{};
  std::unique_ptr<WatchedStorage> watched_storage_;
  MLPH_Topology topology_{};
  std::optional<SlurmTask> slurm_;
  MLPH_WorkloadInfo info_{};
  uint32_t gradient_accumulation_ = 1;
  bool eval_per_sample_ = false;
  sdk::spatial::Dims spatial_grid_{1};
  std::vector<int32_t> spatial_dims_;
  uint64_t seed_ = 0;
};

}  // namespace mlph::core
