// The cuda backend's runtime (backends/cuda/runtime): every failing call is one line naming the
// device, the call and what it was for, with the library's status; without a GPU the first call says
// why. On a GPU (skipped here, saying why): buffers, streams, events and a captured graph; cuDNN
// descriptors made from the plan against the convolution docs/ops.md defines, in fp32 with TF32 off;
// batch norm's running variance (unbiased) and saved statistics; cuBLASLt's gemms with the bias
// epilogue. These are what the plan could only emulate on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/test/error_of.hpp"
#include "mlph/test/random.hpp"
#include "runtime/cublaslt.hpp"
#include "runtime/cuda.hpp"
#include "runtime/cudnn.hpp"

namespace mlph::cuda::runtime {
namespace {

using ::mlph::test::code_and_error_of;

std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return "cudaGetDeviceCount: " + error_text(error);
  return count == 0 ? "cudaGetDeviceCount found none" : "";
}

const Context kDevice = Context::for_device(0, "Test GPU");

// ---- error lines, anywhere -------------------------------------------------------------------------

TEST(CudaRuntime, AFailingCallIsOneLineNamingTheDeviceTheCallAndWhatFor) {
  EXPECT_EQ(kDevice.line("cudnnConvolutionForward", "node 'conv3'", "CUDNN_STATUS_BAD_PARAM"),
            "cuda backend: device 0 (Test GPU): cudnnConvolutionForward for node 'conv3': CUDNN_STATUS_BAD_PARAM");
  EXPECT_EQ(code_and_error_of([] { check(kDevice, cudaErrorMemoryAllocation, "cudaMalloc", "the model's arena (3.00 GiB)"); }),
            (std::pair<MLPH_Code, std::string>{MLPH_RESOURCE_EXHAUSTED,
                                               "cuda backend: device 0 (Test GPU): cudaMalloc for the model's arena "
                                               "(3.00 GiB): out of memory (cudaErrorMemoryAllocation)"}));
  EXPECT_EQ(code_and_error_of([] { check(kDevice, cudaErrorIllegalAddress, "cudaStreamSynchronize"); }).first, MLPH_INTERNAL);
  EXPECT_EQ(code_and_error_of([] { check(kDevice, cudaSuccess, "cudaMalloc"); }).first, MLPH_OK);
  EXPECT_EQ(gib(size_t{3} << 29), "1.50 GiB");
}

TEST(CudaRuntime, LibraryStatusesAreNamedAndMapToWhatTheyMean) {
  const auto [code, message] = code_and_error_of([] { check(kDevice, CUDNN_STATUS_NOT_SUPPORTED, "cudnnConvolutionForward", "node 'c'"); });
  EXPECT_EQ(code, MLPH_UNIMPLEMENTED);
  EXPECT_EQ(message.rfind("cuda backend: device 0 (Test GPU): cudnnConvolutionForward for node 'c': CUDNN_STATUS_NOT_SUPPORTED", 0), 0u)
      << message;
  EXPECT_EQ(code_and_error_of([] { check(kDevice, CUDNN_STATUS_ALLOC_FAILED, "cudnnFind"); }).first, MLPH_RESOURCE_EXHAUSTED);
  const auto blas = code_and_error_of([] { check(kDevice, CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul", "node 'd' (forward)"); });
  EXPECT_EQ(blas.first, MLPH_UNIMPLEMENTED);
  EXPECT_NE(blas.second.find("cublasLtMatmul for node 'd' (forward): CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << blas.second;
  EXPECT_EQ(cudnn_type(plan::DType::bf16), CUDNN_DATA_BFLOAT16);
  EXPECT_EQ(cudnn_math(plan::MathMode::fma), CUDNN_FMA_MATH);  // fp32: TF32 off
  EXPECT_EQ(cudnn_math(plan::MathMode::tf32), CUDNN_DEFAULT_MATH);
}

TEST(CudaRuntime, WithoutAGpuTheFirstCallsSayWhy) {
  const std::string why = no_device();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is here";
  EXPECT_EQ(code_and_error_of([] { device_count(); }),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, "cuda backend: no CUDA device: " + why}));
  const auto [code, message] = code_and_error_of([] { CudnnHandle handle(kDevice, nullptr); });
  EXPECT_NE(code, MLPH_OK);
  EXPECT_EQ(message.rfind("cuda backend: device 0 (Test GPU): cudnnCreate: CUDNN_STATUS_", 0), 0u) << message;
}

// ---- on a GPU ----------------------------------------------------------------------------------------

class CudaRuntimeDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << "no CUDA device: " << why;
    bind_device(0, device_count());
  }
  template <class T>
  static std::vector<T> read(const DeviceBuffer& b, size_t n) {
    std::vector<T> out(n);
    check(kDevice, cudaMemcpy(out.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }
  template <class T>
  static DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b(kDevice, v.size() * sizeof(T), "a test buffer");
    check(kDevice, cudaMemcpy(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return b;
  }
};

using ::mlph::test::random_floats;

TEST_F(CudaRuntimeDevice, ACapturedGraphReplaysWhatItRecordedReadingValuesAtReplay) {
  Stream stream(kDevice);
  DeviceBuffer counter(kDevice, sizeof(float), "counter"), one(kDevice, sizeof(float), "one");
  PinnedBuffer pinned(kDevice, sizeof(float), "pinned");
  *pinned.at<float>(0) = 1.0f;
  check(kDevice, cudaMemsetAsync(counter.data(), 0, sizeof(float), stream.get()), "cudaMemsetAsync");
  Graph::begin_capture(kDevice, stream.get());
  // Copies from pinned memory read it when the graph runs: the value of each replay.
  check(kDevice, cudaMemcpyAsync(one.data(), pinned.data(), sizeof(float), cudaMemcpyHostToDevice, stream.get()), "copy");
  check(kDevice, cudaMemcpyAsync(counter.data(), one.data(), sizeof(float), cudaMemcpyDeviceToDevice, stream.get()), "copy");
  Graph graph = Graph::end_capture(kDevice, stream.get());
  ASSERT_TRUE(graph);
  for (float v : {2.0f, 5.0f}) {
    *pinned.at<float>(0) = v;
    graph.launch(kDevice, stream.get());
    stream.synchronize(kDevice, "the graph");
    EXPECT_EQ(read<float>(counter, 1)[0], v);
  }
}

TEST_F(CudaRuntimeDevice, AFailedCaptureIsAbandonedAndTheStreamWorksAfter) {
  Stream stream(kDevice);
  Graph::begin_capture(kDevice, stream.get());
  EXPECT_NE(cudaStreamSynchronize(stream.get()), cudaSuccess);  // not allowed while capturing: invalidates it
  Graph::abandon_capture(stream.get());
  DeviceBuffer b(kDevice, 4, "b");
  check(kDevice, cudaMemsetAsync(b.data(), 0, 4, stream.get()), "cudaMemsetAsync");
  stream.synchronize(kDevice, "after the failed capture");
}

// A 3x3 conv, stride 1, padding 1, 2 -> 3 channels, NHWC, weights [kh, kw, ci, co] as the graph keeps
// them, transposed to cuDNN's NHWC filter [co, kh, kw, ci] as the model's transpose kernel does.
TEST_F(CudaRuntimeDevice, Fp32ConvolutionFromThePlanIsDocsOpsConvolutionWithoutTf32) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 5, 6, 2});
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {3, 3, 2, 3});
  g.parameter(w, random_floats(54, 1), 0.0, 1.0, MLPH_PARAM_TRAINABLE);
  const int32_t y = g.value("y", MLPH_DTYPE_F32, {2, 5, 6, 3});
  g.node("conv", "conv", {x, w}, {y}, {{"padding", {1, 1}}});
  const int32_t t = g.value("t", MLPH_DTYPE_F32, {2, 5, 6, 3});
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("mse", "loss", {y, t}, {loss});
  g.loss(loss);
  g.inputs({x, t});
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  const plan::Program p = sdk::program::lower_graph(*g.graph(), plan::implemented());
  const plan::ConvPlan c = plan::plan_conv(p, p.nodes[0]);

  const std::vector<float> xs = random_floats(2 * 5 * 6 * 2, 2), ws = p.params[0].init;
  std::vector<float> device_w(ws.size());
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t r = 0; r < 18; ++r) device_w[static_cast<size_t>(o * 18 + r)] = ws[static_cast<size_t>(r * 3 + o)];
  CudnnHandle handle(kDevice, nullptr);
  ConvDescriptors d;
  d.x = TensorDescriptor(kDevice, c.in, plan::DType::f32, "x");
  d.y = TensorDescriptor(kDevice, c.out, plan::DType::f32, "y");
  d.w = FilterDescriptor(kDevice, c.filter, plan::DType::f32, "w");
  d.pass[0] = ConvolutionDescriptor(kDevice, c, CUDNN_FMA_MATH, "conv");
  const ConvCandidates found = find_algorithms(kDevice, handle.get(), d, ConvPass::forward, true, "conv");
  const int chosen = plan::choose(plan::algorithm_rule(sdk::Precision::fp32, true), found.candidates);
  ASSERT_GE(chosen, 0);
  const int algo = found.candidates[static_cast<size_t>(chosen)].algo;
  d.pass[0].set_math(kDevice, found.math[static_cast<size_t>(chosen)], "conv");
  const size_t bytes = workspace_bytes(kDevice, handle.get(), d, ConvPass::forward, algo, "conv");
  DeviceBuffer dx = upload(xs), dw = upload(device_w), dy(kDevice, 2 * 5 * 6 * 3 * 4, "y"), workspace(kDevice, bytes, "ws");
  const float one = 1, zero = 0;
  check(kDevice,
        cudnnConvolutionForward(handle.get(), &one, d.x.get(), dx.data(), d.w.get(), dw.data(), d.pass[0].get(),
                                static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace.data(), bytes, &zero, d.y.get(),
                                dy.data()),
        "cudnnConvolutionForward");
  const std::vector<float> out = read<float>(dy, 2 * 5 * 6 * 3);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 5; ++h)
      for (int64_t v = 0; v < 6; ++v)
        for (int64_t o = 0; o < 3; ++o) {
          double sum = 0;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw)
              for (int64_t i = 0; i < 2; ++i) {
                const int64_t ih = h + kh - 1, iw = v + kw - 1;
                if (ih < 0 || ih >= 5 || iw < 0 || iw >= 6) continue;
                sum += static_cast<double>(xs[static_cast<size_t>(((n * 5 + ih) * 6 + iw) * 2 + i)]) *
                       ws[static_cast<size_t>(((kh * 3 + kw) * 2 + i) * 3 + o)];
              }
          // FMA in fp32: a few ulps of 18 terms; TF32 (10-bit mantissas) would be off by ~1e-3.
          EXPECT_NEAR(out[static_cast<size_t>(((n * 5 + h) * 6 + v) * 3 + o)], sum, 1e-5 * (1 + std::fabs(sum)))
              << n << " " << h << " " << v << " " << o;
        }
}

