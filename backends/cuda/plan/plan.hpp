// The cuda backend's plans for one graph, made at compile: pure functions of the SDK's lowered
// Program (sdk::program::lower_graph(graph, plan::implemented())) and the backend's options, the same
// on every rank and every run. Each part has its own header:
//   lowering.hpp    which library runs each node; cuDNN descriptors and cuBLASLt layouts
//   precision.hpp   per value and node the types; fp16's loss scaling
//   memory.hpp      the step schedule and the arena: every region's offset
//   buckets.hpp     the gradient buckets reduced during backward
//   algorithms.hpp  how algorithms are chosen on the GPU (determinism, workspace cap)
//   weights.hpp     each parameter's device layout (conv weights in cuDNN's filter layout)
#pragma once

#include "algorithms.hpp"
#include "buckets.hpp"
#include "lowering.hpp"
#include "memory.hpp"
#include "precision.hpp"
#include "weights.hpp"

namespace mlph::cuda::plan {

struct Options {
  Precision precision = Precision::fp32;
  bool deterministic = false;
  size_t workspace_cap = kDefaultWorkspaceCap;
  size_t bucket_bytes = kBucketBytes;
  Pointwise pointwise = Pointwise::gemm;  // backend.pointwise: 1x1 stride-1 convs on cuBLASLt or cuDNN
  OwnKernels own{};  // backend.batch_norm, backend.depthwise, backend.pool_chain
  bool fold_taps = true;  // backend.small_channels=fold
};

struct DevicePlan {
  std::vector<NodeLowering> nodes;
  PrecisionPlan precision;
  Schedule schedule;
  MemoryPlan memory;
  std::vector<Bucket> buckets;
  AlgorithmRule algorithms;
  std::vector<ParamMap> params;  // per Program::params entry: its device layout
};

// Everything for `program`. `workspaces`: the bytes the chosen algorithms need (empty before they
// are chosen: plan once without, choose within algorithms.workspace_cap, plan again with them).
DevicePlan make_plan(const Program& program, const Options& options, const Workspaces& workspaces = {},
                     size_t free_bytes = SIZE_MAX);

}  // namespace mlph::cuda::plan
