// libmlph-workload-linreg.so: a third benchmark, there to show that a workload needs no change in
// the core. Linear regression y = w.x + b + noise on generated data: one dense layer trained with
// SGD on the mean squared error, the absolute error of each sample as the eval output
// (eval_per_sample), its own schema, borrowing table and submission run count (3).
//
// Built a second time with LINREG_ABI_MINOR=2 as libmlph-workload-linreg-abi12.so: how a workload
// built against ABI 1.2 looks to the core (a shorter table, minor version 2, no benchmark facts, no
// borrowing; eval_per_sample set as 1.2's trailing padding might hold it, which the core must ignore).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/workload/workload.hpp"

#ifndef LINREG_ABI_MINOR
#define LINREG_ABI_MINOR MLPH_ABI_MINOR
#endif

namespace {

using namespace mlph;
using sdk::fail;

#if LINREG_ABI_MINOR == 2
constexpr const char* kName = "linreg-abi12";
#else
constexpr const char* kName = "linreg";
#endif
constexpr const char* kFixed = "linreg closed division: only the batch size, learning rate and momentum may change";
constexpr double kNoise = 0.01;  // of the generated targets: the MAE a perfect fit reaches

constexpr MLPH_ParamSpec kSpecs[] = {
    {"model.features", MLPH_TYPE_INT, "8", "inputs per sample", MLPH_CLOSED_FIXED, MLPH_BOUND_MIN, 1, 0, kFixed},
    {"optimizer.lr", MLPH_TYPE_FLOAT, "0.1", "learning rate (opt_base_learning_rate)", MLPH_CLOSED_TUNABLE,
     MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE, 0, 0, "linreg rules: the learning rate must be > 0"},
    {"optimizer.momentum", MLPH_TYPE_FLOAT, "0.5", "SGD momentum (sgd_opt_momentum)", MLPH_CLOSED_TUNABLE,
     MLPH_BOUND_MIN | MLPH_BOUND_MAX | MLPH_BOUND_MAX_EXCLUSIVE, 0, 1, "linreg rules: momentum must be in [0, 1)"},
    {"train.batch_size", MLPH_TYPE_INT, "4", "samples per step on each rank", MLPH_CLOSED_TUNABLE,
     MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE, 0, 0, "must be > 0"},
    {"train.epochs", MLPH_TYPE_INT, "20", "stop (aborted) after this many epochs", MLPH_CLOSED_FREE, MLPH_BOUND_MIN, 1,
     0, ""},
    {"train.target_mae", MLPH_TYPE_FLOAT, "0.05", "quality target: validation mean absolute error", MLPH_CLOSED_FIXED,
     MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE, 0, 0, kFixed},
    {"data.dir", MLPH_TYPE_STRING, "", "dataset root holding train/ and validation/", MLPH_CLOSED_FREE, 0, 0, 0, ""},
    {"data.synthetic.train", MLPH_TYPE_INT, "256", "training samples to generate", MLPH_CLOSED_FREE, MLPH_BOUND_MIN, 1,
     0, ""},
    {"data.synthetic.valid", MLPH_TYPE_INT, "30", "validation samples to generate", MLPH_CLOSED_FREE, MLPH_BOUND_MIN,
     1, 0, ""},
    {"data.synthetic.seed", MLPH_TYPE_INT, "1", "seed of the generated data", MLPH_CLOSED_FREE, 0, 0, 0, ""},
};

constexpr sdk::HparamRule kHparams[] = {
    {"global_batch_size", "train.batch_size", sdk::per_rank_batch},
    {"opt_base_learning_rate", "optimizer.lr", sdk::as_is},
    {"sgd_opt_momentum", "optimizer.momentum", sdk::as_is},
};

// <dir>/<split>/*.f32: rows of `features` inputs and one target, float32.
class LinRegDataset final : public sdk::Dataset {
 public:
  LinRegDataset(const MLPH_HostApi* host, const std::string& root, MLPH_Split split, const MLPH_StorageHandle& storage,
                int64_t features)
      : row_(static_cast<size_t>(features) + 1) {
    const std::string dir = sdk::split_directory(root, split);
    const std::vector<std::string> files = sdk::list_files(host, storage, dir, ".f32", "linreg data");
    if (files.empty()) fail(MLPH_NOT_FOUND, dir + ": no *.f32 files");
    for (const std::string& file : files) {
      const std::vector<std::byte> bytes = sdk::read_file(host, storage, file, "linreg data");
      if (bytes.size() % (row_ * sizeof(float)) != 0)
        fail(MLPH_DATA_LOSS, file + ": " + std::to_string(bytes.size()) + " bytes is no whole number of rows of " +
                                 std::to_string(row_) + " floats");
      const size_t at = rows_.size();
      rows_.resize(at + bytes.size() / sizeof(float));
      std::memcpy(rows_.data() + at, bytes.data(), bytes.size());
    }
  }
  uint64_t size() override { return rows_.size() / row_; }
  void read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) override {
    if (n_inputs != 2) fail(MLPH_INVALID_ARGUMENT, "linreg reads two inputs (x, y)");
    auto* x = static_cast<float*>(inputs[0].data);
    auto* y = static_cast<float*>(inputs[1].data);
    for (size_t i = 0; i < n; ++i) {
      if (indices[i] >= size()) fail(MLPH_OUT_OF_RANGE, "sample " + std::to_string(indices[i]));
      const float* r = rows_.data() + indices[i] * row_;
      std::copy(r, r + row_ - 1, x + i * (row_ - 1));
      y[i] = r[row_ - 1];
    }
  }

