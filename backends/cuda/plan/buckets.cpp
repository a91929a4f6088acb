#include "buckets.hpp"

#include <algorithm>

namespace mlph::cuda::plan {

std::vector<Bucket> plan_buckets(const Program& p, const ParamLayout& layout, const Schedule& schedule,
                                 size_t bucket_bytes) {
  // The first node reading each trainable parameter, in graph order (the SDK's host layout knows it).
  const std::vector<sdk::GradientParam> host = sdk::program::gradient_layout(p);
  // The same parameters at their offsets in this backend's (padded) gradient buffer.
  std::vector<sdk::GradientParam> trainable;
  for (const ParamSlot& slot : layout.params)
    if (slot.trainable) trainable.push_back({slot.offset, slot.count, host[trainable.size()].first_use});
  std::vector<Bucket> buckets;
  for (const sdk::GradientBucket& b : sdk::partition_gradients(trainable, layout.trainable_floats, bucket_bytes))
    buckets.push_back({b.offset, b.count, b.params, b.ready_at, 0});
  // Backward runs nodes in decreasing order: a bucket is ready after the last backward step of a node
  // at or after its ready_node (before backward when there is none).
  int previous = schedule.forward.empty() ? 0 : schedule.forward.back();
  for (Bucket& b : buckets) {
    b.after_step = previous;
    for (const Step& step : schedule.steps)
      if (step.phase == Phase::backward && step.node >= b.ready_node) b.after_step = std::max(b.after_step, schedule.backward[static_cast<size_t>(step.node)]);
    previous = b.after_step;
  }
  return buckets;
}

}  // namespace mlph::cuda::plan
