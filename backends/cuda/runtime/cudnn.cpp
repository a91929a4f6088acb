#include "cudnn.hpp"

#include <array>
#include <utility>

namespace mlph::cuda::runtime {

std::string status_text(cudnnStatus_t status) {
  std::string text = cudnnGetErrorString(status);
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  if (last[0]) text += std::string(" (") + last + ")";
  return text;
}

void check(const Context& where, cudnnStatus_t status, const char* call, const std::string& about) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const MLPH_Code code = status == CUDNN_STATUS_NOT_SUPPORTED     ? MLPH_UNIMPLEMENTED
                         : status == CUDNN_STATUS_ALLOC_FAILED    ? MLPH_RESOURCE_EXHAUSTED
                         : status == CUDNN_STATUS_NOT_INITIALIZED ? MLPH_UNAVAILABLE
                                                                  : MLPH_INTERNAL;
  where.fail(code, call, about, status_text(status));
}

cudnnDataType_t cudnn_type(plan::DType type) {
  switch (type) {
    case plan::DType::f16:
      return CUDNN_DATA_HALF;
    case plan::DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

cudnnMathType_t cudnn_math(plan::MathMode math) {
  switch (math) {
    case plan::MathMode::tf32:
      return CUDNN_DEFAULT_MATH;
    case plan::MathMode::tensor_op:
      return CUDNN_TENSOR_OP_MATH;
    case plan::MathMode::fma:
      break;
  }
  return CUDNN_FMA_MATH;
}

CudnnHandle::CudnnHandle(const Context& where, cudaStream_t stream) {
  check(where, cudnnCreate(&handle_), "cudnnCreate");
  check(where, cudnnSetStream(handle_, stream), "cudnnSetStream");
}
CudnnHandle::~CudnnHandle() {
  if (handle_) cudnnDestroy(handle_);
}

// ---- descriptors ----

namespace {
template <size_t N>
std::array<int, N> ints(const std::array<int64_t, N>& values) {
  std::array<int, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = static_cast<int>(values[i]);  // the plan checked 32-bit sizes
  return out;
}
}  // namespace

TensorDescriptor::TensorDescriptor(const Context& where, const plan::TensorDesc& t, plan::DType type,
                                   const std::string& about) {
  check(where, cudnnCreateTensorDescriptor(&desc_), "cudnnCreateTensorDescriptor", about);
  const auto dims = ints(t.dims), strides = ints(t.strides);
  check(where, cudnnSetTensorNdDescriptor(desc_, cudnn_type(type), t.rank, dims.data(), strides.data()),
        "cudnnSetTensorNdDescriptor", about);
}
TensorDescriptor::~TensorDescriptor() {
  if (desc_) cudnnDestroyTensorDescriptor(desc_);
}
TensorDescriptor::TensorDescriptor(TensorDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
TensorDescriptor& TensorDescriptor::operator=(TensorDescriptor&& other) noexcept {
  std::swap(desc_, other.desc_);
  return *this;
}
TensorDescriptor TensorDescriptor::batch_norm_parameters(const Context& where, const TensorDescriptor& x,
                                                         const std::string& about) {
  TensorDescriptor d;
  check(where, cudnnCreateTensorDescriptor(&d.desc_), "cudnnCreateTensorDescriptor", about);
  check(where, cudnnDeriveBNTensorDescriptor(d.desc_, x.get(), CUDNN_BATCHNORM_SPATIAL),
        "cudnnDeriveBNTensorDescriptor", about);
  return d;
}

FilterDescriptor::FilterDescriptor(const Context& where, const plan::FilterDesc& f, plan::DType type,
                                   const std::string& about) {
  check(where, cudnnCreateFilterDescriptor(&desc_), "cudnnCreateFilterDescriptor", about);
  const auto dims = ints(f.dims);
  check(where, cudnnSetFilterNdDescriptor(desc_, cudnn_type(type), CUDNN_TENSOR_NHWC, f.rank, dims.data()),
        "cudnnSetFilterNdDescriptor", about);
}
FilterDescriptor::~FilterDescriptor() {
  if (desc_) cudnnDestroyFilterDescriptor(desc_);
}
FilterDescriptor::FilterDescriptor(FilterDescriptor&& other) noexcept : desc_(std::exchange(other.desc_, nullptr)) {}
FilterDescriptor& FilterDescriptor::operator=(FilterDescriptor&& other) noexcept {
  std::swap(desc_, other.desc_);
  return *this;
}

ConvolutionDescriptor::ConvolutionDescriptor(const Context& where, const plan::ConvPlan& c, cudnnMathType_t math,
                                             const std::string& about) {
  check(where, cudnnCreateConvolutionDescriptor(&desc_), "cudnnCreateConvolutionDescriptor", about);
  const auto pad = ints(c.pad), stride = ints(c.stride), dilation = ints(c.dilation);
  check(where,
        cudnnSetConvolutionNdDescriptor(desc_, c.spatial, pad.data(), stride.data(), dilation.data(),
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolutionNdDescriptor", about);
  check(where, cudnnSetConvolutionGroupCount(desc_, static_cast<int>(c.groups)), "cudnnSetConvolutionGroupCount", about);
  set_math(where, math, about);
}
ConvolutionDescriptor::~ConvolutionDescriptor() {
  if (desc_) cudnnDestroyConvolutionDescriptor(desc_);
}
ConvolutionDescriptor::ConvolutionDescriptor(ConvolutionDescriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)) {}
ConvolutionDescriptor& ConvolutionDescriptor::operator=(ConvolutionDescriptor&& other) noexcept {
  std::swap(desc_, other.desc_);
  return *this;
}
void ConvolutionDescriptor::set_math(const Context& where, cudnnMathType_t math, const std::string& about) const {
  check(where, cudnnSetConvolutionMathType(desc_, math), "cudnnSetConvolutionMathType", about);
}

// ---- algorithms ----

const char* name_of(ConvPass pass) {
  static const char* const names[] = {"forward", "backward data", "backward filter"};
  return names[static_cast<size_t>(pass)];
}

namespace {

template <class Perf>
void add_candidates(const Perf* perf, int count, ConvCandidates& out) {
  for (int i = 0; i < count; ++i) {
    plan::Candidate c;
    c.algo = static_cast<int>(perf[i].algo);
    c.ok = perf[i].status == CUDNN_STATUS_SUCCESS;
    c.time_ms = perf[i].time;
    c.workspace = perf[i].memory;
    c.deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
    c.tensor_cores = perf[i].mathType != CUDNN_FMA_MATH;
    c.down_converts = perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    out.candidates.push_back(c);
    out.math.push_back(perf[i].mathType);
  }
}

}  // namespace

ConvCandidates find_algorithms(const Context& where, cudnnHandle_t h, const ConvDescriptors& d, ConvPass pass,
                               bool heuristic, const std::string& about) {
  const std::string what = about + " (" + name_of(pass) + ")";
  const cudnnConvolutionDescriptor_t conv = d.pass[static_cast<size_t>(pass)].get();
  ConvCandidates out;
  int most = 0, found = 0;
  switch (pass) {
    case ConvPass::forward: {
      check(where, cudnnGetConvolutionForwardAlgorithmMaxCount(h, &most), "cudnnGetConvolutionForwardAlgorithmMaxCount", what);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(most));
      if (heuristic)
        check(where, cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), conv, d.y.get(), most, &found, perf.data()),
              "cudnnGetConvolutionForwardAlgorithm_v7", what);
      else
        check(where, cudnnFindConvolutionForwardAlgorithm(h, d.x.get(), d.w.get(), conv, d.y.get(), most, &found, perf.data()),
              "cudnnFindConvolutionForwardAlgorithm", what);
      add_candidates(perf.data(), found, out);
      break;
    }
    case ConvPass::backward_data: {
      check(where, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &most),
            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", what);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(most));
      if (heuristic)
        check(where,
              cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), conv, d.x.get(), most, &found, perf.data()),
              "cudnnGetConvolutionBackwardDataAlgorithm_v7", what);
      else
        check(where,
              cudnnFindConvolutionBackwardDataAlgorithm(h, d.w.get(), d.y.get(), conv, d.x.get(), most, &found, perf.data()),
              "cudnnFindConvolutionBackwardDataAlgorithm", what);
      add_candidates(perf.data(), found, out);
      break;
    }
    case ConvPass::backward_filter: {
      check(where, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &most),
            "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", what);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(most));
      if (heuristic)
        check(where,
              cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), conv, d.w.get(), most, &found, perf.data()),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7", what);
      else
        check(where,
              cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x.get(), d.y.get(), conv, d.w.get(), most, &found, perf.data()),
              "cudnnFindConvolutionBackwardFilterAlgorithm", what);
      add_candidates(perf.data(), found, out);
      break;
    }
  }
  return out;
}

size_t workspace_bytes(const Context& where, cudnnHandle_t h, const ConvDescriptors& d, ConvPass pass, int algo,
                       const std::string& about) {
  const std::string what = about + " (" + name_of(pass) + ")";
  const cudnnConvolutionDescriptor_t conv = d.pass[static_cast<size_t>(pass)].get();
  size_t bytes = 0;
  switch (pass) {
    case ConvPass::forward:
      check(where,
            cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), conv, d.y.get(),
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes),
            "cudnnGetConvolutionForwardWorkspaceSize", what);
      break;
    case ConvPass::backward_data:
      check(where,
            cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), conv, d.x.get(),
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes),
            "cudnnGetConvolutionBackwardDataWorkspaceSize", what);
      break;
    case ConvPass::backward_filter:
      check(where,
            cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), conv, d.w.get(),
                                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes),
            "cudnnGetConvolutionBackwardFilterWorkspaceSize", what);
      break;
  }
  return bytes;
}

}  // namespace mlph::cuda::runtime