// docs/ops.md's batch norm: the biased variance normalizes, the unbiased one (x M/(M-1)) goes into the
// running variance with `momentum` as the factor; the saved values are the mean and 1/sqrt(var + eps).
TEST_F(CudaRuntimeDevice, CudnnBatchNormTrainingKeepsTheUnbiasedRunningVarianceAndSavesTheInverseStd) {
  const int64_t n = 4, positions = 6, channels = 3, rows = n * positions;
  const std::vector<float> xs = random_floats(static_cast<size_t>(rows * channels), 5);
  const std::vector<float> gamma = {1.0f, 2.0f, 0.5f}, beta = {0.0f, 1.0f, -1.0f};
  CudnnHandle handle(kDevice, nullptr);
  const TensorDescriptor x(kDevice, plan::channels_last({n, positions, 1, channels}), plan::DType::f32, "x");
  const TensorDescriptor params = TensorDescriptor::batch_norm_parameters(kDevice, x, "bn");
  DeviceBuffer dx = upload(xs), dy(kDevice, xs.size() * 4, "y"), dg = upload(gamma), db = upload(beta),
               mean = upload(std::vector<float>(3, 0.5f)), var = upload(std::vector<float>(3, 2.0f)),
               saved(kDevice, 6 * 4, "saved");
  const float one = 1, zero = 0;
  const double momentum = 0.1, eps = 1e-5;
  check(kDevice,
        cudnnBatchNormalizationForwardTraining(handle.get(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x.get(), dx.data(),
                                               x.get(), dy.data(), params.get(), dg.data(), db.data(), momentum,
                                               mean.data(), var.data(), eps, saved.data(), saved.at<float>(12)),
        "cudnnBatchNormalizationForwardTraining");
  const std::vector<float> running_mean = read<float>(mean, 3), running_var = read<float>(var, 3), s = read<float>(saved, 6);
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0, square = 0;
    for (int64_t r = 0; r < rows; ++r) sum += xs[static_cast<size_t>(r * channels + c)];
    const double m = sum / static_cast<double>(rows);
    for (int64_t r = 0; r < rows; ++r) square += std::pow(xs[static_cast<size_t>(r * channels + c)] - m, 2);
    const double biased = square / static_cast<double>(rows), unbiased = square / static_cast<double>(rows - 1);
    EXPECT_NEAR(running_mean[static_cast<size_t>(c)], 0.9 * 0.5 + 0.1 * m, 1e-6) << c;
    EXPECT_NEAR(running_var[static_cast<size_t>(c)], 0.9 * 2.0 + 0.1 * unbiased, 1e-6) << c << ": not the unbiased variance";
    EXPECT_NEAR(s[static_cast<size_t>(c)], m, 1e-6) << c;
    EXPECT_NEAR(s[static_cast<size_t>(3 + c)], 1.0 / std::sqrt(biased + eps), 1e-4) << c;
  }
}

