// backend.profile=DIR's reports as pure functions (tested on the CPU; runtime/profiler.* measures):
//   find.json   every cudnnFind row of every conv node and pass: algorithm, status, time, workspace,
//               math type, determinism, whether the algorithm rule allowed it, which was chosen
//   nodes.json  every node's forward and backward and the library calls and kernels inside them, timed
//               with CUDA events in the profiled eager steps: ms, bytes moved and FLOPs where known, and
//               the achieved share of the copy ceiling (bytes) or of the tensor peak (FLOPs)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mlph::cuda {

// One row of cudnnFind*Algorithm for one node and pass, as find.json writes it.
struct FindRow {
  std::string node, pass;  // pass: forward, backward_data, backward_filter
  int algo = 0;
  bool ok = false;  // status == CUDNN_STATUS_SUCCESS
  float time_ms = 0;
  size_t workspace = 0;
  std::string math;  // fma, tensor, tensor_allow_conversion
  bool deterministic = false;
  bool allowed = false;  // plan::allowed under the run's rule
  bool chosen = false;
};

// One timed call: `call` is the library call or kernel ("node" for the whole node's pass).
struct CallTime {
  std::string node, kind, pass, call;  // kind: the node's op; pass: forward or backward (or update)
  int step = 0;                        // which profiled eager step (1, 2)
  double ms = 0;
  double bytes = 0;  // 0: not known
  double flops = 0;  // 0: not known
};

// What each call is measured against: the device's copy bandwidth and tensor peak (0: unknown).
struct Ceilings {
  double copy_gb_s = 0;
  double tensor_tflop_s = 0;
};

// The dense bf16 tensor-core peak (TFLOP/s, no sparsity) of a device by its name; 0 when unknown.
double tensor_peak_tflop_s(const std::string& device_name);

// The achieved share of a ceiling: FLOPs against the tensor peak where the call has FLOPs, else bytes
// against the copy ceiling; negative when neither is known.
double achieved_share(const CallTime& call, const Ceilings& ceilings);

std::string find_json(const std::vector<FindRow>& rows);
// `eager_step_ms`: each profiled eager step's time; `graph_step_ms`: the graph replays' (0: none ran).
std::string nodes_json(const std::vector<CallTime>& calls, const Ceilings& ceilings,
                       const std::vector<double>& eager_step_ms, const std::vector<double>& graph_step_ms);

}  // namespace mlph::cuda
