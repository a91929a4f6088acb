// mlph-cuda-probe: the figures the next speed decisions need, in one run on a GPU (the GPU kit's profile
// step runs it: tools/gpu/kit/steps/profile.py; docs/cuda.md, "Reading profile.json").
//   1. Ceilings: device-to-device copy (GB/s, read + write), pinned host-to-device copy (the input path),
//      a cuBLASLt bf16 GEMM of 8192^3 on random data (TFLOP/s). Every other figure is a share of these.
//   2. Decisions, on the real DeepCAM (batch 8, 768x1152) and CosmoFlow (batch 4, 128^3) shapes: each
//      variant's forward + backward time (median of kRepeats, CUDA events) and its error against an fp32
//      result (max |variant - fp32| over max |fp32|, outputs and gradients together):
//        batch_norm  cuDNN SPATIAL, SPATIAL_PERSISTENT, the *Ex calls, and ours with the statistics in two
//                    passes (backend.batch_norm=own) and in one (one_pass), fp32 and bf16
//        depthwise   every cuDNN algorithm of each pass; ours (backend.depthwise=own), bf16
//        1x1         every cuDNN algorithm of each pass; cuBLASLt's first candidate with and without split-K
//        padding     conv1 with 4 against 8 input channels and with its taps along w folded in (12 of 16:
//                    backend.small_channels=fold), forward and weight gradient (CosmoFlow); last_deconv
//                    with 3 against 8 output channels (DeepCAM): the best cuDNN algorithms of each
// Each variant is a row of kVariants: a function of the case it runs on.
//
//   mlph-cuda-probe [--json FILE] [--only batch_norm,depthwise,1x1,padding]
// Without a GPU: one line "mlph-cuda-probe: no CUDA device (...)", exit 3.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/launch.hpp"
#include "mlph/sdk/util/error.hpp"
#include "mlph/sdk/util/json.hpp"
#include "padded_input.hpp"
#include "runtime/cublaslt.hpp"
#include "runtime/cuda.hpp"
#include "runtime/cudnn.hpp"

