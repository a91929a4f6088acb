// comms/nccl: see nccl_comm.hpp, and README.md beside it.
#include "nccl_comm.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "bootstrap.hpp"
#include "halo_add.hpp"
#include "launcher.hpp"
#include "local_comm.hpp"
#include "mpi_transport.hpp"
#include "peers.hpp"

namespace mlph::comms::nccl {

using mlph::sdk::fail;

namespace {

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t";
  }
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", s);
  return text;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Makes `device` current on this thread for a scope, as NCCL and event calls need.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~CurrentDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

std::optional<ncclDataType_t> nccl_type(MLPH_DType t) {
  switch (t) {
    case MLPH_DTYPE_F32: return ncclFloat32;
    case MLPH_DTYPE_F64: return ncclFloat64;
    case MLPH_DTYPE_F16: return ncclFloat16;
    case MLPH_DTYPE_BF16: return ncclBfloat16;
    case MLPH_DTYPE_I8: return ncclInt8;
    case MLPH_DTYPE_I32: return ncclInt32;
    case MLPH_DTYPE_I64: return ncclInt64;
    case MLPH_DTYPE_U8: return ncclUint8;
    case MLPH_DTYPE_I16: break;  // NCCL has no 16-bit integers
  }
  return std::nullopt;
}

bool is_float(MLPH_DType t) {
  return t == MLPH_DTYPE_F32 || t == MLPH_DTYPE_F64 || t == MLPH_DTYPE_F16 || t == MLPH_DTYPE_BF16;
}

const char* dtype_name(MLPH_DType t) {
  static const char* names[] = {"f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8"};
  return static_cast<unsigned>(t) < 9 ? names[t] : "unknown";
}

// Why this process cannot use CUDA device `id`, or nullopt when it is now current and ready.
std::optional<Outcome> prepare_device(int id, const std::string& where) {
  const auto failure = [&](MLPH_Code code, const std::string& why) {
    return Outcome{code, where + ": cannot bind to CUDA device " + std::to_string(id) + ": " + why};
  };
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess && (id < 0 || id >= count))
    return failure(MLPH_INVALID_ARGUMENT, "this process sees " + std::to_string(count) + " CUDA device(s)");
  if (error == cudaSuccess) error = cudaSetDevice(id);
  if (error == cudaSuccess) error = cudaFree(nullptr);  // makes the context now, so its errors are this one's
  if (error == cudaSuccess) return std::nullopt;
  cudaGetLastError();
  return failure(MLPH_UNAVAILABLE, cuda_error_text(error));
}

}  // namespace

std::string nccl_error_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = std::string(result_name(result)) + ": " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += ": " + std::string(last);
  return text;
}

std::string cuda_error_text(cudaError_t error) {
  return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
}

// ---- NcclCommunicator

// The events that mark collectives on their streams, reused; taken on the caller's thread, given back
// on the watchdog's.
class NcclCommunicator::Events {
 public:
  explicit Events(int device) : device_(device) {}
  ~Events() {
    CurrentDevice current(device_);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    const cudaError_t error = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (error != cudaSuccess) fail(MLPH_UNAVAILABLE, "cudaEventCreateWithFlags failed: " + cuda_error_text(error));
    return e;
  }
  void give_back(cudaEvent_t e) {
    std::lock_guard lock(mutex_);
    free_.push_back(e);
  }

 private:
  const int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

namespace {
class EventCompletion final : public Completion {
 public:
  EventCompletion(cudaEvent_t event, std::function<void(cudaEvent_t)> give_back)
      : event_(event), give_back_(std::move(give_back)) {}
  ~EventCompletion() override { give_back_(event_); }
  bool done() override {
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaSuccess) return true;
    if (error == cudaErrorNotReady) return false;
    cudaGetLastError();
    fail(MLPH_UNAVAILABLE, "CUDA error: " + cuda_error_text(error));
  }

 private:
  cudaEvent_t event_;
  std::function<void(cudaEvent_t)> give_back_;
};
}  // namespace

