#include "mlph/core/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "mlph/core/benchmark.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/text_input.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/util/options.hpp"

namespace mlph::core {
namespace {

using sdk::KeyValues;

KeyValues passthrough_options(const Config& config, const std::string& prefix) {
  KeyValues kv;
  for (const auto& [key, value] : config.passthrough())
    if (key.rfind(prefix, 0) == 0) kv.add(key.substr(prefix.size()), value.text);
  return kv;
}

template <class T, class Api>
Owned<T> create(const Api* api, KeyValues options, const std::string& what) {
  T* raw = nullptr;
  check(api->create(host_api(), options.data(), options.size(), &raw), what);
  return Owned<T>(raw, api->destroy);
}

}  // namespace

// The steps in the order they depend on each other: the workload names the keys the configuration
// may hold; the configuration names the other plug-ins; the comms give the ranks that share the seed.
Session::Session(const RunOptions& options) {
  const std::string workload = workload_name(options);
  PluginLoader loader(default_search_path(options.plugin_dirs));
  workload_lib_ = loader.load(MLPH_KIND_WORKLOAD, workload);
  load_configuration(options);
  load_plugins(loader);
  open_comms();
  open_storage();
  agree_on_seed();
  create_workload(workload);
  read_workload_info();
}

// The layered configuration (the core's keys and the workload's): the config file, then --set, then
// the command line's shorthands; checked for the division's rules.
void Session::load_configuration(const RunOptions& options) {
  schema_ = core_schema();
  size_t n = 0;
  const MLPH_ParamSpec* specs = workload_api()->params(&n);
  schema_.insert(schema_.end(), specs, specs + n);

  std::vector<std::string> sets = options.sets;
  const auto shorthand = [&](const char* key, const std::string& value) {
    if (!value.empty()) sets.push_back(fmt::format("{}={}", key, value));
  };
  shorthand("plugins.backend", options.backend);
  shorthand("plugins.comms", options.comms);
  shorthand("plugins.storage", options.storage);
  shorthand("data.dir", options.data_dir);
  shorthand("mlperf.division", options.division);
  if (options.seed) shorthand("run.seed", std::to_string(*options.seed));
  config_ = Config::load(schema_, options.config_file, sets);

  const std::string division = config_.get("mlperf.division");
  if (division != "closed" && division != "open")
    throw ConfigError(fmt::format("{}: 'mlperf.division' = {}: must be closed or open",
                                  config_.entry("mlperf.division").origin, escaped(division, 120)));
  config_.validate(schema_, division == "closed");
  const std::string staging = config_.get("run.staging");
  if (staging != "timed" && staging != "untimed")
    throw ConfigError(fmt::format("{}: 'run.staging' = {}: must be timed or untimed", config_.entry("run.staging").origin,
                                  escaped(staging, 120)));
}

void Session::load_plugins(PluginLoader& loader) {
  backend_lib_ = loader.load(MLPH_KIND_BACKEND, config_.get("plugins.backend"));
  comms_lib_ = loader.load(MLPH_KIND_COMMS, config_.get("plugins.comms"));
  storage_lib_ = loader.load(MLPH_KIND_STORAGE, config_.get("plugins.storage"));
}

// The comms object and the ranks as it sees them, checked against srun's placement, and the spatial
// grid those ranks are split by.
void Session::open_comms() {
  comm_ = create<MLPH_Comm>(comms_api(), passthrough_options(config_, "comms."), "comms");
  check(comms_api()->topology(comm_.get(), &topology_), "comms");
  slurm_ = slurm_task();
  std::string placement;
  topology_ = reconcile_topology(topology_, slurm_, config_.get("plugins.comms"), placement);
  if (!placement.empty() && topology_.rank == 0) std::fprintf(stderr, "note: %s\n", placement.c_str());
  read_spatial_grid();
  comms_handle_ = {sizeof(MLPH_CommsHandle), nullptr, comms_api(), comm_.get()};
}

// The storage object, watched: each file read is noted for the last words (crash.hpp).
void Session::open_storage() {
  storage_ = create<MLPH_Storage>(storage_lib_.api<MLPH_StorageApi>(), passthrough_options(config_, "storage."),
                                  "storage");
  watched_storage_ = std::make_unique<WatchedStorage>(
      MLPH_StorageHandle{sizeof(MLPH_StorageHandle), nullptr, storage_lib_.api<MLPH_StorageApi>(), storage_.get()});
}

// Every rank must use the same seed: rank 0 draws it (run.seed = 0) and broadcasts it.
void Session::agree_on_seed() {
  seed_ = static_cast<uint64_t>(as_int("run.seed", config_.get("run.seed")));  // >= 0: validated
  if (seed_ == 0) seed_ = fresh_seed();
  check(comms_api()->broadcast(comm_.get(), &seed_, sizeof seed_, 0), "comms: broadcasting the seed");
}

// The workload object, given every configuration key, and its description of the benchmark.
void Session::create_workload(const std::string& workload) {
  KeyValues workload_config;
  for (const auto& [key, value] : config_.values()) workload_config.add(key, value.text);
  // The data-parallel width (global batch = local batch x it): the sample groups, since the ranks of a
  // spatially split sample share its samples.
  workload_config.add("run.world_size", std::to_string(sample_groups()));
  workload_ = create<MLPH_Workload>(workload_api(), std::move(workload_config), workload);
  info_.struct_size = sizeof info_;
  check(workload_api()->describe(workload_.get(), &info_), workload);
  // The results tree is named after benchmark_info, the logs after describe: they must agree.
  if (const BenchmarkFacts facts = benchmark_facts(workload_lib_);
      facts.stated && facts.name != (info_.benchmark ? info_.benchmark : ""))
    throw PluginError(MLPH_INTERNAL, fmt::format("workload {}: its benchmark_info names the benchmark '{}', its "
                                                 "describe '{}'", workload, facts.name,
                                                 info_.benchmark ? info_.benchmark : ""));
}

// What the workload's description asks of the run (gradient accumulation, per-sample eval outputs,
// spatial dims), as far as its ABI version vouches for the fields, and of the backend.
void Session::read_workload_info() {
  if (info_.struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, gradient_accumulation))
    gradient_accumulation_ = std::max<uint32_t>(info_.gradient_accumulation, 1);
  // eval_per_sample lies in 1.2's trailing padding: only a 1.3 workload's struct_size vouches for it.
  if (workload_lib_.descriptor->abi_minor >= 3 && info_.struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, eval_per_sample))
    eval_per_sample_ = info_.eval_per_sample != 0;
  check_spatial_support();
  const MLPH_Plugin& backend = *backend_lib_.descriptor;
  if (gradient_accumulation_ > 1 && backend.abi_minor < 2)
    throw PluginError(MLPH_FAILED_PRECONDITION,
                      fmt::format("backend {} (ABI {}.{}) cannot accumulate gradients over {} micro-batches: "
                                  "that needs ABI 1.2; rebuild it or set the accumulation to 1",
                                  backend_name(), backend.abi_major, backend.abi_minor, gradient_accumulation_));
}

