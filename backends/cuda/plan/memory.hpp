// The step schedule and the memory plan: every buffer a training step touches is a region of one
// device arena, placed by liveness so that regions never live at the same step share bytes.
//
// Schedule: the forward of every node in graph order (eval outputs included: eval_step runs the
// same forward steps), then the backward of every node whose output needs a gradient, in reverse
// order (reshape, an alias, has none), then the optimizer's update. A region lives from the first
// step touching it to the last, both included.
//
// Regions:
//   persistent (every step): the fp32 master weights of the trainable parameters, in graph order,
//     each at a 256-byte aligned offset (ParamLayout); the flat fp32 gradient buffer with the same
//     offsets (one allreduce, in buckets; read_gradient); each optimizer slot with the same offsets
//     (so the update is one pass over one index range); the non-trainable parameters (running
//     statistics, normalization constants) likewise in a block of their own; the device copy of
//     each conv/dense weight in half types (the compute type, the masters' layout: weights.hpp); fp16's loss
//     scale; the loss and eval outputs (read after the step).
//   values: each node's output from its forward to its last reader, a backward that saves it
//     included (batch_norm, conv, dense, channel_affine and max_pool keep their input; relu, tanh and
//     leaky_relu with alpha >= 0 their output; losses their inputs; dropout regenerates its mask).
//     Graph inputs from step 0. A reshape's output is its input's region.
//   casts: a value read in another type (precision.hpp), from its first such reader (which makes it)
//     to its last.
//   gradients: a value's gradient from the backward of its last consumer (which writes it; later
//     ones add) to the backward of its producer (which reads it).
//   a relu fused into its batch norm or add (lowering.hpp): its output is written by the producer's
//     forward, its output gradient read by the producer's backward; it has no backward step, and the
//     producer's own output and gradient are never stored.
//   a pool chain (lowering.hpp): reads the conv's output z (kept to its backward) instead of the
//     leaky ReLU's output, which is never stored (nor its gradient); its winners, a byte per output
//     element, live from its forward to its backward; its backward writes z's gradient first.
//   per node, at its steps only: batch_norm's saved mean and inverse std (forward to backward),
//     explicit padding (lowering.hpp), conv's weight gradient as cuDNN writes it in half types (cast and
//     added into the gradient buffer in the same step), the output written in another type before
//     it is cast up, the output's gradient cast down, input gradients written in another type before
//     they are cast and added, and the workspaces given by the caller (sizes known once algorithms
//     are chosen: cuDNN's, cuBLASLt's and our kernels' scratch).
//   the update's, at its step only: LAMB's update (as large as the trainable parameters) and the
//     caller's update workspace (the optimizer's and the loss scaler's sums).
// Every region starts at a multiple of 256 bytes.
#pragma once

#include <string>
#include <vector>

#include "lowering.hpp"
#include "precision.hpp"

namespace mlph::cuda::plan {

inline constexpr size_t kAlignment = 256;

enum class Phase { forward, backward, update };

struct Step {
  Phase phase = Phase::forward;
  int32_t node = -1;  // -1: the update
};

struct Schedule {
  std::vector<Step> steps;
  std::vector<int> forward, backward;  // per node: its step; backward -1 when it runs none
  int update = -1;
};

// Does `node` run a backward (its output needs a gradient; not an alias)?
bool runs_backward(const Program& program, const NodeLowering& lowering, const Node& node);
Schedule plan_schedule(const Program& program, const std::vector<NodeLowering>& lowering);

// Each parameter's place in its block, in floats: trainable ones in the masters (and the gradient
// buffer and each optimizer slot, at the same offsets), the others in the state block. Graph order,
// every offset a multiple of 64 floats (256 bytes); the padding between them stays zero.
struct ParamSlot {
  bool trainable = true;
  size_t offset = 0, count = 0;
};
struct ParamLayout {
  std::vector<ParamSlot> params;  // per Program::params entry
  size_t trainable_floats = 0, state_floats = 0;
};
ParamLayout layout_params(const Program& program);


enum class RegionKind {
  masters,
  state,
  gradients,
  optimizer_slot,
  weights,
  optimizer_scratch,
  loss_scale,
  value,
  cast,
  gradient,
  statistics,
  padded,
  padded_gradient,
  weight_gradient,
  gradient_scratch,
  workspace,
  output_scratch,
  gradient_cast,
  winners
};
const char* name_of(RegionKind kind);

struct Region {
  RegionKind kind = RegionKind::value;
  std::string name;  // the value's or node's (for reports)
  size_t bytes = 0;  // a multiple of kAlignment
  int first = 0, last = 0;  // steps
  size_t offset = 0;        // in the arena, a multiple of kAlignment

