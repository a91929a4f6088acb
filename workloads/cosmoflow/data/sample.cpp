#include "sample.hpp"

namespace mlph::cosmoflow {

size_t volume_elements(int edge) {
  if (edge < 1 || edge > kMaxEdge)
    throw std::invalid_argument("CosmoFlow sample edge must be in 1.." + std::to_string(kMaxEdge) + ", got " +
                                std::to_string(edge));
  const auto e = static_cast<size_t>(edge);
  return e * e * e * kChannels;
}

std::string volume_name(int edge) { return std::to_string(edge) + "^3x" + std::to_string(kChannels); }

}  // namespace mlph::cosmoflow
