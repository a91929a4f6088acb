// Host tensors the conformance check owns, and how far a candidate's tensor is from the reference's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"

namespace mlph::conformance {

struct HostTensor {
  std::string name;  // for messages: the graph value it holds
  MLPH_DType dtype = MLPH_DTYPE_F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  static HostTensor zeros(std::string name, MLPH_DType dtype, std::vector<int64_t> shape);
  static HostTensor like(const MLPH_Value& value);

  size_t numel() const;
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  double at(size_t i) const;  // element i as a double, whatever the dtype
  // A borrowed view for the ABI; valid while this tensor lives and keeps its size.
  MLPH_Tensor view();
};

// The error of `candidate` against `reference` (same shape): the larger of the relative L2 error
// ||c - r||_2 / ||r||_2 and the scaled max-abs error max|c - r| / max|r|. The first sees a
// drift spread over the whole tensor, the second a few wrong elements that the L2 norm dilutes.
// Both are 0 for equal tensors, and infinite (or NaN) when the reference is zero and the candidate is not.
double relative_error(const HostTensor& candidate, const HostTensor& reference);

}  // namespace mlph::conformance