NcclCommunicator::NcclCommunicator(Setup setup) : setup_(std::move(setup)) {
  CurrentDevice current(setup_.device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once, so that a dead peer is a timeout, not a hang
  {
    std::lock_guard lock(mutex_);
    const ncclResult_t result = ncclCommInitRankConfig(&comm_, setup_.size, setup_.id, setup_.rank, &config);
    const ncclResult_t ready = wait_ready(result, after(setup_.timeout_s), "ncclCommInitRankConfig");
    if (ready != ncclSuccess) {
      const std::string message = setup_.where + ": ncclCommInitRankConfig on CUDA device " +
                                  std::to_string(setup_.device) + " failed: " + nccl_error_text(ready, comm_);
      abort_locked();
      fail(MLPH_UNAVAILABLE, message);
    }
  }
  events_ = std::make_unique<Events>(setup_.device);
  Hooks hooks;
  hooks.thread_start = [device = setup_.device] {
    cudaSetDevice(device);
    // Its event queries must not invalidate a graph that another thread is capturing meanwhile.
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&relaxed);
  };
  hooks.async_error = [this] { return async_error(); };
  hooks.abort = [this] {
    std::lock_guard lock(mutex_);
    abort_locked();
  };
  hooks.missing = setup_.missing;
  hooks.answer = setup_.answer;
  watchdog_.emplace(setup_.where, setup_.timeout_s, std::move(hooks));
}

NcclCommunicator::~NcclCommunicator() {
  if (watchdog_) watchdog_->stop();
  CurrentDevice current(setup_.device);
  std::lock_guard lock(mutex_);
  if (aborted_ || !comm_) return;
  // Finalize flushes what is in flight; a peer that is gone would leave it in progress: abort then.
  if (!failed() && wait_ready(ncclCommFinalize(comm_), after(setup_.timeout_s), "") == ncclSuccess)
    ncclCommDestroy(comm_);
  else
    abort_locked();
}

// A non-blocking communicator's call may return ncclInProgress: it is done when the communicator's
// state leaves ncclInProgress. Polls that state until then or `deadline`; a call (`what` not empty)
// also stops when the watchdog has failed the communicator meanwhile, and fails it at the deadline.
ncclResult_t NcclCommunicator::wait_ready(ncclResult_t result, Clock::time_point deadline, const std::string& what) {
  if (result != ncclInProgress || !comm_) return result;
  for (auto pause = std::chrono::microseconds(20);; pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress) return state;
    if (what.empty()) {
      if (Clock::now() > deadline) return ncclInProgress;
    } else {
      if (watchdog_) watchdog_->check();
      if (Clock::now() > deadline)
        fail_locked(MLPH_DEADLINE_EXCEEDED, setup_.where + ": " + what + " was still in progress after " +
                                                seconds(setup_.timeout_s) + " (comms.timeout_s)");
    }
    std::this_thread::sleep_for(pause);
  }
}

// Fails the communicator (the first failure is the one every call reports) and aborts it.
void NcclCommunicator::fail_locked(MLPH_Code code, const std::string& message) {
  if (watchdog_) watchdog_->fail(code, message + "; the NCCL communicator was aborted");
  abort_locked();
  if (watchdog_) watchdog_->check();
  fail(code, message);
}

void NcclCommunicator::abort_locked() {
  if (aborted_ || !comm_) return;
  ncclCommAbort(comm_);  // kernels waiting for peers return, so the streams drain
  aborted_ = true;
}

std::optional<std::string> NcclCommunicator::async_error() {
  std::unique_lock lock(mutex_, std::try_to_lock);  // a caller enqueueing polls it itself
  if (!lock || aborted_ || !comm_) return std::nullopt;
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
  if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
  return nccl_error_text(state, comm_);
}

NcclCommunicator::Enqueue::Enqueue(NcclCommunicator& owner, const char* operation, cudaStream_t stream)
    : owner_(owner), operation_(operation), stream_(stream), deadline_(after(owner.setup_.timeout_s)) {}

void NcclCommunicator::Enqueue::nccl(ncclResult_t result, const char* call) {
  const std::string what = std::string("device ") + operation_ + ": " + call;
  result = owner_.wait_ready(result, deadline_, what);
  if (result != ncclSuccess)
    owner_.fail_locked(MLPH_UNAVAILABLE, owner_.setup_.where + ": " + what + " failed: " +
                                             nccl_error_text(result, owner_.comm_));
}

