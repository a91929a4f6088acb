// libmlph-comms-emulated.so: the MPI transport (comms/mpi's) with the device collectives of ABI 1.6 for
// the emulated device (MLPH_DEVICE_EMULATED), as comms/nccl is for CUDA. `bind` checks that the device
// is the rank's own (its local rank) and makes a communicator of its own for the device calls
// (NCCL's), so that they never interleave with host calls on the run's communicator; each device call
// is checked at once, then enqueued on the caller's stream (an emulated::Stream) and runs there, in
// order with the backend's work, over memory only a stream may touch. A failed collective fails the
// stream and the communicator (`status`), as a timed-out NCCL collective does. Test only: the emulated
// backend's tests run it under 2 MPI ranks.
#include <memory>
#include <mutex>
#include <string>

#include "emulated_device.hpp"
#include "mlph/sdk/comms/plugin.hpp"
#include "mpi_transport.hpp"

namespace {

using namespace mlph;

constexpr const char* kName = "comms/emulated";

double timeout_option(const sdk::Options& options) {
  options.allow_only({"timeout_s"}, kName);
  return options.has("timeout_s") ? options.get_number("timeout_s") : 300.0;
}

class EmulatedComm final : public sdk::Comm {
 public:
  static constexpr MLPH_DeviceType device_type = MLPH_DEVICE_EMULATED;

  EmulatedComm(const MLPH_HostApi* host, const sdk::Options& options)
      : mpi_(std::make_unique<comms::MpiComm>(host, kName, timeout_option(options))) {}
  explicit EmulatedComm(std::unique_ptr<comms::MpiComm> mpi) : mpi_(std::move(mpi)) {}

  // The host calls: the MPI transport's.
  MLPH_Topology topology() override { return mpi_->topology(); }
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) override {
    mpi_->allreduce(data, count, dtype, op);
  }
  void broadcast(void* data, size_t bytes, int32_t root) override { mpi_->broadcast(data, bytes, root); }
  void allgather(const void* send, void* recv, size_t bytes) override { mpi_->allgather(send, recv, bytes); }
  void barrier() override { mpi_->barrier(); }
  void halo_exchange(void* data, const MLPH_HaloSpec& spec) override { mpi_->halo_exchange(data, spec); }
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec) override { mpi_->halo_accumulate(data, spec); }
  std::unique_ptr<sdk::Comm> split(int32_t color, int32_t key) override {
    return std::make_unique<EmulatedComm>(mpi_->split_mpi(color, key));
  }

  // The device calls: on the stream, over device memory, on the communicator bind made.
  // Each rank has an emulated device of its own, numbered by its local rank (as a node's GPUs are
  // shared out by local rank): binding another is the mistake a backend picking its device makes.
  void bind(MLPH_Device device) {
    const int32_t mine = mpi_->topology().local_rank;
    if (device.id != mine)
      sdk::fail(MLPH_INVALID_ARGUMENT, mpi_->where() + ": bind: this rank's emulated device is device " +
                                           std::to_string(mine) + ", not " + std::to_string(device.id));
    if (!device_) device_ = mpi_->split_mpi(0, mpi_->rank());  // collective, as bind is
  }
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream) {
    check(stream, "allreduce", data, count * mlph_dtype_size(dtype));
    enqueue(stream, [=, this] { device_->allreduce(data, count, dtype, op); });
  }
  void broadcast(void* data, size_t bytes, int32_t root, MLPH_Stream stream) {
    check(stream, "broadcast", data, bytes);
    enqueue(stream, [=, this] { device_->broadcast(data, bytes, root); });
  }
  void allgather(const void* send, void* recv, size_t bytes, MLPH_Stream stream) {
    check(stream, "allgather", send, bytes);
    check(stream, "allgather", recv, bytes * static_cast<size_t>(mpi_->size()));
    enqueue(stream, [=, this] { device_->allgather(send, recv, bytes); });
  }
  void halo_exchange(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
    sdk::halo::validate(spec, mpi_->size(), mpi_->where());
    check(stream, "halo exchange", data, block_bytes(spec));
    enqueue(stream, [=, this] { device_->halo_exchange(data, spec); });
  }
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
    sdk::halo::validate_accumulate(spec, mpi_->size(), mpi_->where());
    check(stream, "halo accumulate", data, block_bytes(spec));
    enqueue(stream, [=, this] { device_->halo_accumulate(data, spec); });
  }
  void status() {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) sdk::fail(MLPH_UNAVAILABLE, failure_);
  }

 private:
  static size_t block_bytes(const MLPH_HaloSpec& spec) {
    size_t bytes = mlph_dtype_size(spec.dtype);
    for (int32_t d = 0; d < spec.ndim; ++d) bytes *= static_cast<size_t>(spec.shape[d]);
    return bytes;
  }

  // What can be checked at enqueue: bound, a stream, device memory, no earlier failure.
  void check(MLPH_Stream stream, const char* what, const void* data, size_t bytes) {
    if (!device_) sdk::fail(MLPH_FAILED_PRECONDITION, mpi_->where() + ": device " + what + " before bind");
    if (!stream) sdk::fail(MLPH_INVALID_ARGUMENT, mpi_->where() + ": device " + what + " without a stream");
    if (bytes > 0 && !emulated::is_device(data, bytes))
      sdk::fail(MLPH_INVALID_ARGUMENT,
                mpi_->where() + ": device " + what + " on " + std::to_string(bytes) + " bytes that are not the device's");
    status();
  }

  // `body` on the stream; its failure fails the stream (the backend's synchronize throws it) and the
  // communicator.
  template <class Body>
  void enqueue(MLPH_Stream stream, Body body) {
    static_cast<emulated::Stream*>(stream)->enqueue([this, body] {
      try {
        body();
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex_);
        if (failure_.empty()) failure_ = e.what();
        throw;
      }
    });
  }

  std::unique_ptr<comms::MpiComm> mpi_;
  std::unique_ptr<comms::MpiComm> device_;  // the device calls' own communicator, once bound
  std::mutex mutex_;
  std::string failure_;  // the first collective that failed: every later device call fails
};

}  // namespace

MLPH_DEFINE_PLUGIN(MLPH_KIND_COMMS, "emulated", "0.1.0",
                   "test only: MPI collectives, and device collectives on the emulated device's streams",
                   mlph::sdk::comms_api<EmulatedComm>())
