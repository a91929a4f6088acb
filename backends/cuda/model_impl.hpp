// The cuda backend's model: a graph compiled for one GPU, on the SDK's step protocol
// (sdk/model/protocol.hpp: the accumulation window, the state slots, the checks and their errors are
// the protocol's; this class supplies the device's memory and steps through its hooks).
//
// Compile (model_compile.cpp):
//   1. sdk::program::lower_graph(graph, plan::implemented()), then plan::make_plan without workspaces;
//      the device's free memory is checked against that arena first ("needs X GiB, has Y free");
//   2. per node, the libraries' objects: cuDNN descriptors from the plan's ConvPlan/BatchNormPlan
//      and each needed pass's algorithm, found on the device and picked by plan::choose within the
//      rule (deterministic: the heuristic's order of deterministic algorithms; else the fastest timed);
//      cuBLASLt matmuls for DensePlan's three gemms (the heuristic's first within the cap);
//   3. plan again with the workspaces they and our kernels need, check the memory again, allocate one
//      arena (plus a small control block and the inputs' staging buffers);
//   4. the parameters uploaded (fp32 masters, the non-trainable block, zeroed gradients and
//      optimizer state) and the device's weight copies made from them (cuDNN's filter layout, the
//      compute type); with other ranks, the comms bound to the device (device collectives) or not.
//
// Streams: `compute` runs the steps; `copy` brings the next batch from the caller's pinned buffers into
// staging while the previous step computes (the core leaves a batch unchanged until the next call
// returns; a call waits for the previous batch's copy before returning); `comms` allreduces the
// gradient buckets as backward finishes them (step_plan.hpp), joined back before the update.
//
// CUDA graphs: every value that changes from step to step is read from device memory (micro_step,
// the optimizer's scalars, the loss scale), written before each step from a ring of pinned slots, and
// the batch is copied into the arena before the graph, so a captured step replays as it is. After
// GraphPolicy's warm-up each kind of step (with or without the update) is captured once and replayed;
// graphs are off when the step has host waits (host collectives) or `graphs` is 0.
//
// The loss (and LAMB/L2's penalty, fp16's loss scale, the first bad label of any step) is copied into
// pinned memory at the end of each training step and read when the protocol has synchronized.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/launch.hpp"
#include "mlph/sdk/comms/rank_groups.hpp"
#include "mlph/sdk/comms/table.hpp"
#include "mlph/sdk/model/protocol.hpp"
#include "model.hpp"
#include "plan/plan.hpp"
#include "runtime/cublaslt.hpp"
#include "runtime/cuda.hpp"
#include "runtime/cudnn.hpp"
#include "runtime/profiler.hpp"
#include "step_plan.hpp"

namespace mlph::cuda {

// Offsets of small buffers laid out one after another (each 256-byte aligned) before one allocation.
struct Layout {
  size_t bytes = 0;
  size_t take(size_t size) {
    const size_t at = plan::align_up(bytes, plan::kAlignment);
    bytes = at + size;
    return at;
  }
};

// What a training step leaves in pinned memory (and the control block) for the host to read.
struct StepResults {
  double penalty = 0;        // L2 of the trainable parameters (the update's)
  double state_penalty = 0;  // L2 of non-trainable ones
  float loss = 0;            // the graph's loss value
  float loss_scale = 1;      // fp16: the scale and its count of good steps, after the update
  int32_t good_steps = 0;
  int32_t unused = 0;
  // then per label-reading node: int64 {position, label} of the first bad label (position -1: none)
};

// A node's library objects and control-block places, made at compile.
struct NodeRuntime {
  std::optional<runtime::ConvDescriptors> conv;
  std::array<int, 3> conv_algo{-1, -1, -1};  // per runtime::ConvPass; -1: not run
  std::optional<runtime::TensorDescriptor> bn_x, bn_params;  // cuDNN batch norm (group_size 1)
  bool dense = false;
  std::array<runtime::Matmul, 3> gemms;  // forward, backward data, backward weights (dense, pointwise conv)
  size_t forward_own = 0, backward_own = 0;  // our kernels' workspace at each step
  // SyncBatchNorm (group_size > 1): the group's communicator, and its device calls when it has them.
  const MLPH_CommsHandle* group = nullptr;
  std::optional<sdk::DeviceComm> group_device;
  // softmax_cross_entropy, iou: the labels' check (control block: find_bad_label's output; its latch
  // in StepResults); softmax_cross_entropy's class weights.
  int32_t label_check = -1;
  size_t label_first = 0, class_weights = 0;
};

class CudaModel final : public sdk::ModelProtocol {
 public:
  // Compiles `program` (sdk::program::lower_graph's, with plan::implemented()).
  CudaModel(sdk::program::Program program, const MLPH_CommsHandle* comms, const ModelSetup& setup);
  ~CudaModel() override;