void NcclCommunicator::Enqueue::cuda(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return;
  cudaGetLastError();
  owner_.fail_locked(error == cudaErrorMemoryAllocation ? MLPH_RESOURCE_EXHAUSTED : MLPH_UNAVAILABLE,
                     owner_.setup_.where + ": device " + operation_ + ": " + call + " failed: " + cuda_error_text(error));
}

void NcclCommunicator::abandon() {
  std::lock_guard lock(mutex_);
  abort_locked();
}

// A collective captured into a graph, as the graph's host nodes around it see each replay.
struct NcclCommunicator::Replayed {
  NcclCommunicator* owner;
  std::string operation;
  size_t bytes;
  std::mutex mutex;
  std::shared_ptr<std::atomic<bool>> done;  // this replay's

  class Flag final : public Completion {
   public:
    explicit Flag(std::shared_ptr<std::atomic<bool>> done) : done_(std::move(done)) {}
    bool done() override { return *done_; }

   private:
    std::shared_ptr<std::atomic<bool>> done_;
  };

  // Host functions may not call CUDA, and nothing may escape them.
  static void CUDART_CB starts(void* data) {
    auto& self = *static_cast<Replayed*>(data);
    auto done = std::make_shared<std::atomic<bool>>(false);
    {
      std::lock_guard lock(self.mutex);
      self.done = done;
    }
    Work work;
    work.sequence = ++self.owner->sequence_;
    work.operation = self.operation + " (graph replay)";
    work.bytes = self.bytes;
    work.completion = std::make_unique<Flag>(done);
    work.enqueued = Clock::now();
    try {
      self.owner->watchdog_->watch(std::move(work));
    } catch (...) {  // failed already: status() says so
    }
  }
  static void CUDART_CB ends(void* data) {
    auto& self = *static_cast<Replayed*>(data);
    std::lock_guard lock(self.mutex);
    if (self.done) *self.done = true;
  }
};

void NcclCommunicator::watch_replays(Enqueue& enqueue, const char* operation, size_t bytes,
                                     const std::function<void(Enqueue&)>& body) {
  auto replayed = std::make_unique<Replayed>();
  replayed->owner = this;
  replayed->operation = operation;
  replayed->bytes = bytes;
  enqueue.cuda(cudaLaunchHostFunc(enqueue.stream(), &Replayed::starts, replayed.get()), "cudaLaunchHostFunc");
  body(enqueue);
  enqueue.cuda(cudaLaunchHostFunc(enqueue.stream(), &Replayed::ends, replayed.get()), "cudaLaunchHostFunc");
  replayed_.push_back(std::move(replayed));
}

void NcclCommunicator::run(const char* operation, size_t bytes, cudaStream_t stream,
                           const std::function<void(Enqueue&)>& body) {
  CurrentDevice current(setup_.device);
  std::lock_guard lock(mutex_);
  watchdog_->check();
  Enqueue enqueue(*this, operation, stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  enqueue.cuda(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture == cudaStreamCaptureStatusActive) return watch_replays(enqueue, operation, bytes, body);
  body(enqueue);
  cudaEvent_t event = events_->take();
  enqueue.cuda(cudaEventRecord(event, stream), "cudaEventRecord");
  Work work;
  work.sequence = ++sequence_;
  work.operation = operation;
  work.bytes = bytes;
  work.completion = std::make_unique<EventCompletion>(event, [events = events_.get()](cudaEvent_t e) {
    events->give_back(e);
  });
  work.enqueued = Clock::now();
  watchdog_->watch(std::move(work));
}

// ---- NcclComm

namespace {
double timeout_option(const mlph::sdk::Options& options) {
  options.allow_only({"timeout_s"}, "comms/nccl");
  const auto timeout = options.get_int<int64_t>("timeout_s", 300);
  if (timeout <= 0) fail(MLPH_INVALID_ARGUMENT, "comms/nccl: option 'timeout_s' must be positive");
  return static_cast<double>(timeout);
}

// MPI carries the host side when a launcher started this process or the program runs MPI itself.
std::unique_ptr<mlph::sdk::Comm> transport(const MLPH_HostApi* host, double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized || started_by_launcher()) return std::make_unique<MpiComm>(host, "comms/nccl", timeout_s);
  return std::make_unique<LocalComm>("comms/nccl");
}
}  // namespace

NcclComm::NcclComm(const MLPH_HostApi* host, const mlph::sdk::Options& options)
    : NcclComm(host, timeout_option(options), nullptr) {}

