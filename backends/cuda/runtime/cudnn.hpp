// RAII over cuDNN's legacy C API for the cuda backend: the handle, tensor, filter and convolution
// descriptors made from the plan's parameters (plan/lowering.hpp), and the algorithm search whose
// results plan::choose picks from (plan/algorithms.hpp). Included by the backend's .cpp files only.
#pragma once

#include <cudnn.h>

#include <string>
#include <vector>

#include "context.hpp"
#include "plan/plan.hpp"

namespace mlph::cuda::runtime {

// "CUDNN_STATUS_BAD_PARAM (cuDNN's last message, when it has one)".
std::string status_text(cudnnStatus_t status);
void check(const Context& where, cudnnStatus_t status, const char* call, const std::string& about = "");

cudnnDataType_t cudnn_type(plan::DType type);
// The math a convolution descriptor starts from, before an algorithm (with its own) is chosen:
// fma CUDNN_FMA_MATH (TF32 off), tf32 CUDNN_DEFAULT_MATH (TF32 allowed), tensor_op CUDNN_TENSOR_OP_MATH.
cudnnMathType_t cudnn_math(plan::MathMode math);

class CudnnHandle {
 public:
  CudnnHandle(const Context& where, cudaStream_t stream);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

class TensorDescriptor {
 public:
  TensorDescriptor(const Context& where, const plan::TensorDesc& desc, plan::DType type, const std::string& about);
  TensorDescriptor() = default;
  ~TensorDescriptor();
  TensorDescriptor(TensorDescriptor&& other) noexcept;
  TensorDescriptor& operator=(TensorDescriptor&& other) noexcept;
  cudnnTensorDescriptor_t get() const { return desc_; }
  // cudnnDeriveBNTensorDescriptor of `x` for spatial batch norm: [1, C, 1, 1], float.
  static TensorDescriptor batch_norm_parameters(const Context& where, const TensorDescriptor& x, const std::string& about);

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor(const Context& where, const plan::FilterDesc& desc, plan::DType type, const std::string& about);
  FilterDescriptor() = default;
  ~FilterDescriptor();
  FilterDescriptor(FilterDescriptor&& other) noexcept;
  FilterDescriptor& operator=(FilterDescriptor&& other) noexcept;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(const Context& where, const plan::ConvPlan& conv, cudnnMathType_t math, const std::string& about);
  ConvolutionDescriptor() = default;
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(ConvolutionDescriptor&& other) noexcept;
  ConvolutionDescriptor& operator=(ConvolutionDescriptor&& other) noexcept;
  cudnnConvolutionDescriptor_t get() const { return desc_; }
  void set_math(const Context& where, cudnnMathType_t math, const std::string& about) const;

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

// The three passes of one convolution (plan::ConvPlan): `x` its input side (the padded buffer when
// padding is explicit), `y` its output side, the filter, each with its own descriptor (its math type
// is the chosen algorithm's).
enum class ConvPass { forward, backward_data, backward_filter };
const char* name_of(ConvPass pass);

struct ConvDescriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor pass[3];  // per ConvPass
};

// One pass's candidates in the library's order: timed by cudnnFind*Algorithm (memory allocated by
// cuDNN) or, when `heuristic`, cudnnGet*Algorithm_v7's heuristic order (nothing runs). `algos` keeps
// each candidate's algorithm enum and math type beside the plan's view of it.
struct ConvCandidates {
  std::vector<plan::Candidate> candidates;
  std::vector<cudnnMathType_t> math;
};
ConvCandidates find_algorithms(const Context& where, cudnnHandle_t handle, const ConvDescriptors& d, ConvPass pass,
                               bool heuristic, const std::string& about);
// The workspace `algo` needs for `pass` with the descriptors as they are (math type set).
size_t workspace_bytes(const Context& where, cudnnHandle_t handle, const ConvDescriptors& d, ConvPass pass, int algo,
                       const std::string& about);

}  // namespace mlph::cuda::runtime
