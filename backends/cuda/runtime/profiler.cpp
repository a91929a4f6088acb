#include "runtime/profiler.hpp"

#include <cuda_profiler_api.h>

#include <filesystem>
#include <fstream>

#include "runtime/cuda.hpp"

namespace mlph::cuda::runtime {
namespace {

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_FMA_MATH:
      return "fma";
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_allow_conversion";
  }
  return "unknown";
}

void write_file(const Context& where, const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) where.fail(MLPH_INVALID_ARGUMENT, "option 'profile': cannot write " + path);
}

// Device-to-device copy bandwidth (GB/s, read plus write) of a 256 MiB copy, the best of 3.
double copy_ceiling(const Context& where) {
  constexpr size_t kBytes = size_t{256} << 20;
  DeviceBuffer a(where, kBytes, "the profile's copy ceiling"), b(where, kBytes, "the profile's copy ceiling");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(where, cudaEventCreate(&start), "cudaEventCreate", "the profile's copy ceiling");
  check(where, cudaEventCreate(&stop), "cudaEventCreate", "the profile's copy ceiling");
  float best = 0;
  for (int i = 0; i < 4; ++i) {
    cudaEventRecord(start, nullptr);
    cudaMemcpyAsync(b.data(), a.data(), kBytes, cudaMemcpyDeviceToDevice, nullptr);
    cudaEventRecord(stop, nullptr);
    check(where, cudaEventSynchronize(stop), "cudaEventSynchronize", "the profile's copy ceiling");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0 && (best == 0 || ms < best)) best = ms;  // the first copy warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best > 0 ? 2.0 * static_cast<double>(kBytes) / (best * 1e-3) / 1e9 : 0.0;
}

}  // namespace

Profiler::Profiler(const Context& where, std::string dir, int device) : where_(where), dir_(std::move(dir)) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) where_.fail(MLPH_INVALID_ARGUMENT, "option 'profile': cannot create " + dir_ + ": " + error.message());
  ceilings_.copy_gb_s = copy_ceiling(where_);
  cudaDeviceProp properties{};
  check(where_, cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties", "option 'profile'");
  ceilings_.tensor_tflop_s = tensor_peak_tflop_s(properties.name);
}

Profiler::~Profiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void Profiler::found(const std::string& node, ConvPass pass, const ConvCandidates& found,
                     const plan::AlgorithmRule& rule, int chosen) {
  for (size_t i = 0; i < found.candidates.size(); ++i) {
    const plan::Candidate& c = found.candidates[i];
    find_.push_back({node, name_of(pass), c.algo, c.ok, c.time_ms, c.workspace, math_name(found.math[i]),
                     c.deterministic, c.ok && plan::allowed(rule, c), static_cast<int>(i) == chosen});
  }
}

void Profiler::write_find() const { write_file(where_, dir_ + "/find.json", find_json(find_)); }

cudaEvent_t Profiler::record(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  check(where_, cudaEventCreate(&e), "cudaEventCreate", "option 'profile'");
  events_.push_back(e);
  check(where_, cudaEventRecord(e, stream), "cudaEventRecord", "option 'profile'");
  return e;
}

void Profiler::begin_step(cudaStream_t stream, bool eager, bool replay) {
  ++steps_;
  timing_ = eager && steps_ <= kEagerSteps;
  timing_step_ = timing_ || (replay && replays_ < kGraphSteps);
  // For ncu: the second replay, or without graphs the second step after the timed ones.
  profiling_ = (replay && replays_ == 1) || (eager && steps_ == kEagerSteps + 2);
  if (profiling_) check(where_, cudaProfilerStart(), "cudaProfilerStart", "option 'profile'");
  if (timing_step_) step_start_ = record(stream);
}

void Profiler::end_step(cudaStream_t stream) {
  if (profiling_) check(where_, cudaProfilerStop(), "cudaProfilerStop", "option 'profile'");
  if (!timing_step_) return;
  cudaEvent_t stop = record(stream);
  check(where_, cudaEventSynchronize(stop), "cudaEventSynchronize", "option 'profile'");
  float ms = 0;
  check(where_, cudaEventElapsedTime(&ms, step_start_, stop), "cudaEventElapsedTime", "option 'profile'");
  if (timing_) {
    eager_ms_.push_back(ms);
    for (const Pending& p : pending_) {
      CallTime call = p.call;
      float call_ms = 0;
      check(where_, cudaEventElapsedTime(&call_ms, p.from, p.to), "cudaEventElapsedTime", "option 'profile'");
      call.ms = call_ms;
      calls_.push_back(call);
    }
    pending_.clear();
  } else {
    graph_ms_.push_back(ms);
    ++replays_;
  }
  if (!timing_ || steps_ == kEagerSteps) write_nodes();
  timing_ = timing_step_ = false;
}

void Profiler::begin(cudaStream_t stream, const std::string& node, const std::string& kind, const char* pass,
                     double flops, double bytes) {
  if (!timing_) return;
  node_ = CallTime{node, kind, pass, "", steps_, 0, bytes, flops};
  node_start_ = last_ = record(stream);
  node_open_ = true;
}

void Profiler::mark(cudaStream_t stream, const char* call) {
  if (!timing_ || !node_open_) return;
  CallTime c = node_;
  c.call = call;
  const std::string name = call;
  // The pass's convolution or matmul has its FLOPs (dense's backward row runs two gemms); bytes are the node's.
  const bool math = name.rfind("cudnnConvolution", 0) == 0 || name.rfind("cublasLtMatmul", 0) == 0;
  c.flops = math ? node_.flops * (name.find("(dx, dw)") != std::string::npos ? 2 : 1) : 0;
  c.bytes = 0;
  cudaEvent_t now = record(stream);
  pending_.push_back({c, last_, now});
  last_ = now;
}

void Profiler::end(cudaStream_t stream) {
  if (!timing_ || !node_open_) return;
  CallTime whole = node_;
  whole.call = "node";
  whole.flops = 0;
  pending_.push_back({whole, node_start_, record(stream)});
  node_open_ = false;
}

void Profiler::write_nodes() {
  write_file(where_, dir_ + "/nodes.json", nodes_json(calls_, ceilings_, eager_ms_, graph_ms_));
}

}  // namespace mlph::cuda::runtime