NcclComm::NcclComm(const MLPH_HostApi* host, double timeout_s, std::unique_ptr<mlph::sdk::Comm> transport_comm)
    : host_(host),
      timeout_s_(timeout_s),
      transport_(transport_comm ? std::move(transport_comm) : transport(host, timeout_s)),
      mpi_(dynamic_cast<MpiComm*>(transport_.get())) {}

NcclComm::~NcclComm() {
  // A device failure ends the job as a host one does: the MPI transport aborts every rank when destroyed.
  if (device_ && mpi_) {
    try {
      device_->check();
    } catch (const sdk::Error& e) {
      mpi_->break_with(e.what());
    }
  }
  device_.reset();
}

std::unique_ptr<mlph::sdk::Comm> NcclComm::split(int32_t color, int32_t key) {
  return std::unique_ptr<NcclComm>(new NcclComm(host_, timeout_s_, host().split(color, key)));
}

std::string NcclComm::where() const { return mpi_ ? mpi_->where() : "comms/nccl: rank 0 of 1"; }

void NcclComm::bind(MLPH_Device device) {
  if (device_) {
    if (device_->device() == device.id) return;
    fail(MLPH_FAILED_PRECONDITION, where() + ": bound to CUDA device " + std::to_string(device_->device()) +
                                       " already; cannot bind to CUDA device " + std::to_string(device.id));
  }
  try {
    agree(*transport_, where(), prepare_device(device.id, where()).value_or(Outcome{}));
    device_ = make_communicator(device.id);
    bind_failure_.clear();
  } catch (const sdk::Error& e) {
    bind_failure_ = e.what();
    throw;
  }
}

// Rank 0's unique id to every rank, then the NCCL communicator on each; every rank learns whether all
// of them made theirs.
std::unique_ptr<NcclCommunicator> NcclComm::make_communicator(int device) {
  const MLPH_Topology topology = transport_->topology();
  NcclCommunicator::Setup setup;
  setup.device = device;
  setup.rank = topology.rank;
  setup.size = topology.size;
  setup.where = where();
  setup.timeout_s = timeout_s_;
  setup.id = share_from_rank0<ncclUniqueId>(*transport_, where(), [&] {
    ncclUniqueId id{};
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess)
      fail(MLPH_UNAVAILABLE, where() + ": ncclGetUniqueId failed: " + nccl_error_text(result, nullptr));
    return id;
  });
  if (mpi_) {
    Peers peers = peers_over(*mpi_, timeout_s_);
    setup.missing = std::move(peers.missing);
    setup.answer = std::move(peers.answer);
  }
  std::unique_ptr<NcclCommunicator> made;
  Outcome outcome;
  try {
    made = std::make_unique<NcclCommunicator>(std::move(setup));
  } catch (const sdk::Error& e) {
    outcome = {e.code(), e.what()};
  }
  try {
    agree(*transport_, where(), outcome);
  } catch (const sdk::Error&) {
    if (made) made->abandon();  // the others have none: finalizing would wait for them
    throw;
  }
  return made;
}

NcclCommunicator& NcclComm::bound(const char* operation) {
  if (!device_)
    fail(MLPH_FAILED_PRECONDITION, where() + ": device " + operation + " before bind" +
                                       (bind_failure_.empty() ? "" : " (bind failed: " + bind_failure_ + ")"));
  status();
  return *device_;
}

void NcclComm::status() {
  if (!device_) return;
  try {
    device_->check();
  } catch (const sdk::Error& e) {
    if (mpi_) mpi_->break_with(e.what());
    throw;
  }
}

void NcclComm::enqueue(const char* operation, size_t bytes, MLPH_Stream stream,
                       const std::function<void(NcclCommunicator::Enqueue&)>& body) {
  NcclCommunicator& device = bound(operation);
  try {
    device.run(operation, bytes, static_cast<cudaStream_t>(stream), body);
  } catch (const sdk::Error& e) {
    if (mpi_ && device.failed()) mpi_->break_with(e.what());
    throw;
  }
}