// parallel.spatial: the ranks of a sample (consecutive ones) must tile the run.
void Session::read_spatial_grid() {
  const ConfigValue& entry = config_.entry("parallel.spatial");
  try {
    spatial_grid_ = sdk::spatial::parse_grid(entry.text, "parallel.spatial");
  } catch (const sdk::Error& e) {
    throw ConfigError(fmt::format("{}: {}", entry.origin, e.what()));
  }
  const int64_t ranks = sample_ranks();
  if (topology_.size % ranks != 0)
    throw ConfigError(fmt::format("{}: 'parallel.spatial' = {} splits each sample over {} ranks, which do not divide "
                                  "the {} ranks of this run",
                                  entry.origin, entry.text, ranks, topology_.size));
}

// A grid other than 1 needs a workload that builds spatial graphs and reads sample parts (ABI 1.5).
void Session::check_spatial_support() {
  const MLPH_WorkloadApi* api = workload_api();
  if (workload_lib_.descriptor->abi_minor >= 5 && info_.struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, n_spatial_dims) &&
      info_.spatial_dims)
    spatial_dims_.assign(info_.spatial_dims, info_.spatial_dims + info_.n_spatial_dims);
  if (sample_ranks() == 1) return;
  const bool reads_parts =
      api->struct_size >= MLPH_STRUCT_SIZE(MLPH_WorkloadApi, dataset_read_part) && api->dataset_read_part;
  if (spatial_dims_.empty() || !reads_parts)
    throw PluginError(MLPH_UNIMPLEMENTED,
                      fmt::format("workload {} does not split samples over ranks (spatial parallelism, ABI 1.5): "
                                  "set parallel.spatial to 1",
                                  workload_lib_.descriptor->name));
}

