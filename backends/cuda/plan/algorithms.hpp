// How the runtime picks algorithms at compile, on the GPU: the plan gives the search space and the
// budget rule, the runtime asks the libraries and applies them.
//
// cuDNN convolutions (forward, backward-data, backward-filter): the runtime lists candidates
// (cudnnFindConvolution*AlgorithmEx, timed, or cudnnGetConvolution*Algorithm_v7, the library's
// heuristic order), copies each result into a Candidate, and choose() picks:
//   - only results with status CUDNN_STATUS_SUCCESS and a workspace within the cap;
//   - fp32 (math fma): no tensor cores (a result with mathType other than CUDNN_FMA_MATH would use
//     TF32); never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (it rounds fp32 data to fp16);
//   - deterministic: only results whose `determinism` is CUDNN_DETERMINISTIC (the backend API's
//     numerical note CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC excluded), chosen by the heuristic
//     order (cudnnGet*_v7), not by timing, with a fixed cap: the same algorithms on every run,
//     so the same bits; otherwise the fastest timed one.
// cuBLASLt (dense): cublasLtMatmulAlgoGetHeuristic with CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES =
// the cap; deterministic: CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = CUBLASLT_REDUCTION_SCHEME_NONE
// (no split-K, whose partial sums could be reduced in varying order); the first result is taken.
// Batch norm (cuDNN CUDNN_BATCHNORM_SPATIAL) and our kernels (no atomics in reductions) are
// deterministic as they are.
#pragma once

#include <vector>

#include "types.hpp"

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

}  // namespace mlph::cuda::plan
