#include "schema.hpp"

#include <cstdint>
#include <iterator>
#include <limits>

namespace mlph::deepcam {
namespace {

constexpr const char* kFixed =
    "MLPerf HPC closed division: only the batch sizes, batchnorm_group_size, optimizer (Adam, AdamW or LAMB), "
    "betas, weight decay, learning rate, warm-up, schedule and gradient accumulation may differ from the reference";

constexpr uint32_t kMin = MLPH_BOUND_MIN, kMax = MLPH_BOUND_MAX, kMinEx = MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE,
                   kUnitRight = MLPH_BOUND_MIN | MLPH_BOUND_MAX | MLPH_BOUND_MAX_EXCLUSIVE;

// The upper bounds are what the settings' types hold (settings.hpp) and what the model can build
// (every tensor's element count far below 2^63).
constexpr double kMaxInt = std::numeric_limits<int>::max(), kMaxUint32 = std::numeric_limits<uint32_t>::max();
constexpr double kMaxBatch = 65536;       // samples per rank
constexpr double kMaxLearningRate = 1e6;  // no optimizer trains beyond; 1e30 or inf is a typo
constexpr double kMaxSide = 16384;        // pixels of a sample's side (768 x 1152 in the real dataset)

constexpr MLPH_ParamSpec kSpecs[] = {
    // Optimizer (REFERENCE §2.3); defaults are the reference run (run_training.sh, GBS 2048).
    {"optimizer.name", MLPH_TYPE_STRING, "LAMB", "LAMB, AdamW or Adam (logged as opt_name)", MLPH_CLOSED_TUNABLE, 0,
     0, 0, "MLPerf HPC rules: opt_name is Adam, AdamW or LAMB"},
    {"optimizer.lr", MLPH_TYPE_FLOAT, "0.0055", "start learning rate (opt_lr)", MLPH_CLOSED_TUNABLE, kMinEx | kMax, 0,
     kMaxLearningRate, "the learning rate must be > 0; beyond 1e6 it is a typo"},
    {"optimizer.betas", MLPH_TYPE_FLOAT_LIST, "[0.9, 0.999]", "beta1, beta2 (opt_betas)", MLPH_CLOSED_TUNABLE,
     kUnitRight, 0, 1, "Adam betas must be in [0, 1)"},
    {"optimizer.eps", MLPH_TYPE_FLOAT, "1e-6", "epsilon of Adam, AdamW, LAMB (opt_eps)", MLPH_CLOSED_FIXED, kMinEx, 0,
     0, "MLPerf HPC rules: opt_eps is fixed at 1e-6"},
    {"optimizer.weight_decay", MLPH_TYPE_FLOAT, "0.01", "weight decay on every parameter (opt_weight_decay)",
     MLPH_CLOSED_TUNABLE, kMin, 0, 0, "MLPerf HPC rules: opt_weight_decay must be >= 0"},
    {"optimizer.max_grad_norm", MLPH_TYPE_FLOAT, "1.0", "LAMB's global gradient-norm clip (opt_max_grad_norm)",
     MLPH_CLOSED_FIXED, kMinEx, 0, 0, "MLPerf HPC DeepCAM: LAMB parameters are fixed at the apex defaults"},
    // Learning-rate schedule (REFERENCE §2.4, §2.10): step-based.
    {"scheduler.type", MLPH_TYPE_STRING, "multistep", "multistep or cosine_annealing (scheduler_type)",
     MLPH_CLOSED_TUNABLE, 0, 0, 0, "MLPerf HPC rules: scheduler_type is multistep or cosine_annealing"},
    {"scheduler.milestones", MLPH_TYPE_INT_LIST, "[800]", "multistep: optimizer steps after warm-up that decay the lr",
     MLPH_CLOSED_TUNABLE, 0, 0, 0, ""},
    {"scheduler.decay_rate", MLPH_TYPE_FLOAT, "0.1", "multistep: lr factor per milestone", MLPH_CLOSED_TUNABLE,
     MLPH_BOUND_MIN | MLPH_BOUND_MAX, 0, 1, "the MLPerf checker requires scheduler_decay_rate <= 1"},
    {"scheduler.t_max", MLPH_TYPE_INT, "9000", "cosine_annealing: steps from the peak to eta_min", MLPH_CLOSED_TUNABLE,
     kMin, 1, 0, "MLPerf HPC rules: scheduler_t_max must be >= 1"},
    {"scheduler.eta_min", MLPH_TYPE_FLOAT, "0", "cosine_annealing: the final lr", MLPH_CLOSED_TUNABLE, kMin | kMax, 0,
     kMaxLearningRate, "MLPerf HPC rules: scheduler_eta_min must be >= 0; beyond 1e6 it is a typo"},
    {"scheduler.lr_warmup_steps", MLPH_TYPE_INT, "400", "linear warm-up steps", MLPH_CLOSED_TUNABLE, kMin, 0, 0,
     "MLPerf HPC rules: scheduler_lr_warmup_steps must be >= 0"},
    {"scheduler.lr_warmup_factor", MLPH_TYPE_FLOAT, "1.0", "warm-up ends near factor x lr", MLPH_CLOSED_TUNABLE,
     kMin | kMax, 1, kMaxLearningRate, "MLPerf HPC rules: scheduler_lr_warmup_factor must be >= 1; beyond 1e6 it is a typo"},
    // Training.
    {"train.batch_size", MLPH_TYPE_INT, "2", "samples per step on each rank (local_batch_size)", MLPH_CLOSED_TUNABLE,
     kMinEx | kMax, 0, kMaxBatch, ""},
    {"train.epochs", MLPH_TYPE_INT, "200", "stop (aborted) after this many epochs without reaching the target",
     MLPH_CLOSED_FREE, kMin | kMax, 1, kMaxUint32, ""},
    {"train.target_iou", MLPH_TYPE_FLOAT, "0.82", "quality target: mean validation IoU", MLPH_CLOSED_FIXED, kMinEx, 0,
     0, "MLPerf HPC rules: the DeepCAM target is IoU >= 0.82"},
    {"train.batchnorm_group_size", MLPH_TYPE_INT, "1", "ranks sharing batch-norm statistics (1: per rank)",
     MLPH_CLOSED_TUNABLE, kMin | kMax, 1, kMaxUint32, "MLPerf HPC rules: batchnorm_group_size must be >= 1"},
    {"train.gradient_accumulation_frequency", MLPH_TYPE_INT, "1", "micro-batches per optimizer step",
     MLPH_CLOSED_TUNABLE, kMin | kMax, 1, kMaxUint32, "MLPerf HPC rules: gradient_accumulation_frequency must be >= 1"},
    // Data (REFERENCE §2.6).
    {"data.dir", MLPH_TYPE_STRING, "", "dataset root holding train/, validation/ and stats.h5", MLPH_CLOSED_FREE, 0, 0,
     0, ""},
    {"data.height", MLPH_TYPE_INT, "768", "sample height (768 in the real dataset; a multiple of 16)",
     MLPH_CLOSED_FREE, kMin | kMax, 16, kMaxSide, ""},
    {"data.width", MLPH_TYPE_INT, "1152", "sample width (1152 in the real dataset; a multiple of 16)",
     MLPH_CLOSED_FREE, kMin | kMax, 16, kMaxSide, ""},
    {"data.channels", MLPH_TYPE_INT, "16", "input channels (all 16 in the reference)", MLPH_CLOSED_FIXED, kMin | kMax, 1,
     kMaxInt, kFixed},
    {"data.train_samples", MLPH_TYPE_INT, "0", "use the first N training samples of the reference order (0: all)",
     MLPH_CLOSED_FREE, kMin, 0, 0, ""},
    {"data.valid_samples", MLPH_TYPE_INT, "0", "use the first N validation samples (0: all)", MLPH_CLOSED_FREE, kMin,
     0, 0, ""},
    // The synthetic dataset written by --generate-data.
    {"data.synthetic.train", MLPH_TYPE_INT, "256", "training samples to generate", MLPH_CLOSED_FREE, kMin, 1, 0, ""},
    {"data.synthetic.valid", MLPH_TYPE_INT, "64", "validation samples to generate", MLPH_CLOSED_FREE, kMin, 1, 0, ""},
    {"data.synthetic.seed", MLPH_TYPE_INT, "1", "seed of the generated weather", MLPH_CLOSED_FREE, kMin, 0, 0, ""},
};

}  // namespace

const MLPH_ParamSpec* param_specs(size_t* n) {
  *n = std::size(kSpecs);
  return kSpecs;
}

}  // namespace mlph::deepcam
