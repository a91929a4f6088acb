// What a training step of the cuda backend does, in order, and when it runs as a CUDA graph: pure
// functions of the device plan and the run's shape (tested on the CPU; the model walks the tasks).
//
// Gradients reach the other ranks one of three ways (comms_path):
//   none    one rank: nothing to reduce
//   device  the comms plug-in has device collectives (comms/nccl): each gradient bucket is
//           allreduced on the comms stream as soon as backward is done with its last reader, while
//           backward goes on; SyncBatchNorm's sums on the compute stream over their group's communicator
//   host    it has not (comms/mpi, comms/local): the gradients (and SyncBatchNorm's sums) go through
//           pinned host memory and the host allreduce, the step waiting for each
// A step is captured as a CUDA graph only when it has no host wait in it (none or device).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace mlph::cuda {

enum class CommsPath { none, device, host };

CommsPath comms_path(int32_t ranks, bool device_collectives);
const char* name_of(CommsPath path);

struct Task {
  enum class Kind {
    forward,        // node `index`
    seed_gradient,  // the loss's gradient := 1 (fp16: the loss scale)
    backward,       // node `index`
    reduce_bucket,  // bucket `index`, on the comms stream once the compute stream is there
    join_buckets,   // the compute stream waits for every bucket's allreduce
    host_allreduce, // the whole gradient buffer through the host (the step waits)
    update          // average done: regularize, (fp16: unscale, check), optimizer (+ half weight copies), loss scale
  };
  Kind kind;
  int32_t index = -1;

  bool operator==(const Task&) const = default;
};
const char* name_of(Task::Kind kind);

// One micro-batch: forward of every node (an alias has no work of its own), backward of those that
// run one, the gradient buckets reduced when `apply_update` and there are other ranks, then the update.
std::vector<Task> train_tasks(const plan::DevicePlan& plan, const plan::Program& program, CommsPath path,
                              bool apply_update);

// "forward conv1, seed, backward loss, bucket 0, ...": for tests and error lines.
std::string describe(const std::vector<Task>& tasks, const plan::Program& program);

// When a training step runs as a CUDA graph. Two kinds of step (with and without the update) each run
// eagerly `warmup` times (libraries initialize, NCCL connects), are then captured once and replayed
// from then on. A capture that fails turns graphs off for the run (the step runs eagerly: the same
// work), with the reason kept for the log.
class GraphPolicy {
 public:
  enum class Action { eager, capture, replay };

  GraphPolicy(bool enabled, int warmup = 2) : enabled_(enabled), warmup_(warmup) {}

  Action next(bool apply_update) const;
  // What the step did: ran eagerly, was captured (and launched), or failed to capture (`why`).
  void ran_eagerly(bool apply_update) { ++kind(apply_update).eager_runs; }
  void captured(bool apply_update) { kind(apply_update).captured = true; }
  void capture_failed(const std::string& why);

  bool enabled() const { return enabled_; }
  const std::string& why_disabled() const { return why_disabled_; }

 private:
  struct Kind {
    int eager_runs = 0;
    bool captured = false;
  };
  Kind& kind(bool apply_update) { return kinds_[apply_update ? 1 : 0]; }
  const Kind& kind(bool apply_update) const { return kinds_[apply_update ? 1 : 0]; }

  bool enabled_;
  int warmup_;
  std::array<Kind, 2> kinds_{};
  std::string why_disabled_;
};

}  // namespace mlph::cuda
