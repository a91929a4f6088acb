/* mlperf-hpc plug-in ABI: compute backends (reference, onednn-cpu, cuda, ...). */
#ifndef MLPH_BACKEND_H
#define MLPH_BACKEND_H

#include "mlph/comms.h"
#include "mlph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MLPH_Backend MLPH_Backend; /* a device context */
typedef struct MLPH_Model MLPH_Model;     /* a compiled graph with its weights and optimizer state */

typedef struct MLPH_StepArgs {
  size_t struct_size;
  const MLPH_Extension* ext;
  double learning_rate;
  uint64_t step; /* global optimizer step, 0-based (Adam's t is step + 1) */
  /* ABI 1.2: gradient accumulation. A caller of ABI 1.0/1.1 (struct_size short of these) means
   * micro_step = step and apply_update = 1. */
  uint64_t micro_step;   /* global micro-batch counter, 0-based: the counter of in-graph randomness */
  uint32_t apply_update; /* 0: add this micro-batch's gradient to the pending sum and stop there (weights and
                          * optimizer state untouched); else: add it, average the sum over ranks, add the
                          * regularization, update, and start a new sum */
  /* ABI 1.6: 1: the caller reads this step's loss later, with read_loss, if at all; the backend need
   * not wait for the step to finish and may leave MLPH_StepResult.loss NaN. 0 (or an older caller):
   * the loss is in the result when train_step returns. It lies in 1.2's trailing padding (sizeof
   * stays 48), which an older caller's struct_size covers: read it only from a core of ABI 1.6 or
   * later (MLPH_HostApi.abi_minor; mlph::sdk::read_step_args does). */
  uint32_t defer_loss;
} MLPH_StepArgs;

typedef struct MLPH_StepResult {
  size_t struct_size;
  const MLPH_Extension* ext;
  double loss; /* the graph's loss, regularization included */
} MLPH_StepResult;

/* ABI 1.6: what a backend learns at create beyond its options: where it runs in the job, so that it
 * can pick its device (local rank -> device) before compile. */
typedef struct MLPH_BackendCreateArgs {
  size_t struct_size;
  const MLPH_Extension* ext;
  const MLPH_HostApi* host;     /* must outlive the backend */
  const MLPH_KeyValue* options; /* borrowed for the call, as create's */
  size_t n_options;
  MLPH_Topology topology; /* this process in the job: rank, size, local_rank, local_size, nodes */
} MLPH_BackendCreateArgs;

/* ABI 1.6: what a backend reports about the device it runs on, for the log and the system
 * description (accelerators_per_node, the submission's system JSON). Strings are owned by the backend
 * and live as long as it. */
typedef struct MLPH_BackendAttributes {
  size_t struct_size;
  const MLPH_Extension* ext;
  MLPH_Device device;           /* the device the models run on: {MLPH_DEVICE_HOST, 0} for a CPU backend */
  const char* device_name;      /* e.g. "NVIDIA H100 80GB HBM3"; a CPU backend may leave it NULL */
  int32_t devices_per_node;     /* accelerators of this kind visible on this node; 0 for a CPU backend */
  uint64_t device_memory_bytes; /* the device's memory; 0 for a CPU backend */
  const char* precision;        /* the compute precision in use: "fp32", "tf32", "bf16" or "fp16" */
  uint32_t deterministic;       /* 1: a step's results depend only on its inputs and state (bitwise) */
} MLPH_BackendAttributes;