 private:
  size_t row_;
  std::vector<float> rows_;
};

class LinReg final : public sdk::Workload {
 public:
  static const MLPH_ParamSpec* params(size_t* n) {
    *n = std::size(kSpecs);
    return kSpecs;
  }
#if LINREG_ABI_MINOR != 2
  static sdk::Benchmark benchmark() { return {kName, 3, kHparams}; }
#endif

  LinReg(const MLPH_HostApi* host, const sdk::Options& c)
      : host_(host),
        features_(c.get_int<int64_t>("model.features", 8)),
        batch_(c.get_int<uint32_t>("train.batch_size", 4)),
        epochs_(c.get_int<uint32_t>("train.epochs", 20)),
        lr_(c.get_number("optimizer.lr")),
        momentum_(c.get_number("optimizer.momentum")),
        target_(c.get_number("train.target_mae")),
        dir_(c.get("data.dir")),
        train_(c.get_int<uint64_t>("data.synthetic.train", 256)),
        valid_(c.get_int<uint64_t>("data.synthetic.valid", 30)),
        seed_(c.get_int<uint64_t>("data.synthetic.seed", 1)),
        log_({{"opt_base_learning_rate", sdk::json_number(lr_)}, {"sgd_opt_momentum", sdk::json_number(momentum_)}}) {}

  MLPH_WorkloadInfo describe() override {
    return {sizeof(MLPH_WorkloadInfo), nullptr, kName, "eval_error", target_, 1, epochs_, batch_, log_.data(),
            log_.size(), 1, 1, nullptr, 0};
  }

  // pred = x.w + b; loss = mse(pred, y); eval: |pred - y| per sample, as relu(d) + relu(-d).
  const MLPH_Graph* build_graph(uint32_t batch, uint64_t seed) override {
    builder_ = std::make_unique<sdk::GraphBuilder>();
    sdk::GraphBuilder& g = *builder_;
    const int64_t b = batch;
    const auto column = [&](const std::string& name) { return g.value(name, MLPH_DTYPE_F32, {b, 1}); };
    const int32_t x = g.value("x", MLPH_DTYPE_F32, {b, features_}), y = column("y");
    const int32_t w = g.value("w", MLPH_DTYPE_F32, {features_, 1}), bias = g.value("b", MLPH_DTYPE_F32, {1});
    g.parameter(w, std::vector<float>(static_cast<size_t>(features_), 0.0f));
    g.parameter(bias, {0.0f});
    const int32_t pred = g.node("dense", "dense", {x, w, bias}, {column("pred")});
    const int32_t loss = g.node("mse", "loss", {pred, y}, {g.value("loss", MLPH_DTYPE_F32, {})});
    const int32_t minus_y = g.node("scale", "minus_y", {y}, {column("minus_y")}, {{"factor", -1.0}});
    const int32_t diff = g.node("add", "diff", {pred, minus_y}, {column("diff")});
    const int32_t minus_diff = g.node("scale", "minus_diff", {diff}, {column("minus_diff")}, {{"factor", -1.0}});
    const int32_t over = g.node("relu", "over", {diff}, {column("over")});
    const int32_t under = g.node("relu", "under", {minus_diff}, {column("under")});
    const int32_t abs_error = g.node("add", "abs_error", {over, under}, {column("abs_error")});
    g.inputs({x, y});
    g.loss(loss);
    g.eval_outputs({abs_error});
    g.optimizer("sgd_keras", {{"momentum", momentum_}});
    g.seed(seed);
    return g.graph();
  }

