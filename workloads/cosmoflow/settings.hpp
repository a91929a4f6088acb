// The validated CosmoFlow configuration as typed values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/sdk/util/options.hpp"

namespace mlph::cosmoflow {

struct ModelSettings {
  int kernel_size = 3, conv_size = 32, n_conv_layers = 5, fc1_size = 128, fc2_size = 64;
  double dropout = 0.5;
  double weight_decay = 0.0;  // Keras l2 on the dense kernels
  int edge = 128;             // input volume edge
  // parallel.spatial: ranks per sample along D, H, W (all 1: each rank holds whole samples).
  std::vector<int64_t> grid{1, 1, 1};
};

struct ScheduleSettings {
  double base_lr = 0.001;
  std::string scaling = "linear";
  int base_batch_size = 64;
  int warmup_epochs = 4;
  std::vector<int> decay_boundaries{32, 64};
  std::vector<double> decay_factors{0.25, 0.125};
  uint64_t global_batch_size = 4;
};

struct DataSettings {
  std::string dir, format = "tfrecord";
  int edge = 128;
  uint64_t train_samples = 0, valid_samples = 0;
  int records_per_file = 1;
  bool cache = false;
  std::string inflate = "libdeflate";  // GZIP TFRecords' inflater: libdeflate, or zlib to compare
};

struct Settings {
  ModelSettings model;
  ScheduleSettings schedule;
  DataSettings data;
  double momentum = 0.9;
  uint32_t batch_size = 4, epochs = 128;
  double target_mae = 0.124;
  uint64_t synthetic_train = 256, synthetic_valid = 64, synthetic_seed = 1;
  std::string synthetic_format = "tfrecord_gzip";
};

// Throws mlph::sdk::Error (MLPH_INVALID_ARGUMENT) naming the key for inconsistent values.
Settings parse_settings(const mlph::sdk::Options& config);

}  // namespace mlph::cosmoflow