MLPH_Backend* Session::backend() {
  if (backend_) return backend_.get();
  const MLPH_BackendApi* api = backend_api();
  if (!backend_is_1_6() || !api->create_with) {
    backend_ = create<MLPH_Backend>(api, passthrough_options(config_, "backend."), "backend " + backend_name());
    return backend_.get();
  }
  // ABI 1.6: told where it runs, the backend can pick its device (local rank -> device).
  KeyValues options = passthrough_options(config_, "backend.");
  const MLPH_BackendCreateArgs args{sizeof(MLPH_BackendCreateArgs), nullptr, host_api(), options.data(), options.size(),
                                    topology_};
  MLPH_Backend* raw = nullptr;
  check(api->create_with(&args, &raw), "backend " + backend_name());
  backend_ = Owned<MLPH_Backend>(raw, api->destroy);
  return backend_.get();
}

bool Session::backend_is_1_6() const { return core::backend_is_1_6(backend_lib_); }

BackendDevice Session::backend_device() {
  BackendDevice device;
  MLPH_Backend* b = backend();
  if (!backend_is_1_6() || !backend_api()->attributes) return device;  // older backends: a CPU, fp32
  MLPH_BackendAttributes a{};
  a.struct_size = sizeof a;
  check(backend_api()->attributes(b, &a), "backend " + backend_name());
  device.type = a.device.type;
  device.id = a.device.id;
  device.name = a.device_name ? escaped(a.device_name, 200) : "";
  device.per_node = std::max(a.devices_per_node, 0);
  device.memory_bytes = a.device_memory_bytes;
  device.precision = a.precision ? escaped(a.precision, 40) : "fp32";
  device.deterministic = a.deterministic != 0;
  device.stated = true;
  return device;
}

Owned<MLPH_Model> Session::compile(const MLPH_Graph& graph) {
  MLPH_Model* model = nullptr;
  check(backend_api()->compile(backend(), &graph, topology_.size > 1 ? &comms_handle_ : nullptr, &model),
        "backend " + backend_name());
  Owned<MLPH_Model> owned(model, backend_api()->model_destroy);
  broadcast_parameters(model, graph);
  return owned;
}

std::vector<float> read_parameter(const MLPH_BackendApi* api, MLPH_Model* model, const MLPH_Graph& graph, size_t index,
                                  MLPH_Tensor& view) {
  const MLPH_Value& v = graph.values[graph.params[index].value];
  std::vector<float> data(static_cast<size_t>(sdk::numel(v)));
  view = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, data.data());
  check(api->read_parameter(model, index, &view), fmt::format("reading parameter '{}'", v.name ? v.name : ""));
  return data;
}

void Session::broadcast_parameters(MLPH_Model* model, const MLPH_Graph& graph) {
  if (topology_.size == 1) return;
  for (size_t i = 0; i < graph.n_params; ++i) {
    MLPH_Tensor view{};
    std::vector<float> data = read_parameter(backend_api(), model, graph, i, view);
    check(comms_api()->broadcast(comm_.get(), data.data(), data.size() * sizeof(float), 0),
          "comms: broadcasting the initial weights from rank 0");
    check(backend_api()->write_parameter(model, i, &view), "backend " + backend_name());
  }
}

void Session::average_non_trainable(MLPH_Model* model, const MLPH_Graph& graph) {
  if (topology_.size == 1) return;
  for (size_t i = 0; i < graph.n_params; ++i) {
    if (graph.params[i].flags & MLPH_PARAM_TRAINABLE) continue;
    MLPH_Tensor view{};
    std::vector<float> data = read_parameter(backend_api(), model, graph, i, view);
    check(comms_api()->allreduce(comm_.get(), data.data(), data.size(), MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE),
          "comms: averaging the running statistics");
    check(backend_api()->write_parameter(model, i, &view), "backend " + backend_name());
  }
}

void Session::abandon() const {
  const MLPH_StorageApi* api = storage_lib_.api<MLPH_StorageApi>();
  if (storage_ && api->struct_size >= MLPH_STRUCT_SIZE(MLPH_StorageApi, abandon) && api->abandon)
    api->abandon(storage_.get());
}

}  // namespace mlph::core
