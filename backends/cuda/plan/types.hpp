// The vocabulary of the cuda backend's plans: data types, precisions, math modes, and the one-line
// error every plan function raises for what it cannot plan. Our own enums: the runtime maps them to
// cuDNN's and cuBLASLt's (cudnnDataType_t, cudnnMathType_t, cublasComputeType_t), so plans and
// their tests need no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mlph/sdk/model/compute.hpp"
#include "mlph/sdk/program/program.hpp"

namespace mlph::cuda::plan {

using sdk::program::Node;
using sdk::program::OpKind;
using sdk::program::Program;

// Element types of device buffers: the graph's (f32, i16, i32) and the half types of mixed precision.
enum class DType { f32, f16, bf16, i16, i32 };

size_t bytes_of(DType type);
const char* name_of(DType type);
DType dtype_of(MLPH_DType type);  // a graph value's

// `backend.precision` (sdk/model/compute.hpp reads it). fp32: no TF32 anywhere; tf32: TF32 math in conv and
// dense; bf16, fp16: conv and dense in half with fp32 accumulation (fp16 with dynamic loss scaling).
// fp32 master weights always.
using Precision = sdk::Precision;

const char* name_of(Precision precision);
DType compute_dtype(Precision precision);  // what conv and dense read and write: f32 for fp32 and tf32

// How conv and dense multiply, always accumulating in fp32: FMA only (float data, TF32 off), TF32
// tensor cores on float data, or tensor cores on half data. cuDNN (as PyTorch sets it): fma is
// CUDNN_FMA_MATH, tf32 and tensor_op CUDNN_TENSOR_OP_MATH; cuBLASLt: fma is CUBLAS_COMPUTE_32F
// (which never rounds to TF32), tf32 CUBLAS_COMPUTE_32F_FAST_TF32, tensor_op CUBLAS_COMPUTE_32F with
// half A and B.
enum class MathMode { fma, tf32, tensor_op };

MathMode math_of(Precision precision);

// The catalogue's name of an op ("conv").
std::string_view op_name(OpKind kind);

// "cuda backend: node 'conv3' (conv): <what>", as MLPH_UNIMPLEMENTED.
[[noreturn]] void fail_node(const Node& node, const std::string& what);

// Rounds `bytes` up to a multiple of `alignment` (a power of two).
constexpr size_t align_up(size_t bytes, size_t alignment) { return (bytes + alignment - 1) & ~(alignment - 1); }

}  // namespace mlph::cuda::plan