typedef struct MLPH_BackendApi {
  size_t struct_size;
  const MLPH_Extension* ext;

  /* Opens the device. `options` (e.g. "threads") are borrowed for the call; an unknown option is an
   * MLPH_INVALID_ARGUMENT error naming it. `host` must outlive the backend. On success *out is
   * owned by the caller and freed with destroy. */
  MLPH_Error* (*create)(const MLPH_HostApi* host, const MLPH_KeyValue* options, size_t n_options,
                        MLPH_Backend** out);
  void (*destroy)(MLPH_Backend* backend);

  /* Compiles `graph` (borrowed for the call: everything needed is copied) with its initial weights.
   * `comms` may be NULL (one rank); when given it must outlive the model, and train_step averages
   * gradients over its ranks. *out is owned by the caller, freed with model_destroy before the backend. */
  MLPH_Error* (*compile)(MLPH_Backend* backend, const MLPH_Graph* graph, const MLPH_CommsHandle* comms,
                         MLPH_Model** out);
  void (*model_destroy)(MLPH_Model* model);

  /* One training step: forward, backward, gradient averaging, optimizer update.
   * `inputs` match graph.inputs in order, dtype and shape; they are borrowed for the call
   * (host or the backend's device memory). ABI 1.6: a core of ABI 1.6 or later (host->abi_minor)
   * leaves them unchanged until the next call on the model has returned, so a backend may copy them
   * to its device asynchronously; with `defer_loss` the step itself may still run when train_step
   * returns, and an error it meets is returned by the next call on the model. */
  MLPH_Error* (*train_step)(MLPH_Model* model, const MLPH_Tensor* inputs, size_t n_inputs,
                            const MLPH_StepArgs* args, MLPH_StepResult* out);

  /* Forward in inference mode (no dropout). Writes graph.eval_outputs into `outputs`, caller-owned
   * host tensors of the declared shapes. */
  MLPH_Error* (*eval_step)(MLPH_Model* model, const MLPH_Tensor* inputs, size_t n_inputs,
                           MLPH_Tensor* outputs, size_t n_outputs);

  /* Copies parameter `index` (graph.params order) into / from a caller-owned host float32 tensor
   * in the graph's layout. */
  MLPH_Error* (*read_parameter)(MLPH_Model* model, size_t index, MLPH_Tensor* dst);
  MLPH_Error* (*write_parameter)(MLPH_Model* model, size_t index, const MLPH_Tensor* src);

  /* Copies the gradient of parameter `index` from the last train_step: the one the last update used
   * (before the update, after averaging over ranks, regularization included), or after a micro-step
   * with apply_update 0 this rank's pending sum. For conformance checks. */
  MLPH_Error* (*read_gradient)(MLPH_Model* model, size_t index, MLPH_Tensor* dst);

  /* ABI 1.4, optional (callers check struct_size and NULL): the training state beyond the
   * parameters, for checkpoints. Slot `slot` of parameter `index` (graph.params order), copied into /
   * from a caller-owned host float32 tensor of the parameter's shape. The slots (docs/ops.md,
   * "Optimizers"; every backend uses these names, so a checkpoint means the same everywhere):
   *  - the optimizer's, of trainable parameters: "velocity" (sgd_keras), "m" and "v" (adam, adamw,
   *    lamb); zero before the first update;
   *  - "pending_gradient": this rank's gradient sum of an accumulation window still open (the last
   *    train_step had apply_update 0; reading it otherwise is MLPH_FAILED_PRECONDITION). Writing it
   *    opens the window: the next train_step adds to it, as if the window's earlier micro-batches had
   *    run on this model.
   * A slot the parameter does not have (a frozen parameter, another optimizer's): MLPH_NOT_FOUND. */
  MLPH_Error* (*read_state)(MLPH_Model* model, size_t index, const char* slot, MLPH_Tensor* dst);
  MLPH_Error* (*write_state)(MLPH_Model* model, size_t index, const char* slot, const MLPH_Tensor* src);

  /* ABI 1.6 (callers check struct_size and NULL; the SDK fills them all). */
  /* create, told where the backend runs. A core of 1.6 calls it instead of create when present. */
  MLPH_Error* (*create_with)(const MLPH_BackendCreateArgs* args, MLPH_Backend** out);
  /* The device the backend runs on. `out->struct_size` is the caller's; the backend fills no more. */
  MLPH_Error* (*attributes)(MLPH_Backend* backend, MLPH_BackendAttributes* out);
  /* Optional (NULL: the caller uses ordinary host memory): `bytes` of host memory the backend copies
   * to its device fastest (pinned), for input batches, aligned to 64 bytes, reused by the caller for
   * the whole run. Tensors in it carry device MLPH_DEVICE_HOST_PINNED. Freed with free_input before
   * the backend is destroyed; free_input(NULL) is a no-op. */
  MLPH_Error* (*alloc_input)(MLPH_Backend* backend, size_t bytes, void** out);
  void (*free_input)(MLPH_Backend* backend, void* data);
  /* The loss of the last train_step (regularization included), waiting for the step to finish; an
   * error the step met is returned here. MLPH_FAILED_PRECONDITION before any train_step. */
  MLPH_Error* (*read_loss)(MLPH_Model* model, double* loss);
} MLPH_BackendApi;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_BACKEND_H */