void NcclComm::allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op, MLPH_Stream stream) {
  bound("allreduce");
  if (op != MLPH_REDUCE_SUM && op != MLPH_REDUCE_AVERAGE && op != MLPH_REDUCE_MAX)
    fail(MLPH_INVALID_ARGUMENT, where() + ": device allreduce: unknown reduce op " + std::to_string(op));
  if (op == MLPH_REDUCE_AVERAGE && !is_float(dtype))
    fail(MLPH_INVALID_ARGUMENT, where() + ": device allreduce: AVERAGE of " + dtype_name(dtype) +
                                    " (integers) is not defined; use SUM");
  const auto type = nccl_type(dtype);
  if (!type)
    fail(MLPH_INVALID_ARGUMENT, where() + ": device allreduce: NCCL cannot reduce " + dtype_name(dtype) +
                                    " (f32, f64, f16, bf16, i8, i32, i64, u8)");
  if (count == 0) return;
  if (!data) fail(MLPH_INVALID_ARGUMENT, where() + ": device allreduce: no data");
  const ncclRedOp_t nccl_op = op == MLPH_REDUCE_SUM ? ncclSum : op == MLPH_REDUCE_AVERAGE ? ncclAvg : ncclMax;
  enqueue("allreduce", count * mlph_dtype_size(dtype), stream, [&](NcclCommunicator::Enqueue& q) {
    q.nccl(ncclAllReduce(data, data, count, *type, nccl_op, q.comm(), q.stream()), "ncclAllReduce");
  });
}

void NcclComm::broadcast(void* data, size_t bytes, int32_t root, MLPH_Stream stream) {
  bound("broadcast");
  if (root < 0 || root >= topology().size)
    fail(MLPH_INVALID_ARGUMENT, where() + ": device broadcast root " + std::to_string(root) + " is not a rank");
  if (bytes == 0) return;
  if (!data) fail(MLPH_INVALID_ARGUMENT, where() + ": device broadcast: no data");
  enqueue("broadcast", bytes, stream, [&](NcclCommunicator::Enqueue& q) {
    q.nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, q.comm(), q.stream()), "ncclBroadcast");
  });
}

void NcclComm::allgather(const void* send, void* recv, size_t bytes_per_rank, MLPH_Stream stream) {
  bound("allgather");
  if (bytes_per_rank == 0) return;
  if (!send || !recv) fail(MLPH_INVALID_ARGUMENT, where() + ": device allgather: no data");
  enqueue("allgather", bytes_per_rank, stream, [&](NcclCommunicator::Enqueue& q) {
    q.nccl(ncclAllGather(send, recv, bytes_per_rank, ncclUint8, q.comm(), q.stream()), "ncclAllGather");
  });
}

void NcclComm::halo_exchange(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
  halo(false, data, spec, stream);
}

void NcclComm::halo_accumulate(void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
  halo(true, data, spec, stream);
}

