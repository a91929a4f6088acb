// How the runtime picks algorithms at compile, on the GPU: the plan gives the search space and the
// budget rule, the runtime asks the libraries and applies them.
//
// cuDNN convolutions (forward, backward-data, backward-filter): the runtime lists candidates
// (cudnnFindConvolution*AlgorithmEx, timed, or cudnnGetConvolution*Algorithm_v7, the library's
// heuristic order), copies each result into a Candidate, and choose() picks:
//   - only results with status CUDNN_STATUS_SUCCESS and a workspace within the cap;
//   - fp32 (math fma): no tensor cores (a result with mathType other than CUDNN_FMA_MATH would use
//     TF32); fp32 and tf32 never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (it rounds fp32 data to fp16);
//     bf16 and fp16 (math tensor_op) take every math type cuDNN reports: their data is half already,
//     so no candidate is dropped for its math type;
//   - deterministic: only results whose `determinism` is CUDNN_DETERMINISTIC (the backend API's
//     numerical note CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC excluded), chosen by the heuristic
//     order (cudnnGet*_v7), not by timing, with a fixed cap: the same algorithms on every run,
//     so the same bits; otherwise the fastest timed one.
// cuBLASLt (dense): cublasLtMatmulAlgoGetHeuristic with CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES =
// the cap; deterministic: CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = CUBLASLT_REDUCTION_SCHEME_NONE
// (no split-K, whose partial sums could be reduced in varying order); the first result is taken.
// Batch norm (cuDNN CUDNN_BATCHNORM_SPATIAL) and our kernels (no atomics in reductions) are
// deterministic as they are.
//
// Compile once per shape: the search runs once per ConvKey (conv_key), and every conv with that key
// takes its result (DeepCAM's middle blocks repeat one shape 16 times).
#pragma once

#include <compare>
#include <vector>

#include "lowering.hpp"

namespace mlph::cuda::plan {

inline constexpr size_t kDefaultWorkspaceCap = size_t{1} << 30;  // per library call

enum class Selection { fastest, first_listed };

struct AlgorithmRule {
  bool deterministic = false;
  MathMode math = MathMode::fma;
  size_t workspace_cap = kDefaultWorkspaceCap;  // bytes one call may use
  Selection selection = Selection::fastest;
  bool cublaslt_split_k = true;  // false: reduction scheme mask NONE
};

// `configured`: the backend's workspace option; `free_bytes`: device memory free once the arena
// (planned without workspaces) is allocated. Deterministic runs take `configured` alone (the same
// choice whatever else uses the device); others at most 90% of what is free.
AlgorithmRule algorithm_rule(Precision precision, bool deterministic, size_t configured = kDefaultWorkspaceCap,
                             size_t free_bytes = SIZE_MAX);

// One algorithm as cuDNN reports it (cudnnConvolution*AlgoPerf_t), in the library's order.
struct Candidate {
  int algo = 0;
  bool ok = true;            // status == CUDNN_STATUS_SUCCESS
  float time_ms = 0;         // timed searches only
  size_t workspace = 0;
  bool deterministic = true;   // determinism == CUDNN_DETERMINISTIC
  bool tensor_cores = false;   // mathType != CUDNN_FMA_MATH
  bool down_converts = false;  // mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
};

bool allowed(const AlgorithmRule& rule, const Candidate& candidate);

// The index of the candidate to use, or -1 when none is allowed (the runtime then fails naming the node).
int choose(const AlgorithmRule& rule, const std::vector<Candidate>& candidates);

// What cuDNN's search for one pass of one conv depends on: every field its descriptors are made of
// (the tensors' dims and strides, the input side padded or not, the filter, padding, stride, dilation,
// groups), the data type, the math and the pass; not the node's name, its bias (our kernel) or whether
// it is a conv_transpose (whose passes are its adjoint conv's: the same search). Within one compile
// the rule is the same for every node.
struct ConvKey {
  std::vector<int64_t> fields;
  auto operator<=>(const ConvKey&) const = default;
};
ConvKey conv_key(const ConvPlan& conv, DType data, MathMode math, int pass);

}  // namespace mlph::cuda::plan
