// What every CosmoFlow data format decodes to, and the one error type the data layer throws.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlph::cosmoflow {

inline constexpr int kChannels = 4;  // particle counts at 4 redshifts, channels last
inline constexpr int kTargets = 4;   // the regressed cosmological parameters, each in [-1, 1]
inline constexpr int kMaxEdge = 1024;

// One universe: x holds edge^3 x 4 int16 counts in C order (D, H, W, C); y the 4 targets.
struct Sample {
  std::vector<int16_t> x;
  std::array<float, kTargets> y{};
};

// Where a sample is decoded to when the caller owns the memory (a batch's row): no copy between.
struct SampleView {
  std::span<int16_t> x;  // edge^3 x 4
  std::span<float, kTargets> y;
};

// Reads bytes of a file at an offset into `into`; false when the file ends before the range does.
// Other failures throw. (A storage plug-in's read_range, or a span in a test.)
using RangeReader = std::function<bool(uint64_t offset, std::span<std::byte> into)>;
// The in-place readers read a volume in pieces of this size and check each piece while it is still in
// the core's cache: 256 KiB stays in a 512 KiB or 1 MiB L2 with room to spare (1 MiB pieces did not,
// and the checks then read every byte back from L3 or memory).
inline constexpr size_t kInCachePieceBytes = size_t{256} << 10;

// Bad or unreadable data. what() is one line, "<where>: <problem>", where names the file (and the
// record, when there are several), so a user can find the offending file from the message alone.
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& where, const std::string& problem) : std::runtime_error(where + ": " + problem) {}
};

// Voxels x channels of one sample; throws std::invalid_argument unless 1 <= edge <= kMaxEdge.
size_t volume_elements(int edge);

// The readable form of a shape in messages: "32^3x4".
std::string volume_name(int edge);

// The bytes one sample's int16 volume takes.
inline size_t volume_bytes(int edge) { return volume_elements(edge) * sizeof(int16_t); }

// The counts of a volume stored as edge^3 x 4 int16 little-endian (bytes holds exactly that), checked
// on the way: particle counts are never negative (the model's log(1 + x) of -1 is -inf), and a
// negative one is refused naming `where` (the file, and the record) and the voxel.
std::vector<int16_t> decode_counts(std::span<const std::byte> bytes, int edge, const std::string& where);
// The same into `out` (volume_elements(edge) values).
void decode_counts(std::span<const std::byte> bytes, int edge, const std::string& where, std::span<int16_t> out);

// The same check of counts already decoded: x holds the box of a volume that starts at voxel `at`
// and spans `size` voxels along D, H, W (4 channels each); a negative count is refused naming
// `where` and the voxel's place in the whole volume.
void check_counts(std::span<const int16_t> x, std::array<int64_t, 3> at, std::array<int64_t, 3> size,
                  const std::string& where);

}  // namespace mlph::cosmoflow
