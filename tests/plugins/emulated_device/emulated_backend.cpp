// libmlph-backend-emulated.so: a backend that behaves as a device backend does, on a device emulated
// on the host (emulated_device.hpp), so that the device paths of ABI 1.6 are proven without a GPU. The
// math is the reference backend's: its kernels, run by the SDK's host executor, whose step protocol
// (sdk::ModelProtocol) is the one every backend shares. What makes it a device backend:
//  - binding: created with its rank's topology, it runs on emulated device `local_rank` and binds
//    the run's communicator to it at compile (the comms plug-in checks the number);
//  - memory: weights, gradients, activations and optimizer state live in device memory, which only
//    the stream's work may touch (anything else faults), poisoned when allocated and freed;
//  - a stream: run_train only enqueues (the inputs' copy, forward and backward, the gradients'
//    average, the update), zero_gradients too; copy_in, copy_out and run_eval enqueue and then wait;
//    the loss is read once the protocol has synchronized (late: the runner reads it about ten times
//    an epoch);
//  - device collectives: the gradients are averaged by the comms plug-in's stream-ordered allreduce
//    (MLPH_DeviceCollectives, `--comms emulated`), enqueued between backward and the update;
//  - pinned inputs: alloc_input hands out pinned host memory; an input marked pinned must be such
//    memory (with `require_pinned_inputs` every input must), and each input's checksum at enqueue is
//    compared with the one at the device's copy, so that a caller rewriting a batch the stream has
//    yet to read is caught by name.
// Options: `threads` (the kernels' pool, as the reference's), `require_pinned_inputs` (default false:
// mlperf-conformance hands in ordinary host memory), `precision` (fp32) and `deterministic`.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "emulated_device.hpp"
#include "mlph/sdk/comms/plugin.hpp"
#include "mlph/sdk/host/executor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/model/compute.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/sdk/util/plugin.hpp"
#include "ops.hpp"

namespace mlph::emulated {
namespace {

const std::string kWho = "emulated backend";

// The reference kernels (found by argument-dependent lookup through the pool's type) over buffers in
// device memory.
struct Kernels {
  using Buffer = std::vector<float, DeviceAllocator<float>>;
  std::shared_ptr<reference::ThreadPool> pool;
  reference::Scratch scratch;  // the kernels' workspace: host memory, but touched only by the stream's work
  reference::ThreadPool& threads() { return *pool; }
};

size_t bytes_of(const MLPH_Tensor& t) { return static_cast<size_t>(sdk::numel(t)) * mlph_dtype_size(t.dtype); }

uint64_t checksum(const MLPH_Tensor& t) {
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  uint64_t sum = 0xcbf29ce484222325ULL;  // FNV-1a over 8-byte words
  const size_t n = bytes_of(t);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes + i, std::min<size_t>(8, n - i));
    sum = (sum ^ word) * 0x100000001b3ULL;
  }
  return sum;
}