  bool live_at(int step) const { return first <= step && step <= last; }
};

// A place in the arena: a region and a byte offset inside it (a parameter's slice of its block).
struct Location {
  int32_t region = -1;
  size_t offset = 0;
  explicit operator bool() const { return region >= 0; }
};

// What each step of a node reads and writes; invalid Locations for what it has not.
struct NodeMemory {
  Location output;
  std::vector<Location> reads;  // per input: the value, its cast copy, its parameter slice or weight copy
  Location output_gradient;     // backward: the gradient of the output
  std::vector<Location> gradients;         // per input: its gradient (a parameter's: its slice of the buffer)
  std::vector<Location> gradient_scratch;  // per input: written there first, in the node's type, then cast and added
  std::vector<bool> accumulate;            // per input: add into `gradients` (written before, or a parameter's)
  // Per input: backward zeroes its gradient first (a memset) because its first writer adds into it.
  // Not where the first writer overwrites (first_writer_overwrites): cuDNN's and cuBLASLt's dx with
  // beta 0 (or cast over it from a half scratch), our kernels' data gradients and the losses' written
  // 0 + ... (their `accumulate` false), a pool chain's dz.
  std::vector<bool> zeroed;
  std::vector<bool> makes_cast;            // per input: forward makes the cast copy `reads` (its first reader)
  Location output_scratch;                 // forward writes its output here first, then casts it up into `output`
  Location output_gradient_cast;           // backward: the output's gradient cast to the node's type
  Location statistics;                     // batch_norm: [2, C] fp32 mean and inverse std
  Location padded, padded_gradient;        // explicit padding (ConvPlan)
  Location weight_gradient;                // conv, conv_transpose: dw as cuDNN writes it
  Location forward_workspace, backward_workspace;
  Location winners;  // a pool chain: 1 byte per output element, forward to backward (lowering.hpp)
};

// Whether node `node`'s backward writes the whole of input i's gradient itself when it is the first
// writer (accumulate[i] false), so that no memset is needed before it.
bool first_writer_overwrites(const Node& node, const NodeLowering& lowering, const NodeMemory& memory, size_t i);

// cuDNN/cuBLASLt workspace bytes per node (empty: none), as the algorithms chosen need.
struct Workspaces {
  std::vector<size_t> forward, backward;
  size_t update = 0;  // the update step's
};

struct MemoryPlan {
  std::vector<Region> regions;
  size_t arena_bytes = 0;      // the arena's size: the peak of this placement
  size_t live_bytes_peak = 0;  // the most bytes live at one step: what any placement needs at least
  int peak_step = 0;           // where live_bytes_peak is
  ParamLayout params;
  int32_t masters = -1, state = -1, gradients = -1;
  std::vector<int32_t> optimizer_slots;  // per Program::optimizer.state entry
  std::vector<Location> values;          // per value: where it is stored (parameters: their slice)
  std::vector<Location> value_gradients; // per value: its gradient, where it has one
  std::vector<Location> weights;         // per value: the device copy of a conv/dense weight
  std::vector<NodeMemory> nodes;
  Location lamb_update;       // LAMB: its update, as large as the trainable parameters (the update step)
  Location update_workspace;  // Workspaces::update (the update step)

  size_t address(const Location& at) const { return regions[static_cast<size_t>(at.region)].offset + at.offset; }
};

MemoryPlan plan_memory(const Program& program, const std::vector<NodeLowering>& lowering,
                       const PrecisionPlan& precision, const Schedule& schedule, const Workspaces& workspaces = {});

// Lines for a report: the arena, the live peak, and the bytes per region kind at the peak step.
std::string describe(const MemoryPlan& plan, const Schedule& schedule);

}  // namespace mlph::cuda::plan
