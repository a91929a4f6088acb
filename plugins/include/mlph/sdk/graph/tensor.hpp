// Small helpers over MLPH_Tensor / MLPH_Value for plug-in authors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

inline int64_t numel(const int64_t* shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}
inline int64_t numel(const MLPH_Value& v) { return numel(v.shape, v.ndim); }
inline int64_t numel(const MLPH_Tensor& t) { return numel(t.shape, t.ndim); }

inline std::string shape_string(const int64_t* shape, int32_t ndim) {
  std::string s = "[";
  for (int32_t i = 0; i < ndim; ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);  // appended, not `"," + ...`: GCC 12 warns falsely (-Wrestrict) on that
  }
  s += ']';
  return s;
}

// A value of a graph, owning its name and shape (the validator's and the lowered program's copy).
struct GraphValue {
  std::string name;
  MLPH_DType dtype = MLPH_DTYPE_F32;
  std::vector<int64_t> shape;

  int64_t numel() const { return sdk::numel(shape.data(), static_cast<int32_t>(shape.size())); }
  MLPH_Value as_value() const {  // its name points into this GraphValue
    MLPH_Value v{};
    v.name = name.c_str();
    v.dtype = dtype;
    v.ndim = static_cast<int32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), v.shape);
    return v;
  }
};

inline std::string shape_string(const std::vector<int64_t>& shape) {
  return shape_string(shape.data(), static_cast<int32_t>(shape.size()));
}

inline MLPH_Tensor host_tensor(MLPH_DType dtype, const int64_t* shape, int32_t ndim, void* data) {
  MLPH_Tensor t{};
  t.struct_size = sizeof(MLPH_Tensor);
  t.dtype = dtype;
  t.ndim = ndim;
  for (int32_t i = 0; i < ndim; ++i) t.shape[i] = shape[i];
  t.device = {MLPH_DEVICE_HOST, 0};
  t.data = data;
  return t;
}

// Throws unless `t` is a dense host tensor with the value's dtype and shape.
inline void check_matches(const MLPH_Tensor& t, const MLPH_Value& v, const std::string& what) {
  bool same = t.dtype == v.dtype && t.ndim == v.ndim && t.strides == nullptr &&
              (t.device.type == MLPH_DEVICE_HOST || t.device.type == MLPH_DEVICE_HOST_PINNED);
  for (int32_t i = 0; same && i < v.ndim; ++i) same = t.shape[i] == v.shape[i];
  if (!same)
    fail(MLPH_INVALID_ARGUMENT, what + " '" + v.name + "': expected dense host tensor " +
                                    shape_string(v.shape, v.ndim) + ", got " + shape_string(t.shape, t.ndim));
}

}  // namespace mlph::sdk