// A model on the emulated device: the host executor, each of its stages run by the stream.
class Model final : public sdk::host::Executor<Kernels> {
 public:
  Model(const MLPH_HostApi* host, const MLPH_CommsHandle* comms, sdk::program::Program program, Kernels kernels,
        std::shared_ptr<Stream> stream, std::optional<sdk::DeviceComm> device_comm, bool require_pinned)
      : Executor(host, comms, std::move(program), kWho, std::move(kernels), sdk::host::GradientAveraging::by_backend),
        stream_(std::move(stream)),
        device_comm_(std::move(device_comm)),
        require_pinned_(require_pinned) {}
  // Nothing still queued may run on memory the executor frees.
  ~Model() override {
    try {
      stream_->synchronize();
    } catch (...) {  // a failure nobody asked about any more
    }
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 protected:
  void run_train(const MLPH_Tensor* inputs, const sdk::StepPlan& plan) override {
    std::vector<MLPH_Tensor> views(inputs, inputs + signature_.inputs.size());
    std::vector<uint64_t> sums;
    for (size_t i = 0; i < views.size(); ++i) sums.push_back(checksum(check_memory(views[i], i)));
    const uint64_t copied = stream_->enqueue([this, views, sums] {
      for (size_t i = 0; i < views.size(); ++i)
        if (checksum(views[i]) != sums[i])
          sdk::fail(MLPH_DATA_LOSS, who_ + ": input '" + signature_.inputs[i].name +
                                        "' changed between train_step and the device's copy of it: the caller "
                                        "rewrote it while the step was queued (ABI 1.6 keeps it until the next call "
                                        "on the model returns)");
      load_inputs(views.data());
    });
    stream_->enqueue([this, plan] { forward_backward(plan); });
    if (plan.apply_update) {
      average_gradients();
      stream_->enqueue([this, plan] { update(plan); });
    }
    // The caller may rewrite the last step's inputs once this call returns (ABI 1.6), this step's
    // once the next one does; an older core only lends them for the call.
    const bool lent_for_the_call = host_->abi_major != MLPH_ABI_MAJOR || host_->abi_minor < 6;
    stream_->wait(lent_for_the_call ? copied : last_copy_);
    last_copy_ = copied;
  }

  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override {
    for (size_t i = 0; i < signature_.inputs.size(); ++i) check_memory(inputs[i], i);
    stream_->enqueue([=, this] { Executor::run_eval(inputs, outputs); });
    synchronize();
  }

  void zero_gradients() override {
    stream_->enqueue([this] { Executor::zero_gradients(); });
  }

  void copy_out(const sdk::ParamTensor& tensor, float* dst, int64_t count) override {
    stream_->enqueue([=, this] { std::memcpy(dst, host_storage(tensor), static_cast<size_t>(count) * sizeof(float)); });
    synchronize();
  }

  void copy_in(const sdk::ParamTensor& tensor, const float* src, int64_t count) override {
    stream_->enqueue([=, this] { std::memcpy(host_storage(tensor), src, static_cast<size_t>(count) * sizeof(float)); });
    synchronize();
  }

  // The stream's failure, then the collectives' (whose results are not to be used if they failed).
  void synchronize() override {
    stream_->synchronize();
    if (device_comm_) device_comm_->status();
  }

 private:
  // Host memory the device may copy from: the backend's pinned blocks, or (unless required to be
  // pinned) ordinary host memory, as a GPU copies from either.
  const MLPH_Tensor& check_memory(const MLPH_Tensor& t, size_t i) const {
    const std::string input = who_ + ": input '" + signature_.inputs[i].name + "'";
    if (t.device.type != MLPH_DEVICE_HOST && t.device.type != MLPH_DEVICE_HOST_PINNED)
      sdk::fail(MLPH_INVALID_ARGUMENT, input + " is " + sdk::device_type_name(t.device.type) +
                                           " memory; this backend copies its inputs from host memory");
    if ((require_pinned_ || t.device.type == MLPH_DEVICE_HOST_PINNED) && !is_pinned(t.data, bytes_of(t)))
      sdk::fail(MLPH_INVALID_ARGUMENT,
                input + (t.device.type == MLPH_DEVICE_HOST_PINNED ? " is marked pinned (MLPH_DEVICE_HOST_PINNED)"
                                                                  : " (require_pinned_inputs)") +
                    " but is not input memory this backend allocated (alloc_input)");
    return t;
  }

  // Stream-ordered, between backward and the update: the sum of the window, averaged over the ranks.
  void average_gradients() {
    const std::span<float> gradients = parameter_gradients();
    if (device_comm_ && !gradients.empty())
      device_comm_->allreduce(gradients.data(), gradients.size(), MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE, stream_.get());
  }

  std::shared_ptr<Stream> stream_;
  std::optional<sdk::DeviceComm> device_comm_;  // with several ranks
  const bool require_pinned_;
  uint64_t last_copy_ = 0;  // the ticket of the last step's input copy
};

class Backend final : public sdk::Backend {
 public:
  explicit Backend(const sdk::BackendContext& context)
      : host_(context.host), device_{MLPH_DEVICE_EMULATED, context.topology.local_rank},
        devices_per_node_(context.topology.local_size) {
    const sdk::Options& options = context.options;
    options.allow_only(sdk::with_compute_options({"threads", "require_pinned_inputs"}), kWho);
    sdk::read_compute_settings(options, {sdk::Precision::fp32}, kWho);
    const long long threads = options.get_int("threads", std::max(1u, std::thread::hardware_concurrency()));
    if (threads < 1 || threads > 4096)
      sdk::fail(MLPH_INVALID_ARGUMENT, kWho + ": option 'threads' must be in [1, 4096], got " + options.get("threads"));
    require_pinned_ = options.get_bool("require_pinned_inputs", false, kWho);
    pool_ = std::make_shared<reference::ThreadPool>(static_cast<unsigned>(threads));
  }

  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    std::optional<sdk::DeviceComm> device_comm;
    if (comms) {
      const MLPH_DeviceCollectives* calls = sdk::find_device_collectives(comms->api, MLPH_DEVICE_EMULATED);
      if (!calls)
        sdk::fail(MLPH_FAILED_PRECONDITION, kWho + ": the comms plug-in has no device collectives for emulated "
                                                   "devices (MLPH_EXT_DEVICE_COLLECTIVES): run it with --comms emulated");
      device_comm.emplace(host_, calls, comms->comm);
      device_comm->bind(device_);
    }
    sdk::program::Program program = sdk::program::lower_graph(graph, sdk::program::implements());
    // The executor fills its buffers as it builds them: device memory, so on the stream.
    std::unique_ptr<Model> model;
    stream_->enqueue([&] {
      model = std::make_unique<Model>(host_, comms, std::move(program), Kernels{pool_, {}}, stream_,
                                      std::move(device_comm), require_pinned_);
    });
    stream_->synchronize();
    return model;
  }

  sdk::DeviceAttributes attributes() const override {
    return {device_, "emulated device (tests/plugins/emulated_device)", devices_per_node_, device_memory_bytes(),
            "fp32", true};
  }

  void* alloc_input(size_t bytes) { return pinned_malloc(bytes); }
  void free_input(void* data) { pinned_free(data); }

 private:
  const MLPH_HostApi* host_;
  const MLPH_Device device_;  // one emulated device per rank of a node, numbered by local rank
  const int32_t devices_per_node_;
  bool require_pinned_ = false;
  std::shared_ptr<reference::ThreadPool> pool_;
  std::shared_ptr<Stream> stream_ = std::make_shared<Stream>();  // every model's work, in order
};

}  // namespace
}  // namespace mlph::emulated

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "emulated", "0.1.0",
                   "test only: the reference kernels on a device emulated on the host (its own memory, a stream, "
                   "pinned inputs, device collectives)",
                   mlph::sdk::backend_api<mlph::emulated::Backend>())
