// comms/nccl: host collectives over the MPI transport (or one rank alone, without a launcher), and
// device collectives over NCCL (MLPH_DeviceCollectives), each bounded by comms.timeout_s.
//
// Streams and threads: a communicator's device calls are serialized (a lock), and NCCL runs them in
// the order they were made, whatever their streams. Every rank must make them in the same order: a
// backend that reduces gradient buckets on one stream and something else on another either makes
// those calls from one thread in a fixed order, or uses a second communicator (split with one color
// for all, then bind) for the second stream.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mlph/sdk/comms/plugin.hpp"
#include "watchdog.hpp"

namespace mlph::comms {
class MpiComm;
}

namespace mlph::comms::nccl {

// "ncclRemoteError: remote process exited or there was a network error: <NCCL's last error>".
std::string nccl_error_text(ncclResult_t result, ncclComm_t comm);
// "CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)".
std::string cuda_error_text(cudaError_t error);

// One bound communicator's NCCL side: a non-blocking ncclComm_t, the events that mark its collectives
// on their streams, and the watchdog that holds each to comms.timeout_s.
class NcclCommunicator {
 public:
  struct Setup {
    int device = 0, rank = 0, size = 1;
    ncclUniqueId id{};
    std::string where;  // "comms/nccl: rank 0 of 2"
    double timeout_s = 300;
    std::function<std::string(uint64_t)> missing;  // Hooks::missing and Hooks::answer (empty: one rank)
    std::function<void(uint64_t)> answer;
  };
  // Makes the NCCL communicator (collective over the ranks), within timeout_s.
  explicit NcclCommunicator(Setup setup);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // What a collective's body enqueues with: NCCL calls (waited for while in progress, as a non-blocking
  // communicator needs) and CUDA calls; any failure fails the communicator.
  class Enqueue {
   public:
    ncclComm_t comm() const { return owner_.comm_; }
    cudaStream_t stream() const { return stream_; }
    void nccl(ncclResult_t result, const char* call);
    void cuda(cudaError_t error, const char* call);

   private:
    friend class NcclCommunicator;
    Enqueue(NcclCommunicator& owner, const char* operation, cudaStream_t stream);
    NcclCommunicator& owner_;
    const char* operation_;
    cudaStream_t stream_;
    Clock::time_point deadline_;
  };

  int device() const { return setup_.device; }
  // Enqueues one collective: `body` under the communicator's lock, then an event on `stream` that the
  // watchdog follows. On a stream being captured into a CUDA graph, host nodes around the collective
  // tell the watchdog when each replay starts it and when it is done instead (such a graph must be
  // destroyed before the communicator: its nodes point into it).
  void run(const char* operation, size_t bytes, cudaStream_t stream, const std::function<void(Enqueue&)>& body);
  // Throws the communicator's failure.
  void check() const { watchdog_->check(); }
  bool failed() const { return watchdog_->failed(); }
  // For a communicator the other ranks could not make theirs of: aborts it rather than waiting for them.
  void abandon();

 private:
  class Events;
  struct Replayed;
  ncclResult_t wait_ready(ncclResult_t result, Clock::time_point deadline, const std::string& what);
  [[noreturn]] void fail_locked(MLPH_Code code, const std::string& message);
  void abort_locked();
  std::optional<std::string> async_error();
  void watch_replays(Enqueue& enqueue, const char* operation, size_t bytes, const std::function<void(Enqueue&)>& body);

  const Setup setup_;
  mutable std::mutex mutex_;  // every NCCL call on comm_
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::atomic<uint64_t> sequence_{0};  // also counted by graph replays, on CUDA's host-function thread
  std::unique_ptr<Events> events_;
  std::vector<std::unique_ptr<Replayed>> replayed_;  // what captured graphs' host nodes point to
  std::optional<Watchdog> watchdog_;  // last: stopped (and its markers released) first
};

class NcclComm final : public mlph::sdk::Comm {
 public:
  static constexpr MLPH_DeviceType device_type = MLPH_DEVICE_CUDA;

  NcclComm(const MLPH_HostApi* host, const mlph::sdk::Options& options);
  ~NcclComm() override;

  // Host memory, over the transport (failing, as every later call, once the device side has failed).
  MLPH_Topology topology() override { return transport_->topology(); }
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) override {
    host().allreduce(data, count, dtype, op);
  }
  void broadcast(void* data, size_t bytes, int32_t root) override { host().broadcast(data, bytes, root); }
  void allgather(const void* send, void* recv, size_t bytes) override { host().allgather(send, recv, bytes); }
  void barrier() override { host().barrier(); }
  void halo_exchange(void* data, const MLPH_HaloSpec& spec) override { host().halo_exchange(data, spec); }
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec) override { host().halo_accumulate(data, spec); }
  std::unique_ptr<mlph::sdk::Comm> split(int32_t color, int32_t key) override;

  // Device memory on CUDA streams (MLPH_DeviceCollectives).
  void bind(MLPH_Device device);
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream);
  void broadcast(void* data, size_t bytes, int32_t root, MLPH_Stream stream);
  void allgather(const void* send, void* recv, size_t bytes_per_rank, MLPH_Stream stream);
  void halo_exchange(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream);
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream);
  void status();

 private:
  NcclComm(const MLPH_HostApi* host, double timeout_s, std::unique_ptr<mlph::sdk::Comm> transport);
  std::string where() const;
  mlph::sdk::Comm& host() {
    status();
    return *transport_;
  }
  std::unique_ptr<NcclCommunicator> make_communicator(int device);
  NcclCommunicator& bound(const char* operation);
  void enqueue(const char* operation, size_t bytes, MLPH_Stream stream,
               const std::function<void(NcclCommunicator::Enqueue&)>& body);
  void halo(bool accumulate, void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream);

  const MLPH_HostApi* host_;
  double timeout_s_ = 300;
  std::unique_ptr<mlph::sdk::Comm> transport_;
  MpiComm* mpi_ = nullptr;  // the transport when it is MPI; NULL for one rank without a launcher
  std::unique_ptr<NcclCommunicator> device_;  // once bound; destroyed before the transport
  std::string bind_failure_;
};

}  // namespace mlph::comms::nccl
