// The a64fx-sve model: the SDK's host executor (sdk/host/executor.hpp: buffers, steps, the dispatch
// over the op kinds, gradients averaged over the ranks in buckets overlapped with backward,
// checkpoint state) running the SVE kernels (kernels.hpp), every value in its own buffer aligned to
// A64FX's 256-byte cache lines.
#pragma once

#include <memory>
#include <new>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::a64fx {

// std::allocator with A64FX's cache-line alignment: no vector straddles a line it need not.
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{256};
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  friend bool operator==(const LineAligned&, const LineAligned&) { return true; }
};

// What the executor runs the kernels with: the thread count and one scratch per model.
struct Kernels {
  using Buffer = std::vector<float, LineAligned<float>>;
  Threads count;
  Scratch scratch;
  Threads threads() const { return count; }
};

// Throws sdk::Error when the graph is invalid or uses what this backend does not run. `comms` may be null.
std::unique_ptr<sdk::Model> compile_model(const MLPH_HostApi* host, Threads threads, const MLPH_Graph& graph,
                                          const MLPH_CommsHandle* comms);

}  // namespace mlph::a64fx
