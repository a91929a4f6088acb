// RAII over cuBLASLt for the cuda backend's dense layers: one Matmul per plan::Gemm (plan/lowering.hpp:
// column-major views of the row-major buffers, no copies), its algorithm from the library's heuristic
// within the workspace cap (plan/algorithms.hpp). Included by the backend's .cpp files only.
#pragma once

#include <cublasLt.h>

#include <string>

#include "context.hpp"
#include "plan/plan.hpp"

namespace mlph::cuda::runtime {

void check(const Context& where, cublasStatus_t status, const char* call, const std::string& about = "");

class CublasLtHandle {
 public:
  explicit CublasLtHandle(const Context& where);
  ~CublasLtHandle();
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// D[m, n] = op(A)[m, k] op(B)[k, n] (+ bias[m]) (+ D when accumulating), A and B in `operands`
// (f32, bf16 or f16), C = D in `output` (fp32, or the half type where the plan stores the activation in
// it: issue 33 item 4; the bias fp32 either way), accumulating in fp32 with `math`: fma CUBLAS_COMPUTE_32F (never TF32), tf32
// CUBLAS_COMPUTE_32F_FAST_TF32, tensor_op CUBLAS_COMPUTE_32F on half operands.
class Matmul {
 public:
  struct Setup {
    plan::Gemm gemm;
    plan::DType operands = plan::DType::f32;
    plan::MathMode math = plan::MathMode::fma;
    bool bias = false;  // the epilogue's (CUBLASLT_EPILOGUE_BIAS): set_bias before the first run
    const plan::AlgorithmRule* rule = nullptr;
    plan::DType output = plan::DType::f32;  // D's (and C's) type
  };
  // Picks the heuristic's first algorithm within rule->workspace_cap (deterministic: no split-K
  // reduction); none is an error naming `about`.
  Matmul(const Context& where, cublasLtHandle_t handle, const Setup& setup, const std::string& about);
  Matmul() = default;
  ~Matmul();
  Matmul(Matmul&& other) noexcept;
  Matmul& operator=(Matmul&& other) noexcept;

  size_t workspace() const { return workspace_; }
  // The bias vector's address (before the first run; a captured run keeps the one it was captured with).
  void set_bias(const Context& where, const float* bias, const std::string& about) const;
  // Enqueues D = op(A) op(B) (+ bias), or D += ... when `accumulate`.
  void run(const Context& where, cublasLtHandle_t handle, const void* a, const void* b, void* d, bool accumulate,
           void* workspace, cudaStream_t stream, const std::string& about) const;

 private:
  void release() noexcept;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
};

}  // namespace mlph::cuda::runtime
