#include "step_plan.hpp"

namespace mlph::cuda {

CommsPath comms_path(int32_t ranks, bool device_collectives) {
  if (ranks <= 1) return CommsPath::none;
  return device_collectives ? CommsPath::device : CommsPath::host;
}

const char* name_of(CommsPath path) {
  switch (path) {
    case CommsPath::device:
      return "device collectives";
    case CommsPath::host:
      return "host collectives";
    case CommsPath::none:
      break;
  }
  return "one rank";
}

const char* name_of(Task::Kind kind) {
  static const char* const names[] = {"forward", "seed",           "backward", "bucket",
                                      "join",    "host allreduce", "update"};
  return names[static_cast<size_t>(kind)];
}

std::vector<Task> train_tasks(const plan::DevicePlan& plan, const plan::Program& program, CommsPath path,
                              bool apply_update) {
  using Kind = Task::Kind;
  const plan::Schedule& schedule = plan.schedule;
  const bool reduce = apply_update && path == CommsPath::device && !plan.buckets.empty();
  std::vector<Task> tasks;
  size_t next_bucket = 0;
  auto buckets_ready_at = [&](int step) {  // buckets are launched in order, each once its step is done
    while (reduce && next_bucket < plan.buckets.size() && plan.buckets[next_bucket].after_step <= step)
      tasks.push_back({Kind::reduce_bucket, static_cast<int32_t>(next_bucket++)});
  };
  bool seeded = false;
  for (size_t s = 0; s < schedule.steps.size(); ++s) {
    const plan::Step& step = schedule.steps[s];
    if (step.phase == plan::Phase::forward) {
      if (plan.nodes[static_cast<size_t>(step.node)].engine != plan::Engine::alias)
        tasks.push_back({Kind::forward, step.node});
      continue;
    }
    if (!seeded) {  // backward starts: the loss's gradient first, then what is final before any backward
      seeded = true;
      if (program.needs_gradient[static_cast<size_t>(program.loss)]) tasks.push_back({Kind::seed_gradient});
      buckets_ready_at(static_cast<int>(s) - 1);
    }
    if (step.phase != plan::Phase::backward) break;  // the update
    tasks.push_back({Kind::backward, step.node});
    buckets_ready_at(static_cast<int>(s));
  }
  buckets_ready_at(INT32_MAX);
  if (reduce) tasks.push_back({Kind::join_buckets});
  if (apply_update && path == CommsPath::host && plan.memory.params.trainable_floats > 0)
    tasks.push_back({Kind::host_allreduce});
  if (apply_update) tasks.push_back({Kind::update});
  return tasks;
}

std::string describe(const std::vector<Task>& tasks, const plan::Program& program) {
  std::string text;
  for (const Task& t : tasks) {
    if (!text.empty()) text.append(", ");
    text.append(name_of(t.kind));
    if (t.kind == Task::Kind::forward || t.kind == Task::Kind::backward)
      text.append(" ").append(program.nodes[static_cast<size_t>(t.index)].name);
    else if (t.kind == Task::Kind::reduce_bucket)
      text.append(" ").append(std::to_string(t.index));
  }
  return text;
}

GraphPolicy::Action GraphPolicy::next(bool apply_update) const {
  if (!enabled_) return Action::eager;
  const Kind& k = kind(apply_update);
  if (k.captured) return Action::replay;
  return k.eager_runs < warmup_ ? Action::eager : Action::capture;
}

void GraphPolicy::capture_failed(const std::string& why) {
  enabled_ = false;
  why_disabled_ = why;
}

}  // namespace mlph::cuda