 protected:
  void run_train(const MLPH_Tensor* inputs, const sdk::StepPlan& plan) override;
  double last_loss() override;
  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override;
  void zero_gradients() override;
  void copy_out(const sdk::ParamTensor& tensor, float* dst, int64_t count) override;
  void copy_in(const sdk::ParamTensor& tensor, const float* src, int64_t count) override;
  void synchronize() override;

 private:
  // ---- compile (model_compile.cpp) ----
  void make_tables();
  void plan_device();
  void check_memory(size_t arena, const char* when) const;
  void make_conv(size_t k);
  void make_batch_norm(size_t k);
  void make_dense(size_t k);
  void own_workspaces(size_t k);
  size_t update_workspace() const;
  void lay_out_control_block();
  void upload_control_block();
  void upload_parameters();
  void bind_comms();

  // ---- a node's work (model_nodes.cpp) ----
  void forward(size_t k, bool training);
  void backward(size_t k);
  void conv_forward(size_t k);
  void conv_backward(size_t k);
  void dense_forward(size_t k);   // a dense node or a pointwise conv, on cuBLASLt
  bool bias_in_epilogue(size_t k) const;
  void dense_backward(size_t k);
  void batch_norm_forward(size_t k, bool training);
  void batch_norm_backward(size_t k);
  void group_sum(size_t k, double* sums, int64_t count);  // SyncBatchNorm's allreduce, in place
  void check_labels(size_t k);
  PoolChainShape chain_shape(size_t k) const;  // a pool chain's (plan::NodeLowering::chain_conv)
  const float* chain_bias(size_t k) const;
  void zero_first_gradients(size_t k);
  bool overwrites_gradient(size_t k, size_t i) const;  // written first with beta 0: no memset
  FloatType stored_type(int32_t v) const;              // the type value v is stored in (plan::PrecisionPlan)

  // ---- steps (model.cpp) ----
  void copy_inputs(const MLPH_Tensor* inputs);
  void upload_step_scalars(const sdk::StepPlan& plan);
  void enqueue_train(const std::vector<Task>& tasks);
  void run_task(const Task& task);
  void run_one(const Task& task, size_t k);  // run_task's work, between backend.profile's events
  void seed_gradient();
  void reduce_bucket(size_t b);
  void host_allreduce();
  void update();
  void refresh_weights(int32_t value = -1);
  // The half copies of conv and dense weights (bf16, fp16) and how each is laid out; per value once.
  struct WeightCopy {
    int32_t value = 0;
    FloatType type = FloatType::f32;
    int64_t width = 0, padded_width = 0;  // padded channels: rows of `width` as rows of `padded_width`
  };
  std::vector<WeightCopy> weight_copies() const;
  std::vector<HalfCopy> half_copies() const;  // per trainable tensor, for the update's own pass
  void wait_for_inputs();
  void* address_of(const sdk::ParamTensor& tensor);

