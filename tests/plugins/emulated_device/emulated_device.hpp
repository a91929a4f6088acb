// A device emulated on the host (MLPH_DEVICE_EMULATED), so that the device paths of the ABI (1.6) are
// tested without a GPU: the test device backend and the test comms plug-in share it through this one
// shared library, as a GPU's backend and its collectives share the device's runtime.
//  - A Stream runs the work enqueued on it in order, on a thread of its own, once idle after a delay
//    (MLPH_EMULATED_DEVICE_DELAY_US, default 200) that a caller waiting for it cuts short: work really
//    runs later than the call that enqueued it, so a caller that reads a result without
//    synchronizing, or rewrites an input the stream has yet to read, gets wrong numbers.
//  - Device memory is one arena (MLPH_EMULATED_DEVICE_BYTES, default 8 GiB of address space) that only
//    a stream's work may touch: readable and writable while a stream runs work, inaccessible
//    (PROT_NONE) otherwise, so a host touch of it faults at once (the protection is the process's:
//    another thread touching it while a stream runs is not caught). Memory is poisoned (NaN) when
//    allocated and when freed.
//  - Pinned memory: host blocks the backend hands out for input batches (alloc_input), poisoned when freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace mlph::emulated {

class Stream {
 public:
  Stream();
  ~Stream();  // finishes the work enqueued, then stops
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Runs `task` after everything enqueued before it; returns its ticket (1, 2, ...). A task that
  // throws fails the stream: the tasks after it are skipped (as a CUDA error is sticky) until
  // synchronize() reports the failure.
  uint64_t enqueue(std::function<void()> task);
  // Waits until the task of `ticket` has run or been skipped (an event's synchronize); 0: returns at once.
  void wait(uint64_t ticket);
  // Waits for everything enqueued; rethrows the first failure since the last synchronize.
  void synchronize();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Device memory: 256-byte aligned, NaN-poisoned; std::bad_alloc when the arena is full.
void* device_malloc(size_t bytes);
void device_free(void* data);  // NULL: nothing
size_t device_memory_bytes();  // the arena's size (MLPH_EMULATED_DEVICE_BYTES, default 8 GiB)
// Whether [data, data + bytes) lies inside one device allocation.
bool is_device(const void* data, size_t bytes);

// For std::vector<float, DeviceAllocator<float>>: a vector whose elements only a stream's task may touch.
template <class T>
struct DeviceAllocator {
  using value_type = T;
  DeviceAllocator() = default;
  template <class U>
  DeviceAllocator(const DeviceAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(device_malloc(n * sizeof(T))); }
  void deallocate(T* data, size_t) { device_free(data); }
  friend bool operator==(const DeviceAllocator&, const DeviceAllocator&) { return true; }
};

// Pinned host memory: 64-byte aligned; whether [data, data + bytes) lies inside one such block.
void* pinned_malloc(size_t bytes);
void pinned_free(void* data);  // NULL: nothing
bool is_pinned(const void* data, size_t bytes);

}  // namespace mlph::emulated
