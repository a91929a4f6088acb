/* mlperf-hpc plug-in ABI: workloads (cosmoflow, deepcam): the benchmark's definition. */
#ifndef MLPH_WORKLOAD_H
#define MLPH_WORKLOAD_H

#include "mlph/graph.h"
#include "mlph/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MLPH_Workload MLPH_Workload;
typedef struct MLPH_Dataset MLPH_Dataset;

/* Values are YAML text. The core refuses an INT that is no decimal integer of 64 bits and a FLOAT
 * that is not finite (inf, nan), in every division; a workload reads each into its own type with
 * the SDK's range-checked getters (sdk::Options::get_int<T>), and states in `max` what that type
 * (or the model) can take, so the core names the key and its origin. */
typedef enum MLPH_ParamType {
  MLPH_TYPE_INT = 0,
  MLPH_TYPE_FLOAT = 1,
  MLPH_TYPE_BOOL = 2,
  MLPH_TYPE_STRING = 3,
  MLPH_TYPE_INT_LIST = 4,
  MLPH_TYPE_FLOAT_LIST = 5
} MLPH_ParamType;

/* What the closed division allows for a key (MLPerf HPC rules, "closed division hyperparameters"). */
typedef enum MLPH_ClosedRule {
  MLPH_CLOSED_FIXED = 0,   /* must keep the reference value (the default) */
  MLPH_CLOSED_TUNABLE = 1, /* may change within [min, max] (each element, for lists) */
  MLPH_CLOSED_FREE = 2     /* not a hyperparameter: paths, logging, run-length options */
} MLPH_ClosedRule;

enum {
  MLPH_BOUND_MIN = 1u,           /* `min` applies */
  MLPH_BOUND_MAX = 2u,           /* `max` applies */
  MLPH_BOUND_MIN_EXCLUSIVE = 4u, /* v > min rather than v >= min */
  MLPH_BOUND_MAX_EXCLUSIVE = 8u  /* v < max rather than v <= max */
};

/* One configuration key. Static data: lives as long as the library is loaded. The core layers
 * defaults < config file < --set, rejects unknown keys and checks types, bounds and closed rules
 * from this table before the workload sees a value. */
typedef struct MLPH_ParamSpec {
  const char* key;           /* dotted, e.g. "optimizer.base_lr" */
  MLPH_ParamType type;
  const char* default_value; /* YAML text */
  const char* help;
  MLPH_ClosedRule closed;
  uint32_t bounds;           /* MLPH_BOUND_* */
  double min;
  double max;
  const char* rule;          /* the rule a closed-division violation breaks, quoted in the error */
} MLPH_ParamSpec;

typedef struct MLPH_WorkloadInfo {
  size_t struct_size;
  const MLPH_Extension* ext;
  const char* benchmark;   /* submission_benchmark, e.g. "cosmoflow" */
  const char* metric_key;  /* eval_error or eval_accuracy */
  double target;           /* quality target of the metric */
  int32_t lower_is_better; /* 1: converged when metric <= target; 0: when metric >= target */
  uint32_t max_epochs;
  uint32_t local_batch_size;
  /* Hyperparameters to log after run_start, in order: key and value as JSON text. */
  const MLPH_KeyValue* log_entries;
  size_t n_log_entries;
  /* ABI 1.2: micro-batches per optimizer step (gradient accumulation); 0 or 1: none. The workload
   * scales its loss by 1/gradient_accumulation in the graph, the runner defers the update. */
  uint32_t gradient_accumulation;
  /* ABI 1.3: 1 when every eval output has one row per sample (shape [batch, ...]): the runner then
   * pads a partial last validation batch and leaves the padding's rows out of the sums, so every
   * validation sample counts. 0: the outputs are already summed over the batch, and the runner
   * evaluates whole global batches only. Read only from workloads of ABI 1.3 or later: this member
   * lies in 1.2's trailing padding, so a 1.2 workload's struct_size covers it. */
  uint32_t eval_per_sample;
  /* ABI 1.5: spatial parallelism (the core's parallel.spatial, a grid of ranks per sample, which the
   * workload reads from its config and builds its graph for: each rank's part of every split input,
   * halo_exchange before the convolutions, spatial_gather where the parts become whole; docs/ops.md).
   * One entry per graph input: the input dim that the grid's first dim splits (grid dim j splits
   * input dim spatial_dims[i] + j, evenly, row-major rank order within the sample's ranks), or -1 for
   * an input every rank of the sample reads whole (labels). NULL: no spatial graphs; the core refuses
   * a grid other than 1. */
  const int32_t* spatial_dims;
  size_t n_spatial_dims;
} MLPH_WorkloadInfo;