  std::unique_ptr<sdk::Dataset> open(MLPH_Split split, const MLPH_StorageHandle& storage) override {
    return std::make_unique<LinRegDataset>(host_, dir_, split, storage, features_);
  }

  double learning_rate(uint32_t, uint64_t) override { return lr_; }

  double metric(const double* sums, size_t n_sums, uint64_t samples) override {
    if (n_sums != 1 || samples == 0) fail(MLPH_INVALID_ARGUMENT, "linreg metric: expected one sum over >0 samples");
    return sums[0] / static_cast<double>(samples);
  }

  // y = w.x + 0.3 + noise, w and x uniform in [-1, 1].
  void generate_data(const char* dir) override {
    const auto uniform = [&](uint64_t stream, uint64_t i) { return 2.0f * mlph_uniform(seed_, stream, 0, i) - 1.0f; };
    for (const auto& [split, n] : {std::pair{"train", train_}, std::pair{"validation", valid_}}) {
      const uint64_t stream = std::string(split) == "train" ? 1 : 2;
      std::vector<float> rows;
      for (uint64_t s = 0; s < n; ++s) {
        double y = 0.3 + kNoise * uniform(stream + 10, s);
        for (int64_t f = 0; f < features_; ++f) {
          const float v = uniform(stream, s * static_cast<uint64_t>(features_) + static_cast<uint64_t>(f));
          rows.push_back(v);
          y += uniform(0, static_cast<uint64_t>(f)) * v;
        }
        rows.push_back(static_cast<float>(y));
      }
      const std::string path = std::string(dir) + "/" + split;
      std::filesystem::create_directories(path);
      std::ofstream out(path + "/samples.f32", std::ios::binary);
      out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(float)));
      if (!out) fail(MLPH_UNAVAILABLE, path + "/samples.f32: cannot write");
    }
  }

 private:
  const MLPH_HostApi* host_;
  int64_t features_;
  uint32_t batch_, epochs_;
  double lr_, momentum_, target_;
  std::string dir_;
  uint64_t train_, valid_, seed_;
  sdk::KeyValues log_;
  std::unique_ptr<sdk::GraphBuilder> builder_;
};

}  // namespace

#if LINREG_ABI_MINOR == 2
// The table as a 1.2 build has it: the members 1.3 appended lie beyond its struct_size.
static const MLPH_WorkloadApi* abi12_table() {
  static const MLPH_WorkloadApi api = [] {
    MLPH_WorkloadApi a = *sdk::workload_api<LinReg>();
    a.struct_size = MLPH_STRUCT_SIZE(MLPH_WorkloadApi, sample_order);
    return a;
  }();
  return &api;
}
extern "C" MLPH_EXPORT const MLPH_Plugin* mlph_plugin(void) {
  static const MLPH_Plugin descriptor = {sizeof(MLPH_Plugin), nullptr, MLPH_ABI_MAJOR, 2, MLPH_KIND_WORKLOAD, kName,
                                         "0.1.0", "linear regression, as an ABI 1.2 workload", abi12_table()};
  return &descriptor;
}
#else
MLPH_DEFINE_PLUGIN(MLPH_KIND_WORKLOAD, "linreg", "0.1.0", "linear regression: a third benchmark (tests)",
                   mlph::sdk::workload_api<LinReg>())
#endif
