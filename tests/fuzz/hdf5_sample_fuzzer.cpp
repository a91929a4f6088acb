// DeepCAM sample files (climate/data 4 x 6 x 16 float32, climate/labels_0 4 x 6), decoded from
// memory as the workload decodes them: no temporary files; and where the decode finds the arrays'
// layout, the same file read in place at it must give the same sample.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "data/hdf5_io.hpp"
#include "fuzz.hpp"

MLPH_FUZZ_ALLOCATIONS_FAIL_PAST_2GIB

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mlph::deepcam;
  const auto file = mlph::fuzz::bytes(data, size);
  Sample whole{std::vector<float>(4 * 6 * 16), std::vector<int32_t>(4 * 6)};
  std::optional<SampleLayout> layout;
  bool decoded = false;
  mlph::fuzz::refusing<DataError>([&] {
    decode_sample(file, "fuzz.h5", 4, 6, 16, {whole.data, whole.labels}, layout);
    decoded = true;
  });
  if (!decoded || !layout) return 0;
  const RangeReader ranges = [&](uint64_t offset, std::span<std::byte> into) {
    if (offset > file.size() || into.size() > file.size() - offset) return false;
    std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
    return true;
  };
  Sample row{std::vector<float>(4 * 6 * 16), std::vector<int32_t>(4 * 6)};
  std::vector<std::byte> scratch;
  // The file decoded whole, so its values pass; read in place they must be the same bits.
  if (!read_sample_in_place(ranges, *layout, "fuzz.h5", 4, 6, 16, {row.data, row.labels}, scratch) ||
      !std::equal(row.data.begin(), row.data.end(), whole.data.begin(),
                  [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }) ||
      row.labels != whole.labels)
    std::abort();
  return 0;
}