/* ABI 1.3: what a workload says about its benchmark before any instance exists (a submission
 * campaign and hyperparameter borrowing start before `create`). Static data. */
typedef struct MLPH_BenchmarkInfo {
  size_t struct_size;
  const MLPH_Extension* ext;
  const char* benchmark;    /* submission_benchmark, e.g. "cosmoflow": also the results directory's name */
  uint32_t submission_runs; /* result files a time-to-solution submission needs (the MLPerf HPC rules:
                             * 10 for CosmoFlow, 5 for DeepCAM); the fewest model instances of a
                             * throughput one */
  /* The MLPerf log keys borrow_hparams reads: the hyperparameters another run logs. */
  const char* const* hparam_log_keys;
  size_t n_hparam_log_keys;
} MLPH_BenchmarkInfo;

/* Receives one configuration assignment from borrow_hparams: `config_key` = `value` (YAML text),
 * derived from the logged `log_key`. The strings live only for the call. */
typedef void (*MLPH_AssignFn)(void* ctx, const char* log_key, const char* config_key, const char* value);

/* ABI 1.4: one tensor of the reference implementation's model, as a graph parameter becomes it when
 * trained weights are exported (mlperf-run --export-weights, mlph-export): the reference's name
 * for it (a PyTorch state_dict key) and its layout. */
typedef enum MLPH_ExportKind {
  /* float32: reshape(transpose(parameter, perm), shape) */
  MLPH_EXPORT_TENSOR = 0,
  /* int64 scalar (ndim 0): the training micro-batches the model has seen (PyTorch BatchNorm's
   * num_batches_tracked, which the reference keeps beside the running statistics) */
  MLPH_EXPORT_BATCH_COUNT = 1
} MLPH_ExportKind;

typedef struct MLPH_ExportEntry {
  size_t struct_size;
  const MLPH_Extension* ext;
  const char* key;      /* the reference's name, e.g. "conv_seq.0.conv.weight" */
  MLPH_ExportKind kind;
  int32_t ndim;         /* the reference tensor's shape */
  int64_t shape[MLPH_MAX_DIMS];
  /* TENSOR: dim i of the transpose is the parameter's dim perm[i] (the parameter's ndim entries):
   * a conv weight [k, k, Ci, Co] to PyTorch's [Co, Ci, k, k] is perm {3, 2, 0, 1}. */
  int32_t perm[MLPH_MAX_DIMS];
} MLPH_ExportEntry;

/* Receives one entry from reference_layout; the entry and its strings live only for the call. */
typedef void (*MLPH_ExportFn)(void* ctx, const MLPH_ExportEntry* entry);

typedef enum MLPH_Split { MLPH_SPLIT_TRAIN = 0, MLPH_SPLIT_VALIDATION = 1 } MLPH_Split;

/* ABI 1.5: which part of each sample dataset_read_part delivers (spatial parallelism). Input i's
 * tensor receives the box of the whole sample's input i that starts at offsets[i * MLPH_MAX_DIMS + d]
 * along each dim d and spans the tensor's shape (dim 0, the batch, starts at 0). */
typedef struct MLPH_SamplePart {
  size_t struct_size;
  const MLPH_Extension* ext;
  const int64_t* offsets; /* n_inputs x MLPH_MAX_DIMS */
  size_t n_inputs;
} MLPH_SamplePart;

