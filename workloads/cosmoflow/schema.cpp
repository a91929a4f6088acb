#include "schema.hpp"

#include <cstdint>
#include <iterator>
#include <limits>

namespace mlph::cosmoflow {
namespace {

constexpr const char* kFixed =
    "MLPerf HPC closed division: only the global batch size, learning rate, warm-up, decay boundaries and "
    "factors, dropout and weight decay may differ from the reference";

constexpr uint32_t kMin = MLPH_BOUND_MIN, kMax = MLPH_BOUND_MAX, kMinEx = MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE,
                   kOpenUnit = MLPH_BOUND_MIN | MLPH_BOUND_MIN_EXCLUSIVE | MLPH_BOUND_MAX | MLPH_BOUND_MAX_EXCLUSIVE;

// The upper bounds are what the settings' types hold (settings.hpp) and what the model can build:
// every tensor's element count stays far below 2^63, and each block halves the edge (edge <= 2^10).
constexpr double kMaxInt = std::numeric_limits<int>::max(), kMaxUint32 = std::numeric_limits<uint32_t>::max();
constexpr double kMaxBatch = 65536;          // samples per rank
constexpr double kMaxLearningRate = 1e6;     // no optimizer trains beyond; 1e30 or inf is a typo

constexpr MLPH_ParamSpec kSpecs[] = {
    // The model (REFERENCE §1.2). kernel_size 2 with the default sizes is the v0.7 model (open division).
    {"model.kernel_size", MLPH_TYPE_INT, "3", "convolution kernel edge (3 since v1.0; 2 gives the v0.7 model)",
     MLPH_CLOSED_FIXED, kMin | kMax, 1, 16, kFixed},
    {"model.conv_size", MLPH_TYPE_INT, "32", "filters of the first convolution; doubles per layer", MLPH_CLOSED_FIXED,
     kMin | kMax, 1, 4096, kFixed},
    {"model.n_conv_layers", MLPH_TYPE_INT, "5", "conv + leaky ReLU + max-pool blocks", MLPH_CLOSED_FIXED, kMin | kMax, 1,
     10, kFixed},
    {"model.fc1_size", MLPH_TYPE_INT, "128", "units of the first dense layer", MLPH_CLOSED_FIXED, kMin | kMax, 1, 65536,
     kFixed},
    {"model.fc2_size", MLPH_TYPE_INT, "64", "units of the second dense layer", MLPH_CLOSED_FIXED, kMin | kMax, 1, 65536,
     kFixed},
    {"model.dropout", MLPH_TYPE_FLOAT, "0.5", "dropout after the dense layers (logged as dropout)",
     MLPH_CLOSED_TUNABLE, MLPH_BOUND_MIN | kMax | MLPH_BOUND_MAX_EXCLUSIVE, 0, 1,
     "MLPerf HPC rules: dropout must be in [0, 1)"},
    // Optimizer and schedule (REFERENCE §1.3).
    {"optimizer.weight_decay", MLPH_TYPE_FLOAT, "0", "L2 factor on the dense kernels (logged as opt_weight_decay)",
     MLPH_CLOSED_TUNABLE, kMin, 0, 0, "MLPerf HPC rules: opt_weight_decay must be >= 0"},
    {"optimizer.momentum", MLPH_TYPE_FLOAT, "0.9", "SGD momentum (Keras semantics)", MLPH_CLOSED_FIXED, kMin, 0, 0,
     "MLPerf HPC rules: sgd_opt_momentum is fixed at 0.9"},
    {"optimizer.base_lr", MLPH_TYPE_FLOAT, "0.001", "learning rate before batch-size scaling", MLPH_CLOSED_TUNABLE,
     kMinEx | kMax, 0, kMaxLearningRate, "the learning rate must be > 0; beyond 1e6 it is a typo"},
    {"optimizer.scaling", MLPH_TYPE_STRING, "linear", "peak lr = base_lr x (linear | sqrt | none)(GBS / base_batch_size)",
     MLPH_CLOSED_TUNABLE, 0, 0, 0, ""},
    {"optimizer.base_batch_size", MLPH_TYPE_INT, "64", "the batch size base_lr is given for", MLPH_CLOSED_TUNABLE,
     kMinEx | kMax, 0, kMaxInt, ""},
    {"optimizer.warmup_epochs", MLPH_TYPE_INT, "4", "epochs of linear warm-up from base_lr to the peak",
     MLPH_CLOSED_TUNABLE, kMin | kMax, 0, kMaxInt, ""},
    {"optimizer.decay_boundaries", MLPH_TYPE_INT_LIST, "[32, 64]",
     "epochs after which the decay factors apply (strictly after: epoch > boundary)", MLPH_CLOSED_TUNABLE,
     kMinEx | kMax, 0, kMaxInt, "MLPerf HPC rules: decay boundaries are positive integers"},
    {"optimizer.decay_factors", MLPH_TYPE_FLOAT_LIST, "[0.25, 0.125]",
     "absolute factors of the peak lr, one per boundary", MLPH_CLOSED_TUNABLE, kOpenUnit, 0, 1,
     "MLPerf HPC rules: decay factors must be in (0, 1)"},
    // Training.
    {"train.batch_size", MLPH_TYPE_INT, "4", "samples per step on each rank", MLPH_CLOSED_TUNABLE, kMinEx | kMax, 0,
     kMaxBatch, ""},
    {"train.epochs", MLPH_TYPE_INT, "128", "stop (aborted) after this many epochs without reaching the target",
     MLPH_CLOSED_FREE, kMin | kMax, 1, kMaxUint32, ""},
    {"train.target_mae", MLPH_TYPE_FLOAT, "0.124", "quality target: validation mean absolute error",
     MLPH_CLOSED_FIXED, kMinEx, 0, 0, "MLPerf HPC rules: the CosmoFlow target is MAE <= 0.124"},
    // Data (REFERENCE §1.4).
    {"data.dir", MLPH_TYPE_STRING, "", "dataset root holding train/ and validation/", MLPH_CLOSED_FREE, 0, 0, 0, ""},
    {"data.format", MLPH_TYPE_STRING, "tfrecord", "tfrecord (plain or GZIP, detected) or npy", MLPH_CLOSED_FREE, 0, 0,
     0, ""},
    {"data.edge", MLPH_TYPE_INT, "128", "sample edge (128 in the real dataset)", MLPH_CLOSED_FREE, kMin | kMax, 1, 1024,
     ""},
    {"data.apply_log", MLPH_TYPE_BOOL, "true", "feed log(1 + counts) to the model", MLPH_CLOSED_FIXED, 0, 0, 0,
     kFixed},
    {"data.train_samples", MLPH_TYPE_INT, "0", "use the first N training samples (0: all)", MLPH_CLOSED_FREE, kMin, 0,
     0, ""},
    {"data.valid_samples", MLPH_TYPE_INT, "0", "use the first N validation samples (0: all)", MLPH_CLOSED_FREE, kMin,
     0, 0, ""},
    {"data.records_per_file", MLPH_TYPE_INT, "1", "records in every TFRecord file (1 in the real dataset)",
     MLPH_CLOSED_FREE, kMin | kMax, 1, kMaxInt, ""},
    {"data.inflate", MLPH_TYPE_STRING, "libdeflate",
     "what inflates GZIP TFRecords: libdeflate (whole-buffer, 2-3x faster) or zlib (to compare)", MLPH_CLOSED_FREE, 0,
     0, 0, ""},
    {"data.cache", MLPH_TYPE_BOOL, "false", "keep decoded samples in memory after the first epoch", MLPH_CLOSED_FREE,
     0, 0, 0, ""},
    // The synthetic dataset written by --generate-data.
    {"data.synthetic.train", MLPH_TYPE_INT, "256", "training samples to generate", MLPH_CLOSED_FREE, kMin, 1, 0, ""},
    {"data.synthetic.valid", MLPH_TYPE_INT, "64", "validation samples to generate", MLPH_CLOSED_FREE, kMin, 1, 0, ""},
    {"data.synthetic.seed", MLPH_TYPE_INT, "1", "seed of the generated universes", MLPH_CLOSED_FREE, kMin, 0, 0, ""},
    {"data.synthetic.format", MLPH_TYPE_STRING, "tfrecord_gzip", "tfrecord, tfrecord_gzip or npy", MLPH_CLOSED_FREE,
     0, 0, 0, ""},
};

}  // namespace

const MLPH_ParamSpec* param_specs(size_t* n) {
  *n = std::size(kSpecs);
  return kSpecs;
}

}  // namespace mlph::cosmoflow
