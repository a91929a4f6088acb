// The size of a dense tensor a file describes (a checkpoint's manifest, an export's entry), computed
// before anything is allocated for it: a shape read from a file can have too many dims, negative
// ones, or a product that wraps around 64 bits ([2^62 + 1, 4] "holds" 4 elements).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "mlph/common.h"

namespace mlph::core {

// prod(shape) elements of `item_bytes` each; nullopt for more than MLPH_MAX_DIMS dims, a negative
// dim, or a count or size past 64 bits. A shape without dims is a scalar (1 element).
inline std::optional<uint64_t> tensor_bytes(std::span<const int64_t> shape, uint64_t item_bytes) {
  if (shape.size() > MLPH_MAX_DIMS) return std::nullopt;
  uint64_t bytes = item_bytes;
  for (const int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) return std::nullopt;
  }
  return bytes;
}

inline std::optional<uint64_t> tensor_bytes(std::span<const int64_t> shape, MLPH_DType dtype) {
  return tensor_bytes(shape, mlph_dtype_size(dtype));
}

}  // namespace mlph::core