// dense y[N, out] = x[N, in] w[in, out] + b through the plan's column-major gemm, with the bias epilogue,
// in fp32 (no TF32) and in bf16 operands with fp32 output.
TEST_F(CudaRuntimeDevice, CublasLtForwardGemmWithBiasIsTheRowMajorDense) {
  const int64_t batch = 5, in = 7, out = 3;
  sdk::program::Node node;
  node.dense = {batch, in, out};
  node.inputs = {0, 1, 2};
  const plan::DensePlan dense = plan::plan_dense(node);
  const std::vector<float> xs = random_floats(batch * in, 7), ws = random_floats(in * out, 8), bs = random_floats(out, 9);
  CublasLtHandle handle(kDevice);
  DeviceBuffer dx = upload(xs), dw = upload(ws), db = upload(bs), dy(kDevice, batch * out * 4, "y");
  const plan::AlgorithmRule rule = plan::algorithm_rule(sdk::Precision::fp32, true);
  Matmul::Setup s;
  s.gemm = dense.forward;
  s.bias = true;
  s.rule = &rule;
  const Matmul matmul(kDevice, handle.get(), s, "dense");
  matmul.set_bias(kDevice, db.at<float>(0), "dense");
  DeviceBuffer workspace(kDevice, matmul.workspace(), "ws");
  matmul.run(kDevice, handle.get(), dw.data(), dx.data(), dy.at<float>(0), false, workspace.data(), nullptr, "dense");
  const std::vector<float> y = read<float>(dy, batch * out);
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bs[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i)
        sum += static_cast<double>(xs[static_cast<size_t>(r * in + i)]) * ws[static_cast<size_t>(i * out + o)];
      EXPECT_NEAR(y[static_cast<size_t>(r * out + o)], sum, 1e-5 * (1 + std::fabs(sum))) << r << " " << o;
    }
}

}  // namespace
}  // namespace mlph::cuda::runtime
