// The cuda backend's options and where it runs, as pure functions (tested on the CPU):
//   device        the CUDA device to use (default: local rank % devices on the node)
//   precision     fp32 (TF32 off), tf32, bf16, fp16 (sdk::read_compute_settings)
//   deterministic 1: only deterministic cuDNN/cuBLASLt algorithms, chosen by the libraries' heuristic
//                 order within a fixed workspace budget, so that steps repeat bit for bit
//   workspace_mb  the most one cuDNN or cuBLASLt call may use as workspace (MiB; default 1024)
//   graphs        1 (default): after warm-up the training step is captured in a CUDA graph and replayed
//   loss_scale    fp16: the dynamic loss scale's start, a power of two (default 65536, PyTorch
//                 GradScaler's init_scale); a lower one skips fewer first steps on overflow
//   profile       a folder: find.json at compile, nodes.json from the first two (eager) training steps
//                 timed node by node and call by call, one graph replay between cudaProfilerStart/Stop
//                 (runtime/profiler.hpp); empty (default): off
//   batch_norm    own (default): every batch norm on our kernels, its statistics in the reference's two
//                 passes over x; one_pass: ours with x's sum and sum of squares in one pass (one read
//                 of x and one group sum fewer); cudnn: cuDNN's persistent spatial batch norm where the
//                 group is one rank (SyncBatchNorm stays on ours)
//   depthwise     own (default): depthwise convs on our kernel; cudnn: cuDNN's grouped convolution
//   pointwise     gemm (default): 1x1 stride-1 convs as cuBLASLt matmuls; cudnn: on cuDNN's convolutions
//   pool_chain    own (default): conv -> leaky_relu -> max_pool (CosmoFlow) as one pool chain of ours
//                 (bias + leaky ReLU + max-pool in one read of the conv's output); off: three nodes
//   small_channels fold (default): a bf16/fp16 conv with fewer than 8 input channels folds its taps along
//                 the last axis into them before padding them to a multiple of 8, where that pads less
//                 (CosmoFlow's conv1: 12 channels padded to 16, 3x3x1); pad: its channels padded to 8
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "mlph/comms.h"
#include "mlph/sdk/model/compute.hpp"
#include "mlph/sdk/util/options.hpp"
#include "plan/lowering.hpp"

namespace mlph::cuda {

inline constexpr const char* kWho = "cuda backend";

struct Settings {
  std::optional<int> device;  // `device`, else chosen from the local rank
  sdk::ComputeSettings compute;
  size_t workspace_bytes = size_t{1} << 30;
  bool graphs = true;
  float loss_scale = 65536.0f;
  std::string profile_dir;  // empty: no profile
  bool own_batch_norm = true;        // batch_norm=own or one_pass
  bool batch_norm_one_pass = false;  // batch_norm=one_pass
  bool own_depthwise = true;   // depthwise=own
  plan::Pointwise pointwise = plan::Pointwise::gemm;
  bool pool_chain = true;  // pool_chain=own
  bool fold_taps = true;   // small_channels=fold
};

// Every option checked, an unknown one refused, each in one line naming it.
Settings read_settings(const sdk::Options& options);

// The device of this process: `device` when given (it must exist), else local_rank % count, so that
// the ranks of a node spread over its devices. `count` is the devices the process sees (> 0).
int select_device(const Settings& settings, const MLPH_Topology& topology, int count);

}  // namespace mlph::cuda
