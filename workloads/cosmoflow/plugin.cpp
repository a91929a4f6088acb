// workload/cosmoflow: the MLPerf HPC CosmoFlow benchmark as a plug-in.
#include <map>
#include <memory>

#include "borrow.hpp"
#include "data/synthetic.hpp"
#include "dataset.hpp"
#include "export.hpp"
#include "mlph/sdk/workload/workload.hpp"
#include "model.hpp"
#include "schedule.hpp"
#include "schema.hpp"
#include "settings.hpp"

namespace mlph::cosmoflow {
namespace {

constexpr const char* kBenchmark = "cosmoflow";

class CosmoFlow final : public sdk::Workload {
 public:
  static const MLPH_ParamSpec* params(size_t* n) { return param_specs(n); }
  // A time-to-solution submission has 10 runs (MLPerf HPC rules).
  static sdk::Benchmark benchmark() { return {kBenchmark, 10, hparam_rules()}; }
  // Trained weights in the reference's names and layouts (ABI 1.4; export.cpp).
  static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param) {
    return cosmoflow::reference_layout(param);
  }

  CosmoFlow(const MLPH_HostApi* host, const sdk::Options& config)
      : host_(host), settings_(parse_settings(config)), log_(hyperparameter_log(settings_)) {
    spatial_blocks(settings_.model);  // a grid that does not split the volume: refused here, in one line
  }

  // The eval output is a sum over the batch (eval_per_sample 0): whole global batches are evaluated.
  // Spatial parallelism splits x's D, H, W (dims 1-3) over the grid; every rank reads all of y.
  MLPH_WorkloadInfo describe() override {
    static constexpr int32_t kSpatialDims[] = {1, -1};
    return {sizeof(MLPH_WorkloadInfo), nullptr,     kBenchmark,  "eval_error", settings_.target_mae, 1,
            settings_.epochs,          settings_.batch_size, log_.data(), log_.size(), 1, 0, kSpatialDims, 2};
  }

  const MLPH_Graph* build_graph(uint32_t batch, uint64_t seed) override {
    builder_ = std::make_unique<sdk::GraphBuilder>();
    build_model(*builder_, settings_.model, settings_.momentum, batch, seed);
    return builder_->graph();
  }

  std::unique_ptr<sdk::Dataset> open(MLPH_Split split, const MLPH_StorageHandle& storage) override {
    std::shared_ptr<SampleCache>& cache = caches_[split];  // one per split, whichever reader opens it
    if (!cache) cache = std::make_shared<SampleCache>();
    return std::make_unique<CosmoDataset>(host_, settings_.data, split, storage, cache);
  }

  double learning_rate(uint32_t epoch, uint64_t) override { return cosmoflow::learning_rate(settings_.schedule, epoch); }

  // eval output 0 is sum |y - yhat| over samples and the 4 targets: the mean is Keras' MAE.
  double metric(const double* sums, size_t n_sums, uint64_t samples) override {
    if (n_sums != 1 || samples == 0) sdk::fail(MLPH_INVALID_ARGUMENT, "CosmoFlow metric: expected one sum over >0 samples");
    return sums[0] / (static_cast<double>(samples) * 4.0);
  }

  void generate_data(const char* dir) override {
    write_dataset(dir, settings_.synthetic_train, settings_.synthetic_valid, settings_.data.edge,
                  parse_format(settings_.synthetic_format), settings_.synthetic_seed);
  }

 private:
  const MLPH_HostApi* host_;
  Settings settings_;
  std::unique_ptr<sdk::GraphBuilder> builder_;
  std::map<MLPH_Split, std::shared_ptr<SampleCache>> caches_;  // data.cache, shared by the datasets of a split
  sdk::KeyValues log_;  // the hyperparameters logged after run_start
};

}  // namespace
}  // namespace mlph::cosmoflow

MLPH_DEFINE_PLUGIN(MLPH_KIND_WORKLOAD, "cosmoflow", "0.1.0",
                   "MLPerf HPC CosmoFlow: 3D CNN regressing 4 cosmological parameters (MAE target 0.124)",
                   mlph::sdk::workload_api<mlph::cosmoflow::CosmoFlow>())
