#include "plan.hpp"

namespace mlph::cuda::plan {

DevicePlan make_plan(const Program& program, const Options& options, const Workspaces& workspaces, size_t free_bytes) {
  DevicePlan plan;
  plan.nodes = lower_nodes(program, {options.pointwise, options.deterministic, options.workspace_cap,
                                     compute_dtype(options.precision) != DType::f32, options.own, options.fold_taps});
  plan.precision = plan_precision(program, options.precision, plan.nodes);
  plan.params = param_maps(program, plan.nodes);
  plan.schedule = plan_schedule(program, plan.nodes);
  plan.memory = plan_memory(program, plan.nodes, plan.precision, plan.schedule, workspaces);
  plan.buckets = plan_buckets(program, plan.memory.params, plan.schedule, options.bucket_bytes);
  plan.algorithms = algorithm_rule(options.precision, options.deterministic, options.workspace_cap, free_bytes);
  return plan;
}

}  // namespace mlph::cuda::plan