namespace mlph::cuda::probe {
namespace {

using runtime::check;
constexpr int kRepeats = 5;
const runtime::Context kWhere("mlph-cuda-probe");

// ---- results ----------------------------------------------------------------------------------------

struct Row {
  std::string decision, case_name, variant, status = "ok";
  double ms = NAN, error = NAN;
};

std::string json_text(const std::string& s) { return "\"" + s + "\""; }  // our own names: no escapes needed
std::string json_num(double v) { return std::isfinite(v) ? sdk::json_number(v) : "null"; }

// ---- device memory and timing -------------------------------------------------------------------------

struct Device {
  runtime::DeviceBuffer buffer;
  size_t bytes = 0;
  explicit Device(size_t n) : buffer(kWhere, std::max<size_t>(n, 256), "a probe buffer"), bytes(n) {}
  void* get() const { return buffer.data(); }
  float* f() const { return static_cast<float*>(buffer.data()); }
};

// A uniform value in [-1, 1) of (seed, index): the same element of a tensor whatever its padding.
float uniform(unsigned seed, uint64_t index) {
  uint64_t z = index * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// fp32 values of `count` elements whose last dim has `channels` entries, of which the first `real` hold
// uniform(seed, their index in the unpadded tensor) and the rest 0 (real 0: all of them).
void fill(const Device& d, size_t count, unsigned seed, size_t channels = 1, size_t real = 0) {
  if (real == 0) real = channels;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t c = i % channels;
    host[i] = c < real ? uniform(seed, i / channels * real + c) : 0.0f;
  }
  check(kWhere, cudaMemcpy(d.get(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
}

std::vector<float> to_host(const void* src, size_t count, FloatType type = FloatType::f32) {
  Device f32(count * sizeof(float));
  check(kWhere, convert(nullptr, static_cast<int64_t>(count), type, src, FloatType::f32, f32.get()), "convert");
  std::vector<float> host(count);
  check(kWhere, cudaMemcpy(host.data(), f32.get(), count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

// max |a - ref| / max |ref| over the pairs of outputs.
double error_of(const std::vector<std::vector<float>>& outputs, const std::vector<std::vector<float>>& reference) {
  double worst = 0, scale = 0;
  for (size_t o = 0; o < outputs.size(); ++o)
    for (size_t i = 0; i < outputs[o].size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(outputs[o][i] - reference[o][i])));
      scale = std::max(scale, static_cast<double>(std::fabs(reference[o][i])));
    }
  return scale > 0 ? worst / scale : worst;
}

// The median ms of `fn` (enqueued on the default stream) over kRepeats after one warm-up.
double median_ms(const std::function<void()>& fn) {
  cudaEvent_t start = nullptr, stop = nullptr;
  check(kWhere, cudaEventCreate(&start), "cudaEventCreate");
  check(kWhere, cudaEventCreate(&stop), "cudaEventCreate");
  fn();
  std::vector<double> times;
  for (int i = 0; i < kRepeats; ++i) {
    cudaEventRecord(start, nullptr);
    fn();
    cudaEventRecord(stop, nullptr);
    check(kWhere, cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// ---- 1. ceilings --------------------------------------------------------------------------------------

struct Ceilings {
  double d2d_gb_s = 0, h2d_pinned_gb_s = 0, bf16_gemm_tflop_s = 0;
};

double d2d_gb_s() {
  const size_t bytes = size_t{1} << 30;
  Device a(bytes), b(bytes);
  const double ms = median_ms([&] { cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, nullptr); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

double h2d_pinned_gb_s() {
  const size_t bytes = size_t{256} << 20;
  runtime::PinnedBuffer host(kWhere, bytes, "the pinned copy's source");
  std::memset(host.data(), 1, bytes);
  Device d(bytes);
  const double ms = median_ms([&] { cudaMemcpyAsync(d.get(), host.data(), bytes, cudaMemcpyHostToDevice, nullptr); });
  return static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// D[m, n] = A[m, k] B[k, n], bf16 operands, fp32 output, the heuristic's first algorithm.
double gemm_ms(int64_t m, int64_t n, int64_t k, bool split_k, const void* a, const void* b, float* d,
               runtime::CublasLtHandle& lt) {
  plan::AlgorithmRule rule;
  rule.cublaslt_split_k = split_k;
  rule.workspace_cap = size_t{256} << 20;
  runtime::Matmul::Setup setup{plan::Gemm{false, false, m, n, k, m, k, m}, plan::DType::bf16, plan::MathMode::tensor_op,
                               false, &rule};
  runtime::Matmul mm(kWhere, lt.get(), setup, "a probe GEMM");
  Device ws(mm.workspace());
  return median_ms([&] { mm.run(kWhere, lt.get(), a, b, d, false, ws.get(), nullptr, "a probe GEMM"); });
}

double bf16_gemm_tflop_s(runtime::CublasLtHandle& lt) {
  const int64_t n = 8192;
  const auto count = static_cast<size_t>(n * n);
  Device a32(count * 4), a(count * 2), b(count * 2), d(count * 4);
  fill(a32, count, 1);
  check(kWhere, convert(nullptr, n * n, FloatType::f32, a32.get(), FloatType::bf16, a.get()), "convert");
  fill(a32, count, 2);
  check(kWhere, convert(nullptr, n * n, FloatType::f32, a32.get(), FloatType::bf16, b.get()), "convert");
  const double ms = gemm_ms(n, n, n, true, a.get(), b.get(), d.f(), lt);
  return 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e12;
}

// ---- 2. the cases -------------------------------------------------------------------------------------

// A channels-last convolution [N, spatial..., C]: 2-D or 3-D, as the models have it.
struct ConvCase {
  std::string name;
  std::vector<int64_t> in;  // [N, spatial..., Ci]
  int64_t out_channels = 0, kernel = 1, stride = 1, pad = 0, groups = 1;
  int64_t real_in = 0;  // > 0: the input channels past it are padding (zero in x and in w)
  bool fold_taps = false;  // the taps along the last axis folded into the channels, then padded (plan::pad_channels)
};

// A batch norm over [N, spatial..., C].
struct NormCase {
  std::string name;
  std::vector<int64_t> x;
};

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

const std::vector<NormCase> kNormCases = {
    {"deepcam b8 xception.conv1.bn 384x576x32", {8, 384, 576, 32}},
    {"deepcam b8 block1.bn 192x288x128", {8, 192, 288, 128}},
    {"deepcam b8 block4.bn 48x72x728", {8, 48, 72, 728}},
    {"deepcam b8 decoder.bn 192x288x256", {8, 192, 288, 256}},
};

const std::vector<ConvCase> kDepthwiseCases = {
    {"deepcam b8 block1.rep0.conv1 384x576x64 3x3", {8, 384, 576, 64}, 64, 3, 1, 1, 64},
    {"deepcam b8 block2.rep0.conv1 192x288x128 3x3", {8, 192, 288, 128}, 128, 3, 1, 1, 128},
    {"deepcam b8 block5.rep0.conv1 48x72x728 3x3", {8, 48, 72, 728}, 728, 3, 1, 1, 728},
};

const std::vector<ConvCase> kPointwiseCases = {
    {"deepcam b8 block1.rep0.pointwise 384x576 64->128", {8, 384, 576, 64}, 128},
    {"deepcam b8 block3.rep0.pointwise 96x144 256->728", {8, 96, 144, 256}, 728},
    {"deepcam b8 block5.rep0.pointwise 48x72 728->728", {8, 48, 72, 728}, 728},
    {"deepcam b8 exit.pointwise 48x72 1536->2048", {8, 48, 72, 1536}, 2048},
};

// ---- cuDNN convolutions -------------------------------------------------------------------------------

plan::ConvPlan conv_plan(const ConvCase& c, int64_t in_channels, int64_t out_channels) {
  plan::ConvPlan p;
  const int spatial = static_cast<int>(c.in.size()) - 2;
  std::vector<int64_t> in = c.in, out = c.in;
  in.back() = in_channels;
  for (int d = 0; d < spatial; ++d)
    out[static_cast<size_t>(d) + 1] = (in[static_cast<size_t>(d) + 1] + 2 * c.pad - c.kernel) / c.stride + 1;
  out.back() = out_channels;
  p.spatial = spatial;
  p.in = plan::channels_last(in);
  p.out = plan::channels_last(out);
  p.groups = c.groups;
  p.filter.rank = spatial + 2;
  p.filter.dims[0] = out_channels;
  p.filter.dims[1] = in_channels / c.groups;
  for (int d = 0; d < spatial; ++d) p.filter.dims[static_cast<size_t>(d) + 2] = c.kernel;
  p.filter.rows = product(std::vector<int64_t>(static_cast<size_t>(spatial), c.kernel)) * (in_channels / c.groups);
  p.filter.cols = out_channels;
  for (int d = 0; d < spatial; ++d) {
    p.pad[static_cast<size_t>(d)] = c.pad;
    p.stride[static_cast<size_t>(d)] = c.stride;
    p.dilation[static_cast<size_t>(d)] = 1;
  }
  if (c.fold_taps) plan::pad_channels(p, true);
  return p;
}

// One conv's buffers and descriptors in a data type, filled with the same values whatever the type.
struct Conv {
  plan::ConvPlan plan;
  plan::DType type;
  runtime::ConvDescriptors d;
  size_t x_count, y_count, w_count;
  Device x, y, w, dx, dy, dw;
  Conv(const ConvCase& c, int64_t ci, int64_t co, plan::DType t, cudnnMathType_t math)
      : plan(conv_plan(c, ci, co)),
        type(t),
        x_count(static_cast<size_t>(product(dims_of(plan.in)))),
        y_count(static_cast<size_t>(product(dims_of(plan.out)))),
        w_count(static_cast<size_t>(plan.filter.rows * plan.filter.cols)),
        x(x_count * 4),
        y(y_count * 4),
        w(w_count * 4),
        dx(x_count * 4),
        dy(y_count * 4),
        dw(w_count * 4) {
    d.x = runtime::TensorDescriptor(kWhere, plan.in, type, "x");
    d.y = runtime::TensorDescriptor(kWhere, plan.out, type, "y");
    d.w = runtime::FilterDescriptor(kWhere, plan.filter, type, "w");
    for (auto& pass : d.pass) pass = runtime::ConvolutionDescriptor(kWhere, plan, math, "conv");
    // Rows of the filter's Ci/g channels, the real ones first (padded: the plan's, or the case's).
    const auto channels = static_cast<size_t>(plan.filter.dims[1]);
    const auto real = static_cast<size_t>(plan.channels ? plan.channels : c.real_in / c.groups);
    load(x, x_count, 1, static_cast<size_t>(ci), static_cast<size_t>(c.real_in));
    load(w, w_count, 2, channels, real);  // NHWC filter [Co, taps, Ci/g]: its last dim is the input's
    load(dy, y_count, 3, 1, 0);
  }
  static std::vector<int64_t> dims_of(const plan::TensorDesc& t) { return {t.dims.begin(), t.dims.begin() + t.rank}; }
  void load(const Device& into, size_t count, unsigned seed, size_t channels, size_t real) const {
    Device f32(count * 4);
    fill(f32, count, seed, channels, real);
    check(kWhere,
          convert(nullptr, static_cast<int64_t>(count), FloatType::f32, f32.get(), float_type(type), into.get()),
          "convert");
  }
  static FloatType float_type(plan::DType t) {
    return t == plan::DType::bf16 ? FloatType::bf16 : t == plan::DType::f16 ? FloatType::f16 : FloatType::f32;
  }
};

const float kOne = 1.0f, kZero = 0.0f;

// Runs `pass` with algorithm `algo` (the output overwritten).
void run_pass(runtime::CudnnHandle& h, Conv& c, runtime::ConvPass pass, int algo, void* ws, size_t ws_bytes) {
  const auto p = static_cast<size_t>(pass);
  switch (pass) {
    case runtime::ConvPass::forward:
      check(kWhere,
            cudnnConvolutionForward(h.get(), &kOne, c.d.x.get(), c.x.get(), c.d.w.get(), c.w.get(), c.d.pass[p].get(),
                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes, &kZero, c.d.y.get(),
                                    c.y.get()),
            "cudnnConvolutionForward");
      break;
    case runtime::ConvPass::backward_data:
      check(kWhere,
            cudnnConvolutionBackwardData(h.get(), &kOne, c.d.w.get(), c.w.get(), c.d.y.get(), c.dy.get(),
                                         c.d.pass[p].get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                         ws_bytes, &kZero, c.d.x.get(), c.dx.get()),
            "cudnnConvolutionBackwardData");
      break;
    case runtime::ConvPass::backward_filter:
      check(kWhere,
            cudnnConvolutionBackwardFilter(h.get(), &kOne, c.d.x.get(), c.x.get(), c.d.y.get(), c.dy.get(),
                                           c.d.pass[p].get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws,
                                           ws_bytes, &kZero, c.d.w.get(), c.dw.get()),
            "cudnnConvolutionBackwardFilter");
      break;
  }
}

std::vector<float> pass_output(const Conv& c, runtime::ConvPass pass) {
  const FloatType t = Conv::float_type(c.type);
  if (pass == runtime::ConvPass::forward) return to_host(c.y.get(), c.y_count, t);
  if (pass == runtime::ConvPass::backward_data) return to_host(c.dx.get(), c.x_count, t);
  return to_host(c.dw.get(), c.w_count, t);
}

const char* kPassNames[] = {"forward", "backward_data", "backward_filter"};

// The fp32 result of `pass` (FMA math: no TF32), by the heuristic's first usable algorithm.
std::vector<float> fp32_result(runtime::CudnnHandle& h, Conv& ref, runtime::ConvPass pass) {
  const runtime::ConvCandidates heuristic = runtime::find_algorithms(kWhere, h.get(), ref.d, pass, true, "fp32");
  for (const plan::Candidate& c : heuristic.candidates) {
    if (!c.ok) continue;
    const size_t ws_bytes = runtime::workspace_bytes(kWhere, h.get(), ref.d, pass, c.algo, "fp32");
    Device ws(ws_bytes);
    run_pass(h, ref, pass, c.algo, ws.get(), ws_bytes);
    return pass_output(ref, pass);
  }
  sdk::fail(MLPH_UNAVAILABLE, std::string("cuDNN offers no fp32 algorithm for ") + kPassNames[static_cast<int>(pass)]);
}

// Algorithms cudnnFind timed at over kSlowFactor times its fastest are reported with Find's time alone (no
// error, so they cannot win): timing them again would take the probe's minute for nothing.
constexpr float kSlowFactor = 4.0f;

// Rows of our own kernel for one pass, beside cuDNN's: the same fp32 conv `ref`, the same bf16 buffers
// `half` and the same fp32 result `expected`.
using OwnPass = std::function<Row(runtime::ConvPass, const Conv& ref, Conv& half,
                                  const std::vector<std::vector<float>>& expected)>;

// Every algorithm cuDNN lists for each pass (bf16, tensor math), timed and checked against fp32 FMA math
// with the heuristic's first algorithm; `prefix` names the rows; `own` adds our kernel's row to each pass.
void conv_algorithms(const std::string& decision, const ConvCase& c, runtime::CudnnHandle& h, std::vector<Row>& rows,
                     const std::string& prefix = "cudnn", const OwnPass& own = {}) {
  Conv ref(c, c.in.back(), c.out_channels, plan::DType::f32, CUDNN_FMA_MATH);
  Conv half(c, c.in.back(), c.out_channels, plan::DType::bf16, CUDNN_TENSOR_OP_MATH);
  for (size_t p = 0; p < 3; ++p) {
    const auto pass = static_cast<runtime::ConvPass>(p);
    const std::vector<std::vector<float>> expected = {fp32_result(h, ref, pass)};
    const runtime::ConvCandidates found = runtime::find_algorithms(kWhere, h.get(), half.d, pass, false, "bf16");
    float fastest = INFINITY;
    for (const plan::Candidate& cand : found.candidates)
      if (cand.ok) fastest = std::min(fastest, cand.time_ms);
    for (size_t i = 0; i < found.candidates.size(); ++i) {
      const plan::Candidate& cand = found.candidates[i];
      Row row{decision, c.name + " " + kPassNames[p], prefix + " algo " + std::to_string(cand.algo) + " bf16"};
      if (!cand.ok) {
        row.status = "failed";
        rows.push_back(row);
        continue;
      }
      if (cand.time_ms > kSlowFactor * fastest) {
        row.ms = cand.time_ms;
        row.status = "slow (cudnnFind's time)";
        rows.push_back(row);
        continue;
      }
      try {
        half.d.pass[p].set_math(kWhere, found.math[i], "bf16");
        const size_t ws_bytes = runtime::workspace_bytes(kWhere, h.get(), half.d, pass, cand.algo, "bf16");
        Device ws(ws_bytes);
        row.ms = median_ms([&] { run_pass(h, half, pass, cand.algo, ws.get(), ws_bytes); });
        row.error = error_of({pass_output(half, pass)}, expected);
      } catch (const sdk::Error& e) {
        row.status = std::string("failed: ") + e.what();
      }
      rows.push_back(row);
    }
    if (own) rows.push_back(own(pass, ref, half, expected));
  }
}

// A conv's bf16 buffers and descriptors on tensor math.
Conv bf16_conv(const ConvCase& c, int64_t ci, int64_t co) { return Conv(c, ci, co, plan::DType::bf16, CUDNN_TENSOR_OP_MATH); }

// The fastest ok algorithm of each pass of `half`: the passes' sum (without backward data where
// `data_pass` is false: a conv whose x needs no gradient); `forward` gets the forward output of the
// fastest forward algorithm.
double best_conv_ms(Conv& half, runtime::CudnnHandle& h, std::vector<float>* forward, bool data_pass) {
  double total = 0;
  for (size_t p = 0; p < 3; ++p) {
    const auto pass = static_cast<runtime::ConvPass>(p);
    if (pass == runtime::ConvPass::backward_data && !data_pass) continue;
    const runtime::ConvCandidates found = runtime::find_algorithms(kWhere, h.get(), half.d, pass, false, "bf16");
    double best = INFINITY;
    size_t best_index = 0;
    for (size_t i = 0; i < found.candidates.size(); ++i) {
      if (!found.candidates[i].ok) continue;
      half.d.pass[p].set_math(kWhere, found.math[i], "bf16");
      const size_t ws_bytes = runtime::workspace_bytes(kWhere, h.get(), half.d, pass, found.candidates[i].algo, "bf16");
      Device ws(ws_bytes);
      const double ms = median_ms([&] { run_pass(h, half, pass, found.candidates[i].algo, ws.get(), ws_bytes); });
      if (ms < best) best = ms, best_index = i;
    }
    if (!std::isfinite(best)) sdk::fail(MLPH_UNAVAILABLE, std::string("no cuDNN algorithm ran for ") + kPassNames[p]);
    total += best;
    if (forward && pass == runtime::ConvPass::forward) {
      half.d.pass[p].set_math(kWhere, found.math[best_index], "bf16");
      const int algo = found.candidates[best_index].algo;
      const size_t ws_bytes = runtime::workspace_bytes(kWhere, h.get(), half.d, pass, algo, "bf16");
      Device ws(ws_bytes);
      run_pass(h, half, pass, algo, ws.get(), ws_bytes);
      *forward = pass_output(half, pass);
    }
  }
  return total;
}

// ---- the decisions ------------------------------------------------------------------------------------

struct Probe {
  runtime::CudnnHandle cudnn{kWhere, nullptr};
  runtime::CublasLtHandle lt{kWhere};
};

// batch norm: cuDNN's modes and calls on [N, C, P, 1] channels-last, fp32 and bf16; forward training then
// backward, against SPATIAL fp32.
struct Norm {
  plan::DType type;
  size_t count;
  int64_t channels;
  runtime::TensorDescriptor x, params;
  Device xs, ys, dys, dxs, scale, bias, mean, var, save_mean, save_var, dscale, dbias;
  Norm(const NormCase& c, plan::DType t)
      : type(t),
        count(static_cast<size_t>(product(c.x))),
        channels(c.x.back()),
        xs(count * 4),
        ys(count * 4),
        dys(count * 4),
        dxs(count * 4),
        scale(4 * channels),
        bias(4 * channels),
        mean(4 * channels),
        var(4 * channels),
        save_mean(4 * channels),
        save_var(4 * channels),
        dscale(4 * channels),
        dbias(4 * channels) {
    const int64_t n = c.x.front(), positions = product(c.x, 1) / channels;
    plan::TensorDesc d;
    d.rank = 4;
    d.dims = {n, channels, positions, 1, 0};
    d.strides = {positions * channels, 1, channels, channels, 0};
    x = runtime::TensorDescriptor(kWhere, d, t, "batch norm x");
    params = runtime::TensorDescriptor::batch_norm_parameters(kWhere, x, "batch norm");
    Device f32(count * 4);
    const FloatType ft = Conv::float_type(t);
    fill(f32, count, 4);
    check(kWhere, convert(nullptr, static_cast<int64_t>(count), FloatType::f32, f32.get(), ft, xs.get()), "convert");
    fill(f32, count, 5);
    check(kWhere, convert(nullptr, static_cast<int64_t>(count), FloatType::f32, f32.get(), ft, dys.get()), "convert");
    fill(scale, static_cast<size_t>(channels), 6);
    fill(bias, static_cast<size_t>(channels), 7);
  }
  std::vector<std::vector<float>> outputs() const {
    const FloatType ft = Conv::float_type(type);
    return {to_host(ys.get(), count, ft), to_host(dxs.get(), count, ft),
            to_host(dscale.get(), static_cast<size_t>(channels)), to_host(dbias.get(), static_cast<size_t>(channels))};
  }
};

void norm_plain(Probe& ctx, Norm& b, cudnnBatchNormMode_t mode) {
  check(kWhere,
        cudnnBatchNormalizationForwardTraining(ctx.cudnn.get(), mode, &kOne, &kZero, b.x.get(), b.xs.get(), b.x.get(),
                                               b.ys.get(), b.params.get(), b.scale.get(), b.bias.get(), 0.1,
                                               b.mean.get(), b.var.get(), 1e-5, b.save_mean.get(), b.save_var.get()),
        "cudnnBatchNormalizationForwardTraining");
  check(kWhere,
        cudnnBatchNormalizationBackward(ctx.cudnn.get(), mode, &kOne, &kZero, &kOne, &kZero, b.x.get(), b.xs.get(),
                                        b.x.get(), b.dys.get(), b.x.get(), b.dxs.get(), b.params.get(), b.scale.get(),
                                        b.dscale.get(), b.dbias.get(), 1e-5, b.save_mean.get(), b.save_var.get()),
        "cudnnBatchNormalizationBackward");
}

void norm_ex(Probe& ctx, Norm& b, Device& ws, Device& reserve) {
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  check(kWhere,
        cudnnBatchNormalizationForwardTrainingEx(
            ctx.cudnn.get(), mode, ops, &kOne, &kZero, b.x.get(), b.xs.get(), nullptr, nullptr, b.x.get(), b.ys.get(),
            b.params.get(), b.scale.get(), b.bias.get(), 0.1, b.mean.get(), b.var.get(), 1e-5, b.save_mean.get(),
            b.save_var.get(), nullptr, ws.get(), ws.bytes, reserve.get(), reserve.bytes),
        "cudnnBatchNormalizationForwardTrainingEx");
  check(kWhere,
        cudnnBatchNormalizationBackwardEx(ctx.cudnn.get(), mode, ops, &kOne, &kZero, &kOne, &kZero, b.x.get(),
                                          b.xs.get(), nullptr, nullptr, b.x.get(), b.dys.get(), nullptr, nullptr,
                                          b.x.get(), b.dxs.get(), b.params.get(), b.scale.get(), b.bias.get(),
                                          b.dscale.get(), b.dbias.get(), 1e-5, b.save_mean.get(), b.save_var.get(),
                                          nullptr, ws.get(), ws.bytes, reserve.get(), reserve.bytes),
        "cudnnBatchNormalizationBackwardEx");
}

// Our kernels as the model runs them for a group of one (backend.batch_norm=own: the statistics in two
// passes; one_pass: in one), on x, y, dy, dx stored as T: statistics, finalize, apply; backward sums,
// the parameters' gradients (zeroed first: they add), dx written first.
struct OwnNorm {
  Device stats, scale_shift, saved, coefficients, scratch;
  explicit OwnNorm(const Norm& b)
      : stats((2 * static_cast<size_t>(b.channels) + 1) * sizeof(double)),
        scale_shift(2 * static_cast<size_t>(b.channels) * sizeof(float)),
        saved(2 * static_cast<size_t>(b.channels) * sizeof(float)),
        coefficients(3 * static_cast<size_t>(b.channels) * sizeof(float)),
        scratch(channel_sums_workspace_bytes(1, static_cast<int64_t>(b.count) / b.channels, b.channels)) {}
};

template <class T>
void norm_own(Norm& b, OwnNorm& w, bool one_pass) {
  const int64_t c = b.channels, rows = static_cast<int64_t>(b.count) / c;
  const auto* x = static_cast<const T*>(b.xs.get());
  const auto* dy = static_cast<const T*>(b.dys.get());
  auto* stats = static_cast<double*>(w.stats.get());
  auto* saved = static_cast<float*>(w.saved.get());
  auto* scale_shift = static_cast<float*>(w.scale_shift.get());
  auto* gamma = static_cast<float*>(b.scale.get());
  auto* beta = static_cast<float*>(b.bias.get());
  auto* running_mean = static_cast<float*>(b.mean.get());
  auto* running_var = static_cast<float*>(b.var.get());
  if (one_pass) {
    check(kWhere, batch_norm_moments(nullptr, rows, c, x, stats, w.scratch.get(), w.scratch.bytes), "batch_norm_moments");
    check(kWhere, batch_norm_finalize_moments(nullptr, c, 1e-5, 0.1, stats, gamma, beta, running_mean, running_var,
                                              saved, scale_shift),
          "batch_norm_finalize_moments");
  } else {
    check(kWhere, batch_norm_sum(nullptr, rows, c, x, stats, w.scratch.get(), w.scratch.bytes), "batch_norm_sum");
    check(kWhere, batch_norm_variance(nullptr, rows, c, x, stats, w.scratch.get(), w.scratch.bytes),
          "batch_norm_variance");
    check(kWhere, batch_norm_finalize(nullptr, c, 1e-5, 0.1, stats, gamma, beta, running_mean, running_var, saved,
                                      scale_shift),
          "batch_norm_finalize");
  }
  check(kWhere, batch_norm_apply(nullptr, rows, c, x, scale_shift, static_cast<T*>(b.ys.get())), "batch_norm_apply");
  check(kWhere, cudaMemsetAsync(b.dscale.get(), 0, static_cast<size_t>(c) * sizeof(float), nullptr), "cudaMemsetAsync");
  check(kWhere, cudaMemsetAsync(b.dbias.get(), 0, static_cast<size_t>(c) * sizeof(float), nullptr), "cudaMemsetAsync");
  check(kWhere, batch_norm_backward_sums(nullptr, rows, c, x, dy, saved, stats, w.scratch.get(), w.scratch.bytes),
        "batch_norm_backward_sums");
  check(kWhere, batch_norm_backward_params(nullptr, c, stats, static_cast<float*>(b.dscale.get()),
                                           static_cast<float*>(b.dbias.get())),
        "batch_norm_backward_params");
  check(kWhere, batch_norm_backward_data(nullptr, rows, c, x, dy, gamma, saved, stats,
                                         static_cast<float*>(w.coefficients.get()), static_cast<T*>(b.dxs.get()), false),
        "batch_norm_backward_data");
}

size_t ex_workspace(Probe& ctx, Norm& b, size_t* reserve) {
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  size_t forward = 0, backward = 0;
  check(
      kWhere,
      cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(ctx.cudnn.get(), mode, CUDNN_BATCHNORM_OPS_BN, b.x.get(),
                                                               nullptr, b.x.get(), b.params.get(), nullptr, &forward),
      "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
  check(kWhere,
        cudnnGetBatchNormalizationBackwardExWorkspaceSize(ctx.cudnn.get(), mode, CUDNN_BATCHNORM_OPS_BN, b.x.get(),
                                                          nullptr, b.x.get(), nullptr, b.x.get(), b.params.get(),
                                                          nullptr, &backward),
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
  check(kWhere,
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(ctx.cudnn.get(), mode, CUDNN_BATCHNORM_OPS_BN, nullptr,
                                                             b.x.get(), reserve),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
  return std::max(forward, backward);
}

void batch_norm(Probe& ctx, std::vector<Row>& rows) {
  for (const NormCase& c : kNormCases) {
    Norm reference(c, plan::DType::f32);
    norm_plain(ctx, reference, CUDNN_BATCHNORM_SPATIAL);
    const auto expected = reference.outputs();
    for (const plan::DType type : {plan::DType::f32, plan::DType::bf16}) {
      const std::string suffix = type == plan::DType::f32 ? " fp32" : " bf16";
      Norm b(c, type);
      const auto measure = [&](const std::string& variant, const std::function<void()>& fn) {
        Row row{"batch_norm", c.name, variant + suffix};
        try {
          row.ms = median_ms(fn);
          row.error = error_of(b.outputs(), expected);
        } catch (const sdk::Error& e) {
          row.status = std::string("failed: ") + e.what();
        }
        rows.push_back(row);
      };
      measure("cudnn SPATIAL", [&] { norm_plain(ctx, b, CUDNN_BATCHNORM_SPATIAL); });
      measure("cudnn SPATIAL_PERSISTENT", [&] { norm_plain(ctx, b, CUDNN_BATCHNORM_SPATIAL_PERSISTENT); });
      size_t reserve_bytes = 0;
      const size_t ws_bytes = ex_workspace(ctx, b, &reserve_bytes);
      Device ws(ws_bytes), reserve(reserve_bytes);
      measure("cudnn Ex PERSISTENT", [&] { norm_ex(ctx, b, ws, reserve); });
      OwnNorm own(b);  // ours: backend.batch_norm=own (two passes) and one_pass
      for (const bool one_pass : {false, true})
        measure(one_pass ? "ours one_pass" : "ours two_pass", [&] {
          if (type == plan::DType::bf16)
            norm_own<Bf16>(b, own, one_pass);
          else
            norm_own<float>(b, own, one_pass);
        });
    }
  }
}

// Our depthwise kernel (backend.depthwise=own) as the model runs it: x, y, dy and dx in bf16, the weights
// and dw fp32 in the graph's [taps][C] (cuDNN's filter is [C][taps]: transposed here, both ways), dx
// written first.
class OwnDepthwise {
 public:
  OwnDepthwise(const ConvCase& c, const Conv& ref)
      : channels_(static_cast<size_t>(c.in.back())),
        taps_(ref.w_count / channels_),
        shape_(shape_of(c)),
        w_(ref.w_count * sizeof(float)),
        dw_(ref.w_count * sizeof(float)),
        ws_(depthwise_workspace_bytes(shape_)) {
    const std::vector<float> graph = transposed(to_host(ref.w.get(), ref.w_count), channels_, taps_);
    check(kWhere, cudaMemcpy(w_.get(), graph.data(), graph.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  }

  Row run(const std::string& case_name, runtime::ConvPass pass, Conv& half,
          const std::vector<std::vector<float>>& expected) {
    Row row{"depthwise", case_name + " " + kPassNames[static_cast<size_t>(pass)], "ours bf16"};
    const auto* x = static_cast<const Bf16*>(half.x.get());
    const auto* dy = static_cast<const Bf16*>(half.dy.get());
    try {
      if (pass == runtime::ConvPass::forward) {
        row.ms = median_ms([&] {
          check(kWhere, depthwise_forward(nullptr, shape_, x, w_.f(), nullptr, static_cast<Bf16*>(half.y.get())),
                "depthwise_forward");
        });
        row.error = error_of({pass_output(half, pass)}, expected);
      } else if (pass == runtime::ConvPass::backward_data) {
        row.ms = median_ms([&] {
          check(kWhere, depthwise_backward_data(nullptr, shape_, w_.f(), dy, static_cast<Bf16*>(half.dx.get()), false),
                "depthwise_backward_data");
        });
        row.error = error_of({pass_output(half, pass)}, expected);
      } else {
        row.ms = median_ms([&] {  // dw adds: zeroed first, as the model's gradient buffer is each step
          check(kWhere, cudaMemsetAsync(dw_.get(), 0, dw_.bytes, nullptr), "cudaMemsetAsync");
          check(kWhere, depthwise_backward_weights(nullptr, shape_, x, dy, dw_.f(), nullptr, ws_.get(), ws_.bytes),
                "depthwise_backward_weights");
        });
        row.error = error_of({transposed(to_host(dw_.get(), channels_ * taps_), taps_, channels_)}, expected);
      }
    } catch (const sdk::Error& e) {
      row.status = std::string("failed: ") + e.what();
    }
    return row;
  }

 private:
  // The case's window, spatial dims right-aligned into 3.
  static DepthwiseShape shape_of(const ConvCase& c) {
    DepthwiseShape s;
    s.batch = c.in.front(), s.channels = c.in.back();
    const size_t spatial = c.in.size() - 2, first = 3 - spatial;
    for (size_t d = 0; d < spatial; ++d) {
      const size_t e = first + d;
      s.in[e] = c.in[d + 1], s.kernel[e] = c.kernel, s.stride[e] = c.stride, s.pad[e] = c.pad;
      s.out[e] = (s.in[e] + 2 * c.pad - c.kernel) / c.stride + 1;
    }
    return s;
  }
  // [rows][cols] as [cols][rows].
  static std::vector<float> transposed(const std::vector<float>& m, size_t rows, size_t cols) {
    std::vector<float> t(m.size());
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
    return t;
  }

  size_t channels_, taps_;
  DepthwiseShape shape_;
  Device w_, dw_, ws_;
};

void depthwise(Probe& ctx, std::vector<Row>& rows) {
  for (const ConvCase& c : kDepthwiseCases) {
    std::optional<OwnDepthwise> own;  // set up at the first pass, from the fp32 conv's weights
    conv_algorithms("depthwise", c, ctx.cudnn, rows, "cudnn",
                    [&](runtime::ConvPass pass, const Conv& ref, Conv& half, const std::vector<std::vector<float>>& expected) {
                      if (!own) own.emplace(c, ref);
                      return own->run(c.name, pass, half, expected);
                    });
  }
}

// 1x1: every cuDNN algorithm, then the conv as one GEMM [C_out, P] = W^T[C_out, C_in] X^T[C_in, P] in
// cuBLASLt's column-major view (X [P, C_in] row-major is X^T column-major), split-K on and off.
void pointwise(Probe& ctx, std::vector<Row>& rows) {
  for (const ConvCase& c : kPointwiseCases) {
    conv_algorithms("1x1", c, ctx.cudnn, rows);
    Conv ref(c, c.in.back(), c.out_channels, plan::DType::f32, CUDNN_FMA_MATH);
    const std::vector<std::vector<float>> expected = {fp32_result(ctx.cudnn, ref, runtime::ConvPass::forward)};
    Conv half(c, c.in.back(), c.out_channels, plan::DType::bf16, CUDNN_TENSOR_OP_MATH);
    const int64_t positions = product(c.in) / c.in.back();
    // cuDNN's NHWC filter is [C_out, C_in] row-major: column-major [C_in, C_out], so A = W transposed.
    for (const bool split_k : {true, false}) {
      Row row{"1x1", c.name + " forward", std::string("cublasLt first ") + (split_k ? "split-K on" : "split-K off")};
      try {
        plan::AlgorithmRule rule;
        rule.cublaslt_split_k = split_k;
        rule.workspace_cap = size_t{256} << 20;
        runtime::Matmul::Setup setup{
            plan::Gemm{true, false, c.out_channels, positions, c.in.back(), c.in.back(), c.in.back(), c.out_channels},
            plan::DType::bf16, plan::MathMode::tensor_op, false, &rule};
        runtime::Matmul mm(kWhere, ctx.lt.get(), setup, "1x1 as a GEMM");
        Device mws(mm.workspace()), out(half.y_count * 4);
        row.ms = median_ms([&] {
          mm.run(kWhere, ctx.lt.get(), half.w.get(), half.x.get(), out.f(), false, mws.get(), nullptr, "1x1");
        });
        row.error = error_of({to_host(out.get(), half.y_count)}, expected);
      } catch (const sdk::Error& e) {
        row.status = std::string("failed: ") + e.what();
      }
      rows.push_back(row);
    }
  }
}

// `c` (a conv whose x needs no gradient, x and w in `plain`) with its taps along the last axis folded
// into its channels and padded (backend.small_channels=fold): x written as the backend writes it
// (taps_fold), the weights' rows of taps x channels padded (channels_copy); its forward against the
// unpadded conv's `unpadded`, and the time of its forward and weight-gradient passes.
Row folded_taps(Probe& ctx, const ConvCase& c, const Conv& plain, const std::vector<float>& unpadded) {
  ConvCase fold = c;
  fold.fold_taps = true;
  Row row{"padding", c.name, "taps folded"};
  try {
    Conv folded = bf16_conv(fold, plain.plan.in.dims[1], c.out_channels);
    const plan::ConvPlan& f = folded.plan;
    row.variant += ", " + std::to_string(f.padded_channels) + " channels";
    check(kWhere,
          taps_fold(nullptr, taps_fold_of(f, c.in.end()[-2]), FloatType::bf16, plain.x.get(), FloatType::bf16,
                    folded.x.get()),
          "taps_fold");
    check(kWhere,
          channels_copy(nullptr, static_cast<int64_t>(folded.w_count) / f.padded_channels, f.channels, f.padded_channels,
                        FloatType::bf16, plain.w.get(), FloatType::bf16, folded.w.get(), false),
          "channels_copy");
    std::vector<float> y;
    row.ms = best_conv_ms(folded, ctx.cudnn, &y, false);
    row.error = error_of({y}, {unpadded});
  } catch (const sdk::Error& e) {
    row.status = std::string("failed: ") + e.what();
  }
  return row;
}

// Padding: the same conv with its channels padded with zeros to 8 (tensor cores' alignment): the time
// of the best algorithms, and how far the padded result is from the unpadded one (it should be 0).
// CosmoFlow's conv1 (no backward-data pass: its x needs no gradient) also with its 3 taps along w
// folded into 12 channels padded to 16, a 3x3x1 conv (folded_taps).
void padding(Probe& ctx, std::vector<Row>& rows) {
  struct Pad {
    ConvCase conv;
    int64_t from, to;  // the conv's input channels, unpadded and padded
    bool data_pass;    // its backward-data pass runs
  };
  // last_deconv (64 -> 3 channels, stride 2) runs as its adjoint conv, whose input channels are its outputs.
  const std::vector<Pad> pads = {
      {{"cosmoflow b4 conv1 128^3 3x3x3", {4, 128, 128, 128, 4}, 32, 3, 1, 1}, 4, 8, false},
      {{"deepcam b8 last_deconv 768x1152 (its adjoint conv)", {8, 768, 1152, 3}, 64, 3, 2, 1}, 3, 8, true},
  };
  for (const Pad& p : pads) {
    std::vector<float> unpadded, padded;
    Row a{"padding", p.conv.name, std::to_string(p.from) + " channels"},
        b{"padding", p.conv.name, std::to_string(p.to) + " channels"};
    std::optional<Row> folded;
    try {
      Conv plain = bf16_conv(p.conv, p.from, p.conv.out_channels);
      a.ms = best_conv_ms(plain, ctx.cudnn, &unpadded, p.data_pass);
      ConvCase wide = p.conv;
      wide.in.back() = p.to;
      wide.real_in = p.from;
      Conv widened = bf16_conv(wide, p.to, p.conv.out_channels);
      b.ms = best_conv_ms(widened, ctx.cudnn, &padded, p.data_pass);
      a.error = 0;
      // The padded channels are zero in x and w, so the forward outputs agree but for the order of the sums.
      b.error = error_of({padded}, {unpadded});
      if (!p.data_pass) folded = folded_taps(ctx, p.conv, plain, unpadded);
    } catch (const sdk::Error& e) {
      a.status = b.status = std::string("failed: ") + e.what();
    }
    rows.push_back(a);
    rows.push_back(b);
    if (folded) rows.push_back(*folded);
  }
}

struct Decision {
  const char* name;
  void (*run)(Probe&, std::vector<Row>&);
};
constexpr Decision kVariants[] = {
    {"batch_norm", batch_norm}, {"depthwise", depthwise}, {"1x1", pointwise}, {"padding", padding}};

// ---- output -------------------------------------------------------------------------------------------

std::string report(const std::string& device, const Ceilings& c, const std::vector<Row>& rows) {
  std::ostringstream out;
  out << "{\"device\": " << json_text(device) << ", \"ceilings\": {\"d2d_gb_s\": " << json_num(c.d2d_gb_s)
      << ", \"h2d_pinned_gb_s\": " << json_num(c.h2d_pinned_gb_s)
      << ", \"bf16_gemm_tflop_s\": " << json_num(c.bf16_gemm_tflop_s) << "},\n \"decisions\": {";
  bool first_decision = true;
  for (const Decision& d : kVariants) {
    out << (first_decision ? "" : ",") << "\n  " << json_text(d.name) << ": [";
    first_decision = false;
    bool first = true;
    for (const Row& r : rows) {
      if (r.decision != d.name) continue;
      out << (first ? "" : ",") << "\n   {\"case\": " << json_text(r.case_name)
          << ", \"variant\": " << json_text(r.variant) << ", \"status\": " << json_text(r.status)
          << ", \"ms\": " << json_num(r.ms) << ", \"error\": " << json_num(r.error) << "}";
      first = false;
    }
    out << "]";
  }
  out << "}}\n";
  return out.str();
}

int run(int argc, char** argv) {
  std::string json_path, only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--json" || arg == "--only") && i + 1 < argc)
      (arg == "--json" ? json_path : only) = argv[++i];
    else if (arg == "--help") {
      std::puts("mlph-cuda-probe [--json FILE] [--only batch_norm,depthwise,1x1,padding]");
      return 0;
    } else {
      std::fprintf(stderr, "mlph-cuda-probe: unknown argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
  }
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    std::printf("mlph-cuda-probe: no CUDA device (cudaGetDeviceCount: %s)\n",
                error != cudaSuccess ? cudaGetErrorName(error) : "0 devices");
    return 3;
  }
  cudaDeviceProp properties{};
  check(kWhere, cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  std::printf("device: %s\n", properties.name);
  Probe ctx;
  Ceilings ceilings{d2d_gb_s(), h2d_pinned_gb_s(), bf16_gemm_tflop_s(ctx.lt)};
  std::printf("ceilings: copy %.0f GB/s, pinned H2D %.1f GB/s, bf16 GEMM 8192^3 %.0f TFLOP/s\n", ceilings.d2d_gb_s,
              ceilings.h2d_pinned_gb_s, ceilings.bf16_gemm_tflop_s);
  std::fflush(stdout);
  std::vector<Row> rows;
  for (const Decision& d : kVariants) {
    if (!only.empty() && ("," + only + ",").find(std::string(",") + d.name + ",") == std::string::npos) continue;
    const size_t before = rows.size();
    try {
      d.run(ctx, rows);
    } catch (const sdk::Error& e) {  // one decision failing leaves the others
      rows.push_back(Row{d.name, "-", "-", std::string("failed: ") + e.what()});
    }
    for (size_t i = before; i < rows.size(); ++i)
      std::printf("%-10s %-58s %-32s %10.3f ms  error %.2e  %s\n", rows[i].decision.c_str(), rows[i].case_name.c_str(),
                  rows[i].variant.c_str(), rows[i].ms, rows[i].error, rows[i].status.c_str());
    std::fflush(stdout);
    if (!json_path.empty()) std::ofstream(json_path) << report(properties.name, ceilings, rows);  // after each decision
  }
  return 0;
}

}  // namespace
}  // namespace mlph::cuda::probe

int main(int argc, char** argv) {
  try {
    return mlph::cuda::probe::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