typedef struct MLPH_WorkloadApi {
  size_t struct_size;
  const MLPH_Extension* ext;

  /* The configuration schema; *n receives the count. Static, never fails. */
  const MLPH_ParamSpec* (*params)(size_t* n);

  /* `config` holds every key of the schema, validated, as YAML text (borrowed for the call).
   * `host` must outlive the workload. */
  MLPH_Error* (*create)(const MLPH_HostApi* host, const MLPH_KeyValue* config, size_t n_config,
                        MLPH_Workload** out);
  void (*destroy)(MLPH_Workload* workload);

  /* *out and what it points to live as long as the workload. The caller sets out->struct_size (0 is
   * read as ABI 1.1's size); the workload fills no more than that and sets it to what it filled. */
  MLPH_Error* (*describe)(MLPH_Workload* workload, MLPH_WorkloadInfo* out);

  /* The model for `batch` samples per step, initial weights drawn from `seed`.
   * *out lives as long as the workload (or the next build_graph call). */
  MLPH_Error* (*build_graph)(MLPH_Workload* workload, uint32_t batch, uint64_t seed, const MLPH_Graph** out);

  /* Opens a split of the dataset under the configured data directory, read through `storage`
   * (borrowed; must outlive the dataset). Missing, empty or malformed data is an error naming the
   * file. *out is freed with dataset_close, before the workload. */
  MLPH_Error* (*dataset_open)(MLPH_Workload* workload, MLPH_Split split, const MLPH_StorageHandle* storage,
                              MLPH_Dataset** out);
  void (*dataset_close)(MLPH_Dataset* dataset);
  MLPH_Error* (*dataset_size)(MLPH_Dataset* dataset, uint64_t* out);
  /* Decodes samples `indices[0..n)` into caller-owned host tensors shaped like the graph inputs
   * with batch n. May run on another thread than the backend; one call at a time per dataset. */
  MLPH_Error* (*dataset_read)(MLPH_Dataset* dataset, const uint64_t* indices, size_t n, MLPH_Tensor* inputs,
                              size_t n_inputs);

  /* Learning rate of an optimizer step: `epoch` 0-based, `step` the global 0-based optimizer step
   * (micro-batches / gradient_accumulation). */
  MLPH_Error* (*learning_rate)(MLPH_Workload* workload, uint32_t epoch, uint64_t step, double* out);

  /* The quality metric from the eval outputs summed over all validation batches and ranks. */
  MLPH_Error* (*metric)(MLPH_Workload* workload, const double* sums, size_t n_sums, uint64_t samples,
                        double* out);

  /* Writes a synthetic dataset in the workload's real on-disk format to `dir`
   * (train/ and validation/ beneath it), sized by the configuration. */
  MLPH_Error* (*generate_data)(MLPH_Workload* workload, const char* dir);

  /* ABI 1.2, optional (callers check struct_size and NULL). The order of the `n` training samples in
   * epoch `epoch` (0-based): a permutation written to order[0..n), the same on every rank, which the
   * runner then deals out rank by rank (order[rank], order[rank + ranks], ...). NULL: the runner's
   * own shuffle, seeded by the run's seed and the epoch. */
  MLPH_Error* (*sample_order)(MLPH_Workload* workload, uint32_t epoch, uint64_t n, uint64_t* order);

  /* ABI 1.3, optional (callers check struct_size and NULL). Static, never fails; the result is
   * static data. NULL: the benchmark is the plug-in's name, and the rest is unknown. */
  const MLPH_BenchmarkInfo* (*benchmark_info)(void);

  /* ABI 1.3, optional: hyperparameter borrowing (the MLPerf HPC rules let a closed submission use
   * another submission's hyperparameters). `logged` holds another run's values by MLPerf log key
   * (keys among benchmark_info's hparam_log_keys, each once; values as JSON text: "0.5",
   * "[16, 32]", "\"sgd\""); `world_size` is the rank count of the run that borrows. Calls `assign`
   * for every config key the values set, in order; a value that cannot be used (wrong type, against
   * the rules, not convertible) is an error whose message starts with "<log key> = <value>: ". The
   * caller then checks every assignment against the schema and the closed rules. Static: needs no
   * workload instance. NULL: the workload cannot borrow. */
  MLPH_Error* (*borrow_hparams)(const MLPH_HostApi* host, const MLPH_KeyValue* logged, size_t n_logged,
                                int64_t world_size, MLPH_AssignFn assign, void* ctx);

  /* ABI 1.4, optional (callers check struct_size and NULL): what the graph parameter `param` (its
   * value: name, dtype, shape) is in the reference implementation, for exporting trained weights in
   * the reference's names and layouts. Calls `emit` for each reference tensor it gives, in order:
   * none for a parameter the reference does not have (e.g. input normalization constants, which the
   * reference applies in its data loader). A name the workload's graphs never use: MLPH_NOT_FOUND.
   * Static: needs no workload instance (mlph-export converts a checkpoint with the library alone).
   * NULL: the workload cannot export. */
  MLPH_Error* (*reference_layout)(const MLPH_HostApi* host, const MLPH_Value* param, MLPH_ExportFn emit, void* ctx);
  /* ABI 1.5, optional (callers check struct_size and NULL; needed where describe gives spatial_dims).
   * As dataset_read, but only `part` of every sample: the box of each input that this rank holds
   * (MLPH_SamplePart), read from the file alone where the format allows. A box outside the sample is
   * MLPH_INVALID_ARGUMENT. */
  MLPH_Error* (*dataset_read_part)(MLPH_Dataset* dataset, const uint64_t* indices, size_t n, MLPH_Tensor* inputs,
                                   size_t n_inputs, const MLPH_SamplePart* part);
} MLPH_WorkloadApi;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_WORKLOAD_H */
