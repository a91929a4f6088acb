/* mlperf-hpc plug-in ABI: the model graph a workload hands to a backend.
 *
 * The workload describes its model once, as data: values (typed tensors), nodes (ops over values,
 * in topological order), parameters (values with initial contents), the per-step inputs, the
 * scalar loss that train_step minimizes, the eval outputs eval_step returns, and the optimizer.
 * The backend compiles it into whatever it likes. All pointers are borrowed: they live as long as
 * the workload that built the graph, and a backend copies what it needs during compile.
 *
 * Layout conventions (every backend honours them at its boundary, whatever it uses inside):
 *  - activations are channels-last: [N, spatial..., C];
 *  - conv weights are [spatial..., C_in/groups, C_out] (Keras "DHWIO"), dense weights [in, out];
 *  - shapes include the batch dimension; a graph is compiled for one batch size.
 * The op catalogue (names, inputs, attributes, exact semantics) is docs/ops.md, and as data
 * mlph/sdk/graph/op_schema.hpp; an op a backend does not know is an MLPH_UNIMPLEMENTED error from compile
 * naming the op, never a silent skip. Backends check graphs with mlph/sdk/graph/validate.hpp.
 */
#ifndef MLPH_GRAPH_H
#define MLPH_GRAPH_H

#include "mlph/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An attribute: numbers as doubles (integers are exact to 2^53), or text. */
typedef struct MLPH_Attr {
  const char* key;
  const double* values; /* NULL when the attribute is text */
  size_t n_values;
  const char* text;     /* NULL when the attribute is numeric */
} MLPH_Attr;

typedef struct MLPH_Value {
  const char* name;
  MLPH_DType dtype;
  int32_t ndim;
  int64_t shape[MLPH_MAX_DIMS];
} MLPH_Value;

typedef struct MLPH_Node {
  const char* op;   /* e.g. "conv", "leaky_relu", "max_pool", "dense", "mse" (docs/ops.md) */
  const char* name; /* unique, for messages and per-layer timings */
  const int32_t* inputs;  /* value indices */
  size_t n_inputs;
  const int32_t* outputs; /* value indices */
  size_t n_outputs;
  const MLPH_Attr* attrs;
  size_t n_attrs;
} MLPH_Node;

enum { MLPH_PARAM_TRAINABLE = 1u };

/* The op-set: which catalogue (ops, attributes, optimizers) a graph is written against. Op-set 1 is
 * the catalogue of ABI 1.2; each later op-set only adds to it (docs/ops.md lists what each added):
 * op-set 2 (ABI 1.5) the spatial ops halo_exchange and spatial_gather.
 * A graph whose struct_size does not reach `opset` (a workload older than ABI 1.3) is op-set 1. */
#define MLPH_OPSET 2

typedef struct MLPH_Parameter {
  int32_t value;       /* the value this parameter defines; float32 */
  const float* init;   /* initial contents, dense row-major, numel(value) floats */
  double l2;           /* adds l2 * sum(w^2) to the loss (Keras kernel_regularizer); 0 = none */
  double weight_decay; /* multiplier on the optimizer's decoupled weight decay (AdamW/LAMB masks) */
  uint32_t flags;      /* MLPH_PARAM_* */
} MLPH_Parameter;

/* Optimizers: "sgd_keras" (attrs: momentum; v = m*v - lr*g; w += v), "adam", "adamw", "lamb"
 * (attrs: beta1, beta2, eps, weight_decay, max_grad_norm); see docs/ops.md. */
typedef struct MLPH_Optimizer {
  const char* name;
  const MLPH_Attr* attrs;
  size_t n_attrs;
} MLPH_Optimizer;

typedef struct MLPH_Graph {
  size_t struct_size;
  const MLPH_Extension* ext;
  const MLPH_Value* values;
  size_t n_values;
  const MLPH_Node* nodes; /* topological order */
  size_t n_nodes;
  const MLPH_Parameter* params;
  size_t n_params;
  const int32_t* inputs;  /* values the caller feeds at every step, in this order */
  size_t n_inputs;
  int32_t loss;           /* scalar float32 value minimized by train_step */
  const int32_t* eval_outputs; /* values eval_step returns, in this order */
  size_t n_eval_outputs;
  MLPH_Optimizer optimizer;
  uint64_t seed;          /* for in-graph randomness (dropout), see mlph_uniform */
  /* ABI 1.3 */
  uint32_t opset;         /* MLPH_OPSET of the workload's headers (>= 1); see above */
} MLPH_Graph;

#ifdef __cplusplus
}
#endif
#endif /* MLPH_GRAPH_H */