  // ---- helpers ----
  template <class T = void>
  T* at(const plan::Location& where) const {
    return where ? arena_.at<T>(plan_.memory.address(where)) : nullptr;
  }
  template <class T = void>
  T* control(size_t offset) const {
    return control_.at<T>(offset);
  }
  int64_t numel(int32_t v) const { return program_.value(v).numel(); }
  std::string node_about(size_t k) const;  // "node 'conv3'"
  cudaStream_t stream() const { return compute_->get(); }
  void check(cudaError_t error, const char* call, size_t k) const;  // a launcher's error, naming the node
  // check(f(T*{}), call, k) with T the C++ type of `stored` (model_nodes.cpp with_stored): one call of
  // our kernels' launcher for a value stored in fp32, bf16 or fp16.
  template <class F>
  void check_stored(size_t k, FloatType stored, const char* call, F&& f) const;
  void mark(const char* call) const {  // backend.profile: `call` was just enqueued
    if (profiler_) profiler_->mark(stream(), call);
  }
  void check(cudaError_t error, const char* call, const std::string& about = "") const {
    runtime::check(where_, error, call, about);
  }
  StepResults& results() const { return *results_pinned_.at<StepResults>(0); }
  const int64_t* latched(int32_t check) const {
    return results_pinned_.at<int64_t>(sizeof(StepResults) + 2 * sizeof(int64_t) * static_cast<size_t>(check));
  }

  const runtime::Context where_;
  const int device_;
  const Settings settings_;
  sdk::program::Program program_;
  plan::DevicePlan plan_;
  std::vector<NodeRuntime> nodes_;
  struct ChosenAlgorithm {
    int algo = -1;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  };
  std::map<plan::ConvKey, ChosenAlgorithm> chosen_;  // compile: cuDNN's search, once per conv shape and pass

  // comms: the run's (borrowed), how gradients travel, batch-norm groups split from it
  const MLPH_CommsHandle* comms_;
  CommsPath path_ = CommsPath::none;
  std::optional<sdk::DeviceComm> comms_device_;
  sdk::RankGroups rank_groups_;

  // streams and libraries
  std::unique_ptr<runtime::Stream> compute_, copy_, comms_stream_;
  std::unique_ptr<runtime::CudnnHandle> cudnn_;
  std::unique_ptr<runtime::CublasLtHandle> cublaslt_;

  // memory: the arena, the control block, the inputs' staging, pinned results and step scalars
  runtime::DeviceBuffer arena_, control_, staging_;
  std::vector<size_t> staging_at_;  // per graph input
  runtime::PinnedBuffer results_pinned_, scalars_pinned_, host_gradients_, host_sums_;
  ChunkTable trainable_chunks_, state_chunks_;  // the optimizer's and L2's tensors (host copies)
  std::vector<double> l2_, state_l2_;            // per tensor of each table
  struct ControlBlock {
    size_t one = 0, step = 0, step_bytes = 0, results = 0, results_bytes = 0, nonfinite = 0;
    size_t chunks = 0, first_chunk = 0, l2 = 0, state_chunks = 0, state_first_chunk = 0, state_l2 = 0;
    size_t halves = 0;
    bool has_halves = false;  // some trainable tensor has a half copy: the update writes it (HalfCopy)
    DeviceChunks trainable, state;
    bool l2_trainable = false, l2_state = false;
  } block_;
  int32_t label_checks_ = 0;

  // order between streams; graphs
  std::unique_ptr<runtime::Event> inputs_copied_, staging_free_, buckets_done_;
  std::vector<std::unique_ptr<runtime::Event>> bucket_ready_;
  static constexpr size_t kScalarSlots = 4;
  std::vector<std::unique_ptr<runtime::Event>> scalars_copied_;
  size_t next_scalar_slot_ = 0;
  GraphPolicy policy_;
  std::array<runtime::Graph, 2> graphs_;  // per kind of step (apply_update); destroyed before the comms above
  std::unique_ptr<runtime::Profiler> profiler_;  // backend.profile=DIR, else none

  // host state
  bool inputs_pending_ = false;     // a batch's copy is in flight (the caller's memory is still read)
  bool last_updated_ = false;       // the last training step applied its update (its loss has the penalty)
  bool gradients_scaled_ = false;   // fp16: the gradient buffer holds an open window's scaled sum
  bool reported_graphs_off_ = false;
};

}  // namespace mlph::cuda
