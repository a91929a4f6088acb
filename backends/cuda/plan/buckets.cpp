#include "buckets.hpp"

#include <algorithm>

namespace mlph::cuda::plan {

std::vector<Bucket> plan_buckets(const Program& p, const ParamLayout& layout, const Schedule& schedule,
                                 size_t bucket_bytes) {
  // The first node reading each trainable parameter, in graph order (the SDK's host layout knows it).
  const std::vector<sdk::GradientBuckets::Param> host = sdk::host::gradient_layout(p);
  std::vector<const ParamSlot*> trainable;
  for (const ParamSlot& slot : layout.params)
    if (slot.trainable) trainable.push_back(&slot);
  std::vector<Bucket> buckets;
  for (size_t i = trainable.size(); i-- > 0;) {
    if (buckets.empty() || buckets.back().count * sizeof(float) >= bucket_bytes) {
      const size_t end = buckets.empty() ? layout.trainable_floats : buckets.back().offset;
      buckets.push_back({end, 0, 0, INT64_MAX, 0});
    }
    Bucket& b = buckets.back();
    b.count += b.offset - trainable[i]->offset;  // grows downwards, over the padding after the parameter too
    b.offset = trainable[i]->offset;
    ++b.params;
    b.ready_node = std::min(b.ready_node, host[i].first_use);
  }
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
