// The validated DeepCAM configuration as typed values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlph/sdk/util/options.hpp"

namespace mlph::deepcam {

struct OptimizerSettings {
  std::string name = "LAMB";  // as logged in opt_name: LAMB, AdamW or Adam
  double lr = 0.0055;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // LAMB only (apex FusedLAMB default)
};

// How the graph trains across micro-batches and ranks.
struct TrainingSettings {
  // Micro-batches per update; the graph divides the loss by it, as the reference does.
  uint32_t gradient_accumulation_frequency = 1;
  // Consecutive ranks whose batches share batch-norm statistics (SyncBatchNorm; 1: per rank).
  uint32_t batchnorm_group_size = 1;
};

// Step-based learning-rate schedule (REFERENCE §2.4, §2.10).
struct ScheduleSettings {
  double start_lr = 0.0055;
  std::string type = "multistep";  // or cosine_annealing
  std::vector<int64_t> milestones{800};
  double decay_rate = 0.1;
  int64_t t_max = 9000;
  double eta_min = 0.0;
  int64_t warmup_steps = 400;
  double warmup_factor = 1.0;
};

struct DataSettings {
  std::string dir;
  int height = 768, width = 1152, channels = 16;
  uint64_t train_samples = 0, valid_samples = 0;  // 0: all
};

struct SyntheticSettings {
  uint64_t train = 256, valid = 64, seed = 1;
};

struct Settings {
  OptimizerSettings optimizer;
  ScheduleSettings schedule;
  DataSettings data;
  SyntheticSettings synthetic;
  TrainingSettings training;
  uint32_t batch_size = 2, epochs = 200;
  double target_iou = 0.82;
};

// Throws mlph::sdk::Error (MLPH_INVALID_ARGUMENT) naming the key for inconsistent values.
Settings parse_settings(const mlph::sdk::Options& config);

}  // namespace mlph::deepcam
