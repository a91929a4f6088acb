// workload/deepcam: the MLPerf HPC DeepCAM benchmark (climate segmentation) as a plug-in.
#include <cstring>
#include <map>
#include <memory>

#include "borrow.hpp"
#include "data/file_order.hpp"
#include "data/hdf5_io.hpp"
#include "data/synthetic.hpp"
#include "dataset.hpp"
#include "export.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/workload/workload.hpp"
#include "model.hpp"
#include "schedule.hpp"
#include "schema.hpp"
#include "settings.hpp"

namespace mlph::deepcam {
namespace {

// <data.dir>/stats.h5 as the model's normalization; identity without a dataset (benchmarks).
// Read directly, not through the storage plug-in: the graph is built during init, before the
// workload is handed a storage handle (the reference too reads stats.h5 during init).
Normalization load_normalization(const DataSettings& data) {
  if (data.dir.empty()) return Normalization::identity(data.channels);
  const std::string path = data.dir + "/stats.h5";
  const std::vector<std::byte> bytes = sdk::read_regular_file(path, kMaxStatsFileBytes);  // not a FIFO, not huge
  try {
    const Stats stats = decode_stats(bytes, path, data.channels);
    return {stats.shift, stats.scale};
  } catch (const DataError& e) {
    sdk::fail(MLPH_DATA_LOSS, e.what());
  }
}

constexpr const char* kBenchmark = "deepcam";

class DeepCam final : public sdk::Workload {
 public:
  static const MLPH_ParamSpec* params(size_t* n) { return param_specs(n); }
  // A time-to-solution submission has 5 runs (MLPerf HPC rules).
  static sdk::Benchmark benchmark() { return {kBenchmark, 5, hparam_rules()}; }
  // Trained weights in the reference's names and layouts (ABI 1.4; export.cpp).
  static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param) {
    return deepcam::reference_layout(param);
  }

  DeepCam(const MLPH_HostApi* host, const sdk::Options& config)
      : host_(host), settings_(parse_settings(config)), log_(hyperparameter_log(settings_)) {}

  // The eval output is the per-sample IoU (eval_per_sample 1): a partial last validation batch is
  // padded and every sample counts, as in the reference.
  MLPH_WorkloadInfo describe() override {
    return {sizeof(MLPH_WorkloadInfo), nullptr,     kBenchmark,  "eval_accuracy", settings_.target_iou, 0,
            settings_.epochs,          settings_.batch_size, log_.data(), log_.size(),
            settings_.training.gradient_accumulation_frequency, 1, nullptr, 0};  // no spatial parallelism
  }

  const MLPH_Graph* build_graph(uint32_t batch, uint64_t seed) override {
    builder_ = std::make_unique<sdk::GraphBuilder>();
    build_model(*builder_, settings_.data, load_normalization(settings_.data), settings_.optimizer, batch, seed,
                settings_.training);
    return builder_->graph();
  }

  std::unique_ptr<sdk::Dataset> open(MLPH_Split split, const MLPH_StorageHandle& storage) override {
    std::shared_ptr<LayoutCache>& layouts = layouts_[split];  // one per split, whichever reader opens it
    if (!layouts) layouts = std::make_shared<LayoutCache>();
    return std::make_unique<DeepCamDataset>(host_, settings_.data, split, storage, layouts);
  }

  double learning_rate(uint32_t, uint64_t step) override { return deepcam::learning_rate(settings_.schedule, step); }

  // The reference's DistributedSampler(shuffle=True, seed=0) after set_epoch(epoch): independent of the
  // run's seed, which only draws the weights (REFERENCE §2.10).
  std::vector<uint64_t> sample_order(uint32_t epoch, uint64_t n) { return torch_randperm(n, kSamplerSeed + epoch); }

  // Eval output 0 is the per-sample IoU; the metric is its mean over the validation samples.
  double metric(const double* sums, size_t n_sums, uint64_t samples) override {
    if (n_sums != 1 || samples == 0) sdk::fail(MLPH_INVALID_ARGUMENT, "DeepCAM metric: expected one sum over >0 samples");
    return sums[0] / static_cast<double>(samples);
  }

  void generate_data(const char* dir) override {
    if (settings_.data.channels != kSyntheticChannels)
      sdk::fail(MLPH_INVALID_ARGUMENT, "--generate-data writes 16 channels; data.channels is " +
                                           std::to_string(settings_.data.channels));
    try {
      write_dataset(dir, settings_.synthetic.train, settings_.synthetic.valid, settings_.data.height,
                    settings_.data.width, settings_.synthetic.seed);
    } catch (const DataError& e) {
      sdk::fail(MLPH_INTERNAL, e.what());
    }
  }

 private:
  const MLPH_HostApi* host_;
  Settings settings_;
  std::unique_ptr<sdk::GraphBuilder> builder_;
  sdk::KeyValues log_;  // the hyperparameters logged after run_start
  std::map<MLPH_Split, std::shared_ptr<LayoutCache>> layouts_;  // shared by the datasets of a split
};

}  // namespace
}  // namespace mlph::deepcam

MLPH_DEFINE_PLUGIN(MLPH_KIND_WORKLOAD, "deepcam", "0.1.0",
                   "MLPerf HPC DeepCAM: DeepLabv3+ segmentation of cyclones and atmospheric rivers (IoU target 0.82)",
                   mlph::sdk::workload_api<mlph::deepcam::DeepCam>())
