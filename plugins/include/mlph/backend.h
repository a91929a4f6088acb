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
} MLPH_StepArgs;

typedef struct MLPH_StepResult {
  size_t struct_size;
  const MLPH_Extension* ext;
  double loss; /* the graph's loss, regularization included */
} MLPH_StepResult;

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
   * (host or the backend's device memory). */
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
} MLPH_BackendApi;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_BACKEND_H */
