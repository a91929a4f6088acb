#include "tensor.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::conformance {

HostTensor HostTensor::zeros(std::string name, MLPH_DType dtype, std::vector<int64_t> shape) {
  HostTensor t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.resize(t.numel() * mlph_dtype_size(dtype));
  return t;
}

HostTensor HostTensor::like(const MLPH_Value& value) {
  return zeros(value.name ? value.name : "", value.dtype, {value.shape, value.shape + value.ndim});
}

size_t HostTensor::numel() const {
  return static_cast<size_t>(sdk::numel(shape.data(), static_cast<int32_t>(shape.size())));
}

double HostTensor::at(size_t i) const {
  switch (dtype) {
    case MLPH_DTYPE_F32: return as<float>()[i];
    case MLPH_DTYPE_F64: return as<double>()[i];
    case MLPH_DTYPE_I16: return as<int16_t>()[i];
    case MLPH_DTYPE_I32: return as<int32_t>()[i];
    case MLPH_DTYPE_I64: return static_cast<double>(as<int64_t>()[i]);
    case MLPH_DTYPE_I8: return as<int8_t>()[i];
    case MLPH_DTYPE_U8: return as<uint8_t>()[i];
    case MLPH_DTYPE_F16:
    case MLPH_DTYPE_BF16: break;
  }
  throw std::logic_error("conformance: tensor '" + name + "' has a dtype the check does not read");
}

MLPH_Tensor HostTensor::view() {
  return sdk::host_tensor(dtype, shape.data(), static_cast<int32_t>(shape.size()), bytes.data());
}

double relative_error(const HostTensor& candidate, const HostTensor& reference) {
  double diff2 = 0, ref2 = 0, diff_max = 0, ref_max = 0;
  for (size_t i = 0; i < reference.numel(); ++i) {
    const double r = reference.at(i), d = candidate.at(i) - r;
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    diff2 += d * d, ref2 += r * r;
    diff_max = std::max(diff_max, std::abs(d)), ref_max = std::max(ref_max, std::abs(r));
  }
  if (diff_max == 0) return 0;
  if (ref_max == 0) return std::numeric_limits<double>::infinity();
  return std::max(std::sqrt(diff2 / ref2), diff_max / ref_max);
}

}  // namespace mlph::conformance
