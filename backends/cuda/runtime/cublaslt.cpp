#include "cublaslt.hpp"

#include <cstdint>
#include <utility>

namespace mlph::cuda::runtime {

void check(const Context& where, cublasStatus_t status, const char* call, const std::string& about) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const MLPH_Code code = status == CUBLAS_STATUS_NOT_SUPPORTED ? MLPH_UNIMPLEMENTED
                         : status == CUBLAS_STATUS_ALLOC_FAILED ? MLPH_RESOURCE_EXHAUSTED
                         : status == CUBLAS_STATUS_NOT_INITIALIZED ? MLPH_UNAVAILABLE
                                                                   : MLPH_INTERNAL;
  where.fail(code, call, about, std::string(cublasLtGetStatusName(status)) + " (" + cublasLtGetStatusString(status) + ")");
}

CublasLtHandle::CublasLtHandle(const Context& where) { check(where, cublasLtCreate(&handle_), "cublasLtCreate"); }
CublasLtHandle::~CublasLtHandle() {
  if (handle_) cublasLtDestroy(handle_);
}

namespace {

cudaDataType_t cuda_type(plan::DType type) {
  switch (type) {
    case plan::DType::f16:
      return CUDA_R_16F;
    case plan::DType::bf16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

cublasComputeType_t compute_type(plan::MathMode math) {
  return math == plan::MathMode::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

template <class T>
void set(const Context& where, cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value,
         const std::string& about) {
  check(where, cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), "cublasLtMatmulDescSetAttribute",
        about);
}

}  // namespace

Matmul::Matmul(const Context& where, cublasLtHandle_t handle, const Setup& s, const std::string& about) {
  try {
    const plan::Gemm& g = s.gemm;
    check(where, cublasLtMatmulDescCreate(&desc_, compute_type(s.math), CUDA_R_32F), "cublasLtMatmulDescCreate", about);
    const cublasOperation_t ta = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(where, desc_, CUBLASLT_MATMUL_DESC_TRANSA, ta, about);
    set(where, desc_, CUBLASLT_MATMUL_DESC_TRANSB, tb, about);
    if (s.bias) {
      // The heuristic reads the bias pointer's alignment only: any 256-byte aligned address stands in
      // for the bias in the arena (allocated once the workspaces are known), where every region is so.
      set(where, desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, about);
      set(where, desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F, about);
      set_bias(where, reinterpret_cast<const float*>(plan::kAlignment), about);
    }
    // Stored matrices: A is m x k (k x m transposed), B k x n (n x k transposed), D m x n; column-major.
    const cudaDataType_t operands = cuda_type(s.operands);
    auto layout = [&](cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
      check(where, cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
            "cublasLtMatrixLayoutCreate", about);
    };
    layout(&a_, operands, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, g.lda);
    layout(&b_, operands, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, g.ldb);
    layout(&d_, cuda_type(s.output), g.m, g.n, g.ldd);
    if (g.batch > 1) {  // a strided batch: each matrix `stride` elements after the one before
      const auto count = static_cast<int32_t>(g.batch);
      auto batched = [&](cublasLtMatrixLayout_t l, int64_t stride) {
        check(where, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
              "cublasLtMatrixLayoutSetAttribute", about);
        check(where,
              cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
              "cublasLtMatrixLayoutSetAttribute", about);
      };
      batched(a_, g.stride_a), batched(b_, g.stride_b), batched(d_, g.stride_d);
    }

    cublasLtMatmulPreference_t preference = nullptr;
    check(where, cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate", about);
    const uint64_t cap = s.rule->workspace_cap;
    const uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                 &cap, sizeof cap);
    if (status == CUBLAS_STATUS_SUCCESS && !s.rule->cublaslt_split_k)
      status = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_split_k,
                                                    sizeof no_split_k);
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, d_, d_, preference, 8, results, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    check(where, status, "cublasLtMatmulAlgoGetHeuristic", about);
    int chosen = -1;
    for (int i = 0; i < found && chosen < 0; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= cap) chosen = i;
    if (chosen < 0)
      where.fail(MLPH_UNIMPLEMENTED, "cublasLtMatmulAlgoGetHeuristic for " + about + ": no algorithm within " +
                                         std::to_string(cap >> 20) + " MiB of workspace" +
                                         (s.rule->cublaslt_split_k ? "" : " without split-K (deterministic)"));
    algo_ = results[chosen].algo;
    workspace_ = results[chosen].workspaceSize;
  } catch (...) {
    release();
    throw;
  }
}

void Matmul::set_bias(const Context& where, const float* bias, const std::string& about) const {
  set(where, desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias), about);
}

void Matmul::release() noexcept {
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  a_ = b_ = d_ = nullptr;
  desc_ = nullptr;
}

Matmul::~Matmul() { release(); }

Matmul::Matmul(Matmul&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)),
      a_(std::exchange(other.a_, nullptr)),
      b_(std::exchange(other.b_, nullptr)),
      d_(std::exchange(other.d_, nullptr)),
      algo_(other.algo_),
      workspace_(other.workspace_) {}

Matmul& Matmul::operator=(Matmul&& other) noexcept {
  std::swap(desc_, other.desc_);
  std::swap(a_, other.a_);
  std::swap(b_, other.b_);
  std::swap(d_, other.d_);
  std::swap(algo_, other.algo_);
  std::swap(workspace_, other.workspace_);
  return *this;
}

void Matmul::run(const Context& where, cublasLtHandle_t handle, const void* a, const void* b, void* d, bool accumulate,
                 void* workspace, cudaStream_t stream, const std::string& about) const {
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  check(where,
        cublasLtMatmul(handle, desc_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &algo_, workspace, workspace_, stream),
        "cublasLtMatmul", about);
}

}  // namespace mlph::cuda::runtime
