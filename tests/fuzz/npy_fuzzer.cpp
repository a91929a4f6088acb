// .npy files: the header parser on anything, then the input as a CosmoFlow data file (4^3x4 int16)
// beside a valid label file, and as a label file beside a valid data file.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "data/bytes.hpp"
#include "data/npy.hpp"
#include "fuzz.hpp"

using namespace mlph::cosmoflow;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::byte> good_label = [] {
    const float y[kTargets] = {0.5f, -0.5f, 0.25f, 0.0f};
    const uint64_t shape[] = {kTargets};
    return encode_npy("<f4", shape, to_le_bytes(std::span<const float>(y)));
  }();
  static const std::vector<std::byte> good_data = [] {
    const uint64_t shape[] = {4, 4, 4, kChannels};
    return encode_npy("<i2", shape, std::vector<std::byte>(volume_bytes(4)));
  }();
  const auto file = mlph::fuzz::bytes(data, size);
  mlph::fuzz::refusing<DataError>([&] { parse_npy(file, "fuzz.npy"); });
  mlph::fuzz::refusing<DataError>([&] { read_npy_sample(file, good_label, "fuzz_data.npy", 4); });
  mlph::fuzz::refusing<DataError>([&] { read_npy_sample(good_data, file, "fuzz_data.npy", 4); });
  // The batch's fast path, read by ranges: what it takes, the whole decode takes with the same counts.
  const RangeReader ranges = [&](uint64_t offset, std::span<std::byte> into) {
    if (offset > file.size() || into.size() > file.size() - offset) return false;
    std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
    return true;
  };
  std::vector<int16_t> x(volume_elements(4));
  bool in_place = false;
  mlph::fuzz::refusing<DataError>([&] { in_place = read_npy_volume_in_place(ranges, "fuzz_data.npy", 4, x); });
  if (in_place && read_npy_sample(file, good_label, "fuzz_data.npy", 4).x != x) std::abort();
  return 0;
}
