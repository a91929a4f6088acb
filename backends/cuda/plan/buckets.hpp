// Gradient buckets for data parallelism: the gradient buffer (memory.hpp: trainable parameters in
// graph order) cut into runs of consecutive parameters of about `bucket_bytes`, last layers first,
// as backward finishes them; each is allreduced (NCCL, a second stream) while backward goes on.
// The rule is the SDK's GradientBuckets' (host backends), on the device's aligned layout and with
// the schedule's steps: a pure function of the graph, so every rank has the same buckets in the
// same order, and launches them in that order.
#pragma once

#include <vector>

#include "memory.hpp"

namespace mlph::cuda::plan {

inline constexpr size_t kBucketBytes = size_t{25} << 20;  // as PyTorch DDP's bucket_cap_mb

struct Bucket {
  size_t offset = 0, count = 0;  // floats of the gradient buffer (the padding between parameters included)
  size_t params = 0;             // how many parameters it holds
  int64_t ready_node = 0;        // its gradients are final once backward is done with this node (graph index)
  int after_step = 0;            // launch its allreduce once this schedule step is done (never decreasing)
};

// Buckets tile [0, layout.trainable_floats): the first ends at the buffer's end; a bucket takes
// parameters (from the last) until it holds at least `bucket_bytes`.
std::vector<Bucket> plan_buckets(const Program& program, const ParamLayout& layout, const Schedule& schedule,
                                 size_t bucket_bytes = kBucketBytes);

}  // namespace mlph::cuda::plan
