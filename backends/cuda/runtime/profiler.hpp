// backend.profile=DIR (settings.hpp): what the cuda model's steps cost, node by node and call by call.
//   At compile: every cudnnFind row (found()), written as DIR/find.json (write_find()); a conv whose
//   shape and pass were searched before takes that choice without a search, so it has no rows.
//   The first `eager_steps` training steps (GraphPolicy's eager warm-up): a CUDA event before each node's
//   pass (begin) and after each library call or kernel in it (mark: the model's checks call it), so that
//   each call's time is the stream's time between the event before it and the one after it; written as
//   DIR/nodes.json (profile_report.hpp) once those steps are done, with each step's time.
//   Then the graph replays' step times (rewritten after each of the first kGraphSteps), and one replay
//   between cudaProfilerStart/Stop, for ncu --profile-from-start off.
// Off, the model holds no Profiler and nothing changes; on, a step computes the same bits (only events
// and, after a profiled step, a wait are added).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "plan/algorithms.hpp"
#include "profile_report.hpp"
#include "runtime/context.hpp"
#include "runtime/cudnn.hpp"

namespace mlph::cuda::runtime {

class Profiler {
 public:
  static constexpr int kEagerSteps = 2;   // GraphPolicy's warm-up: eager anyway
  static constexpr int kGraphSteps = 10;  // replays timed whole

  // Creates `dir` (one line naming the option if it cannot), measures the copy ceiling and takes the
  // device's dense bf16 tensor peak from its name (tensor_peak_tflop_s).
  Profiler(const Context& where, std::string dir, int device);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // ---- compile ----
  void found(const std::string& node, ConvPass pass, const ConvCandidates& candidates, const plan::AlgorithmRule& rule,
             int chosen);
  void write_find() const;

  // ---- steps: eager, a graph's replay, or neither (a capture, which records nothing) ----
  void begin_step(cudaStream_t stream, bool eager, bool replay);
  void end_step(cudaStream_t stream);
  // A node's pass (forward, backward, update): `flops` of its convolution or matmul, given to those calls;
  // `bytes` the least the pass moves, given to the node's whole row.
  void begin(cudaStream_t stream, const std::string& node, const std::string& kind, const char* pass, double flops,
             double bytes);
  void mark(cudaStream_t stream, const char* call);  // `call` was just enqueued on `stream`
  void end(cudaStream_t stream);
  bool timing() const { return timing_; }

 private:
  cudaEvent_t record(cudaStream_t stream);
  void write_nodes();

  const Context where_;
  std::string dir_;
  Ceilings ceilings_;
  std::vector<FindRow> find_;
  std::vector<cudaEvent_t> events_;  // owned, destroyed with the profiler
  struct Pending {
    CallTime call;
    cudaEvent_t from, to;
  };
  std::vector<Pending> pending_;
  std::vector<CallTime> calls_;
  std::vector<double> eager_ms_, graph_ms_;
  cudaEvent_t step_start_ = nullptr, node_start_ = nullptr, last_ = nullptr;
  CallTime node_;
  int steps_ = 0, replays_ = 0;
  bool timing_ = false, timing_step_ = false, profiling_ = false, node_open_ = false;
};

}  // namespace mlph::cuda::runtime