namespace {
// One step of a device halo exchange or accumulate (sdk::halo::Step, the host version's geometry):
// faces are packed with strided copies unless a slab is one contiguous run (the first dim), moved
// with ncclSend/ncclRecv in a group, and unpacked (exchange) or added (accumulate).
void move_step(NcclCommunicator::Enqueue& q, std::byte* data, const mlph::sdk::halo::Step& step, bool accumulate,
               MLPH_DType dtype) {
  if (step.low < 0 && step.high < 0) return;  // ends of a dim that is neither split nor periodic
  const mlph::sdk::halo::Slab& s = step.slab;
  const size_t bytes = s.bytes(), pitch = static_cast<size_t>(s.extent) * s.slice, rows = static_cast<size_t>(s.outer);
  const bool contiguous = s.outer == 1;
  const bool staged_sends = !contiguous, staged_recvs = !contiguous || accumulate;
  std::byte* staging = nullptr;
  const size_t staging_bytes = (staged_sends ? 2 * bytes : 0) + (staged_recvs ? 2 * bytes : 0);
  if (staging_bytes) q.cuda(cudaMallocAsync(reinterpret_cast<void**>(&staging), staging_bytes, q.stream()), "cudaMallocAsync");
  std::byte* next = staging;
  const auto face = [&](int64_t first, bool staged) {
    if (!staged) return data + first * static_cast<int64_t>(s.slice);
    std::byte* buffer = next;
    next += bytes;
    return buffer;
  };
  const auto at = [&](int64_t first) { return data + first * static_cast<int64_t>(s.slice); };
  std::byte* to_low = face(step.to_low, staged_sends);
  std::byte* to_high = face(step.to_high, staged_sends);
  std::byte* from_low = face(step.from_low, staged_recvs);
  std::byte* from_high = face(step.from_high, staged_recvs);
  if (staged_sends) {
    if (step.low >= 0)
      q.cuda(cudaMemcpy2DAsync(to_low, s.chunk, at(step.to_low), pitch, s.chunk, rows, cudaMemcpyDeviceToDevice, q.stream()),
             "cudaMemcpy2DAsync");
    if (step.high >= 0)
      q.cuda(cudaMemcpy2DAsync(to_high, s.chunk, at(step.to_high), pitch, s.chunk, rows, cudaMemcpyDeviceToDevice,
                               q.stream()),
             "cudaMemcpy2DAsync");
  }
  // NCCL matches the sends and receives between two ranks in the order they were made: data moving
  // down (to the low neighbour, from the high one) first, then up, so that with a periodic dim of one
  // or two ranks (both neighbours the same rank) each face still lands in its halo.
  q.nccl(ncclGroupStart(), "ncclGroupStart");
  if (step.low >= 0) q.nccl(ncclSend(to_low, bytes, ncclUint8, step.low, q.comm(), q.stream()), "ncclSend");
  if (step.high >= 0) q.nccl(ncclRecv(from_high, bytes, ncclUint8, step.high, q.comm(), q.stream()), "ncclRecv");
  if (step.high >= 0) q.nccl(ncclSend(to_high, bytes, ncclUint8, step.high, q.comm(), q.stream()), "ncclSend");
  if (step.low >= 0) q.nccl(ncclRecv(from_low, bytes, ncclUint8, step.low, q.comm(), q.stream()), "ncclRecv");
  q.nccl(ncclGroupEnd(), "ncclGroupEnd");
  if (accumulate) {
    // The halos sent back are zeroed (their contribution now lives with their owner), then what came
    // back is added into the interior rows it was copied from.
    if (step.low >= 0) q.cuda(cudaMemset2DAsync(at(step.to_low), pitch, 0, s.chunk, rows, q.stream()), "cudaMemset2DAsync");
    if (step.high >= 0) q.cuda(cudaMemset2DAsync(at(step.to_high), pitch, 0, s.chunk, rows, q.stream()), "cudaMemset2DAsync");
    if (step.low >= 0) q.cuda(add_rows(at(step.from_low), pitch, from_low, s.chunk, rows, dtype, q.stream()), "add_rows");
    if (step.high >= 0) q.cuda(add_rows(at(step.from_high), pitch, from_high, s.chunk, rows, dtype, q.stream()), "add_rows");
  } else if (staged_recvs) {
    if (step.low >= 0)
      q.cuda(cudaMemcpy2DAsync(at(step.from_low), pitch, from_low, s.chunk, s.chunk, rows, cudaMemcpyDeviceToDevice,
                               q.stream()),
             "cudaMemcpy2DAsync");
    if (step.high >= 0)
      q.cuda(cudaMemcpy2DAsync(at(step.from_high), pitch, from_high, s.chunk, s.chunk, rows, cudaMemcpyDeviceToDevice,
                               q.stream()),
             "cudaMemcpy2DAsync");
  }
  if (staging) q.cuda(cudaFreeAsync(staging, q.stream()), "cudaFreeAsync");
}
}  // namespace

void NcclComm::halo(bool accumulate, void* data, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
  const char* operation = accumulate ? "halo accumulate" : "halo exchange";
  bound(operation);
  const MLPH_Topology topology = transport_->topology();
  if (accumulate)
    mlph::sdk::halo::validate_accumulate(spec, topology.size, where());
  else
    mlph::sdk::halo::validate(spec, topology.size, where());
  if (!data) fail(MLPH_INVALID_ARGUMENT, where() + ": device " + operation + ": no data");
  const auto steps = accumulate ? mlph::sdk::halo::accumulate_steps(spec, topology.rank)
                                : mlph::sdk::halo::exchange_steps(spec, topology.rank);
  if (steps.empty()) return;
  enqueue(operation, mlph::sdk::halo::bytes_sent(spec, topology.rank), stream, [&](NcclCommunicator::Enqueue& q) {
    for (const auto& step : steps) move_step(q, static_cast<std::byte*>(data), step, accumulate, spec.dtype);
  });
}

}  // namespace mlph::comms::nccl
