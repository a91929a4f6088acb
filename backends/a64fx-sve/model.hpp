// The a64fx-sve executor: runs a lowered graph node by node on the SVE kernels. Every value has its
// own buffer, aligned to A64FX's 256-byte cache lines; the steps, parameters, gradients (averaged
// over the ranks in buckets overlapped with backward) and checkpoint state are the SDK's host
// executor's (sdk/host_executor.hpp), as the reference backend's.
#pragma once

#include <new>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/host_executor.hpp"

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
using Buffer = std::vector<float, LineAligned<float>>;

class SveModel final : public sdk::host::Executor<Buffer> {
 public:
  // Throws sdk::Error when the graph is invalid or uses what this backend does not run. `comms` may be null.
  SveModel(const MLPH_HostApi* host, Threads threads, const MLPH_Graph& graph, const MLPH_CommsHandle* comms);

 private:
  void forward_node(const Node& node, bool training, uint64_t step) override;
  void backward_node(const Node& node) override;
  double regularize() override;
  void apply_optimizer(double learning_rate, uint64_t step) override;
  void zero(float* data, int64_t n) override;
  void load_floats(MLPH_DType dtype, const void* src, int64_t n, float* dst) override;

  Threads threads_;
  ConvScratch conv_scratch_;          // reused by every conv node, one at a time
  std::vector<float> dense_partial_;  // the dense forward's partial sums
};

}  // namespace mlph::a64fx
