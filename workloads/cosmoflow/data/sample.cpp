#include "sample.hpp"

#include <algorithm>

#include "bytes.hpp"

namespace mlph::cosmoflow {

size_t volume_elements(int edge) {
  if (edge < 1 || edge > kMaxEdge)
    throw std::invalid_argument("CosmoFlow sample edge must be in 1.." + std::to_string(kMaxEdge) + ", got " +
                                std::to_string(edge));
  const auto e = static_cast<size_t>(edge);
  return e * e * e * kChannels;
}

std::string volume_name(int edge) { return std::to_string(edge) + "^3x" + std::to_string(kChannels); }

std::vector<int16_t> decode_counts(std::span<const std::byte> bytes, int edge, const std::string& where) {
  std::vector<int16_t> x(volume_elements(edge));
  decode_counts(bytes, edge, where, x);
  return x;
}

void decode_counts(std::span<const std::byte> bytes, int edge, const std::string& where, std::span<int16_t> out) {
  if (out.size() != volume_elements(edge) || bytes.size() != out.size_bytes())
    throw std::invalid_argument("decode_counts: " + std::to_string(bytes.size()) + " bytes into " +
                                std::to_string(out.size()) + " counts of a " + volume_name(edge) + " volume");
  from_le_bytes(bytes, out.data());
  check_counts(out, {0, 0, 0}, {edge, edge, edge}, where);
}

void check_counts(std::span<const int16_t> x, std::array<int64_t, 3> at, std::array<int64_t, 3> size,
                  const std::string& where) {
  int16_t any_sign = 0;  // OR of every value: negative when one is, in a loop the compiler vectorizes
  for (const int16_t v : x) any_sign |= v;
  if (any_sign >= 0) return;
  const auto i = static_cast<int64_t>(std::find_if(x.begin(), x.end(), [](int16_t v) { return v < 0; }) - x.begin());
  const int64_t voxel = i / kChannels;
  const int64_t d = at[0] + voxel / (size[1] * size[2]), h = at[1] + voxel / size[2] % size[1], w = at[2] + voxel % size[2];
  throw DataError(where, "voxel (" + std::to_string(d) + ", " + std::to_string(h) + ", " + std::to_string(w) +
                             ") channel " + std::to_string(i % kChannels) + " holds " + std::to_string(x[static_cast<size_t>(i)]) +
                             ": particle counts cannot be negative (log(1 + x) needs x > -1)");
}

}  // namespace mlph::cosmoflow
