#include "cuda.hpp"

#include <cstdio>
#include <utility>

#include "mlph/sdk/util/error.hpp"

namespace mlph::cuda::runtime {

std::string error_text(cudaError_t error) {
  return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
}

MLPH_Code code_of(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return MLPH_RESOURCE_EXHAUSTED;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return MLPH_UNAVAILABLE;
    default:
      return MLPH_INTERNAL;
  }
}

int device_count() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) Context("cuda backend: no CUDA device").fail(code_of(error), "cudaGetDeviceCount", "", error_text(error));
  if (count <= 0) Context("cuda backend").fail(MLPH_UNAVAILABLE, "no CUDA device: cudaGetDeviceCount found none");
  return count;
}

DeviceInfo bind_device(int index, int count) {
  const Context where("cuda backend: device " + std::to_string(index));
  check(where, cudaSetDevice(index), "cudaSetDevice");
  check(where, cudaFree(nullptr), "creating its context (cudaFree(0))");
  cudaDeviceProp props{};
  check(where, cudaGetDeviceProperties(&props, index), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.index = index;
  info.name = props.name;
  info.memory_bytes = props.totalGlobalMem;
  info.multiprocessors = props.multiProcessorCount;
  info.major = props.major, info.minor = props.minor;
  info.count = count;
  return info;
}

void use_device(const Context& where, int index) { check(where, cudaSetDevice(index), "cudaSetDevice"); }

MemoryInfo memory_info(const Context& where) {
  MemoryInfo m;
  check(where, cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
  return m;
}

std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// ---- buffers ----

template <Memory kind>
Buffer<kind>::Buffer(const Context& where, size_t bytes, const std::string& what) : bytes_(bytes) {
  const size_t size = bytes ? bytes : 1;
  if constexpr (kind == Memory::device)
    check(where, cudaMalloc(&data_, size), "cudaMalloc", what + " (" + gib(bytes) + ")");
  else
    check(where, cudaHostAlloc(&data_, size, cudaHostAllocDefault), "cudaHostAlloc", what + " (" + gib(bytes) + ")");
}
template <Memory kind>
Buffer<kind>::~Buffer() {
  if (!data_) return;
  if constexpr (kind == Memory::device)
    cudaFree(data_);
  else
    cudaFreeHost(data_);
}
template <Memory kind>
Buffer<kind>::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
template <Memory kind>
Buffer<kind>& Buffer<kind>::operator=(Buffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}
template class Buffer<Memory::device>;
template class Buffer<Memory::pinned>;

// ---- streams and events ----

Stream::Stream(const Context& where) {
  check(where, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void Stream::synchronize(const Context& where, const std::string& about) const {
  check(where, cudaStreamSynchronize(stream_), "cudaStreamSynchronize", about);
}
void Stream::wait(const Context& where, cudaEvent_t event) const {
  check(where, cudaStreamWaitEvent(stream_, event, 0), "cudaStreamWaitEvent");
}

Event::Event(const Context& where) {
  check(where, cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(const Context& where, cudaStream_t stream) const {
  check(where, cudaEventRecord(event_, stream), "cudaEventRecord");
}
void Event::synchronize(const Context& where, const std::string& about) const {
  check(where, cudaEventSynchronize(event_), "cudaEventSynchronize", about);
}

// ---- graphs ----

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}
Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
Graph& Graph::operator=(Graph&& other) noexcept {
  std::swap(exec_, other.exec_);
  return *this;
}

void Graph::begin_capture(const Context& where, cudaStream_t stream) {
  check(where, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
        "the training step");
}

Graph Graph::end_capture(const Context& where, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  check(where, cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture", "the training step");
  Graph g;
  const cudaError_t error = cudaGraphInstantiate(&g.exec_, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is a copy
  check(where, error, "cudaGraphInstantiate", "the training step");
  return g;
}

void Graph::abandon_capture(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess || status == cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // the capture's error is not the stream's from now on
}

void Graph::launch(const Context& where, cudaStream_t stream) const {
  check(where, cudaGraphLaunch(exec_, stream), "cudaGraphLaunch", "the training step");
}

}  // namespace mlph::cuda::runtime
