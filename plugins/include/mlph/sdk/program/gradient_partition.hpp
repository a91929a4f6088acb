// How data parallelism cuts a gradient buffer into buckets, for every backend: the host executor's
// GradientBuckets (gradient_buckets.hpp) and the cuda plan (backends/cuda/plan/buckets.cpp) take
// their buckets from here, each with its own bucket size. A pure function of the graph, so every
// rank has the same buckets in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlph::sdk {

// A trainable parameter's gradient within the buffer (floats), and the first node (graph order)
// reading the parameter: its gradient is final once backward is done with that node.
struct GradientParam {
  size_t offset, count;
  int64_t first_use;
};

// [offset, offset + count) floats of the buffer holding `params` consecutive parameters, final once
// backward is done with node `ready_at`.
struct GradientBucket {
  size_t offset = 0, count = 0, params = 0;
  int64_t ready_at = INT64_MAX;
};

// `params` in graph order, in the buffer below `end`. Last layers first (backward finishes them
// first), a bucket takes parameters until it holds at least `bucket_bytes`; it reaches up to where
// the bucket after it begins (`end` for the first), so any padding after a parameter goes with it.
inline std::vector<GradientBucket> partition_gradients(const std::vector<GradientParam>& params, size_t end,
                                                       size_t bucket_bytes) {
  std::vector<GradientBucket> buckets;
  for (auto p = params.rbegin(); p != params.rend(); ++p) {
    if (buckets.empty() || buckets.back().count * sizeof(float) >= bucket_bytes)
      buckets.push_back({buckets.empty() ? end : buckets.back().offset, 0, 0, INT64_MAX});
    GradientBucket& b = buckets.back();
    b.count += b.offset - p->offset;  // grows downwards: consecutive parameters in reverse order
    b.offset = p->offset;
    ++b.params;
    b.ready_at = std::min(b.ready_at, p->first_use);
  }
  return buckets;
}

}  // namespace mlph::sdk
