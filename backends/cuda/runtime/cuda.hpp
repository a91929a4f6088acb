// RAII over the CUDA runtime for the cuda backend: the device, device and pinned buffers, streams,
// events and CUDA graphs. Every failing call throws one sdk::Error line through a Context (context.hpp).
// Included by the backend's .cpp files only (it brings <cuda_runtime_api.h>).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "context.hpp"

namespace mlph::cuda::runtime {

// "out of memory (cudaErrorMemoryAllocation)".
std::string error_text(cudaError_t error);
// What a failing call means to the caller: out of memory, no usable device, or anything else.
MLPH_Code code_of(cudaError_t error);
inline void check(const Context& where, cudaError_t error, const char* call, const std::string& about = "") {
  if (error != cudaSuccess) where.fail(code_of(error), call, about, error_text(error));
}

// The CUDA devices this process sees; none (no driver, no GPU) is one line:
//   cuda backend: no CUDA device: cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)
int device_count();

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t memory_bytes = 0;
  int multiprocessors = 0, major = 0, minor = 0;
  int count = 0;  // devices this process sees
};
// Makes device `index` current on the calling thread (and creates its context) and describes it.
DeviceInfo bind_device(int index, int count);
// Makes the device current on the calling thread: every entry into the backend may come from another one.
void use_device(const Context& where, int index);

struct MemoryInfo {
  size_t free = 0, total = 0;
};
MemoryInfo memory_info(const Context& where);

// "1.50 GiB".
std::string gib(size_t bytes);

// Memory the runtime allocates: on the device (cudaMalloc), or page-locked on the host (cudaHostAlloc),
// which the device copies to and from asynchronously.
enum class Memory { device, pinned };

template <Memory kind>
class Buffer {
 public:
  Buffer() = default;
  // `what` names the buffer in the error ("cudaMalloc for the arena (3.20 GiB)").
  Buffer(const Context& where, size_t bytes, const std::string& what);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <class T = void>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(data_) + offset);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<Memory::device>;
using PinnedBuffer = Buffer<Memory::pinned>;

// A stream that does not synchronize with the legacy default stream.
class Stream {
 public:
  explicit Stream(const Context& where);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize(const Context& where, const std::string& about) const;
  // Work enqueued after this waits for `event`.
  void wait(const Context& where, cudaEvent_t event) const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event without timing: an order between streams, or a point the host waits for.
class Event {
 public:
  explicit Event(const Context& where);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(const Context& where, cudaStream_t stream) const;
  void synchronize(const Context& where, const std::string& about) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// An instantiated CUDA graph. Capture is thread-local (cudaStreamCaptureModeThreadLocal): other threads
// (a comms plug-in's watchdog polling its events) are not disturbed by it.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;

  static void begin_capture(const Context& where, cudaStream_t stream);
  // Ends the capture begun on `stream` and instantiates what it recorded.
  static Graph end_capture(const Context& where, cudaStream_t stream);
  // Ends a capture that failed part way, dropping what it recorded (never throws).
  static void abandon_capture(cudaStream_t stream) noexcept;

  explicit operator bool() const { return exec_ != nullptr; }
  void launch(const Context& where, cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace mlph::cuda::runtime
