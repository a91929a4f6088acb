// The DeepCAM HDF5 files: data-*.h5 samples (climate/data, climate/labels_0) and stats.h5
// (climate/minval, climate/maxval, ...). Reading decodes whole files already in memory (they come
// through the storage plug-in) with HDF5's file-image API, without copying them again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sample.hpp"

namespace mlph::deepcam {

// The most a sample file of height x width x channels can take: the float32 data, labels of up to
// 8 bytes, twice over for HDF5's own structures (chunk indexes, attributes), plus 16 MiB.
inline constexpr size_t max_sample_file_bytes(int height, int width, int channels) {
  const auto pixels = static_cast<size_t>(height) * static_cast<size_t>(width);
  return 2 * (pixels * static_cast<size_t>(channels) * 4 + pixels * 8) + (16 << 20);
}
// The most stats.h5 can take: a few arrays of one value per channel, and room.
inline constexpr size_t kMaxStatsFileBytes = 16 << 20;

// Decodes a sample file of `height` x `width` x `channels`. `name` is the file, for messages.
// Throws DataError for a file HDF5 cannot open (truncated, not HDF5), a missing dataset, a wrong
// shape or dtype (data must be float32, labels any integer or float type holding 0, 1 or 2), data
// that is not finite, and anything that would reach outside the file (external links, external
// storage, virtual datasets, filter plug-ins) or inflate past the sample (chunks larger than the
// shape, compression): checked before reading.
Sample decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels);
// The same into `out` (H x W x C values and H x W labels).
void decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels,
                   const SampleView& out);

// Where a sample file keeps its two arrays, when both lie in it contiguously, unfiltered and in a
// byte order read as is: climate/data float32 little-endian, climate/labels_0 one of the label types
// below. Found while decode_sample reads the file whole (every check made), so that later reads of
// the same file take the bytes at these offsets straight into a batch's row (one copy), their values
// checked as decode_sample checks them (read_sample_in_place).
enum class LabelType { i8, u8, i16le, i32le, i64le, f32le, f64le };
struct SampleLayout {
  uint64_t file_bytes = 0, data_offset = 0, labels_offset = 0;
  LabelType labels_type = LabelType::i32le;
  size_t label_bytes() const;  // one label's
};
// decode_sample, with the layout when the file has one (else `layout` is left empty).
void decode_sample(std::span<const std::byte> file, const std::string& name, int height, int width, int channels,
                   const SampleView& out, std::optional<SampleLayout>& layout);

// Reads bytes of a file at an offset into `into`; false when the file ends before the range does.
using RangeReader = std::function<bool(uint64_t offset, std::span<std::byte> into)>;
// A sample of a file whose layout was found: the data through `read` straight into out.data (in
// pieces, each checked while still in the cache), the labels into `scratch` and converted into
// out.labels; data not finite and labels not 0, 1 or 2 are refused as decode_sample refuses them. False when the file's size is no longer the layout's (the
// caller decodes it whole again).
bool read_sample_in_place(const RangeReader& read, const SampleLayout& layout, const std::string& name, int height,
                          int width, int channels, const SampleView& out, std::vector<std::byte>& scratch);

// Decodes stats.h5: climate/minval and climate/maxval of `channels` values (float32 or float64).
// Throws DataError when a channel has max <= min or a value is not finite.
Stats decode_stats(std::span<const std::byte> file, const std::string& name, int channels);

// Writes HDF5 files (the generator and tests): datasets under groups created as needed; the file
// appears atomically (written to path.partial, then renamed). Throws DataError naming the path.
class Hdf5Writer {
 public:
  explicit Hdf5Writer(std::string path);
  ~Hdf5Writer();
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  void write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const float> values);
  void write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const double> values);
  void write(const std::string& dataset, const std::vector<size_t>& shape, std::span<const int32_t> values);
  // Closes the file and moves it into place.
  void commit();

 private:
  void write_raw(const std::string& dataset, const std::vector<size_t>& shape, int64_t file_type, int64_t memory_type,
                 const void* values, size_t count);
  std::string path_;
  int64_t file_ = -1;  // hid_t, kept out of this header
};

}  // namespace mlph::deepcam
