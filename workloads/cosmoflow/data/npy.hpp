// NumPy .npy files (format 1.0, 2.0 and 3.0) for NVIDIA's CosmoFlow layout: per sample
// <name>_data.npy int16 (D, H, W, 4) and <name>_label.npy float32 (4,).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sample.hpp"

namespace mlph::cosmoflow {

struct NpyArray {
  std::string descr;  // dtype, e.g. "<i2"
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  // a view into the file the array was parsed from
};

// The longest header parse_npy accepts (numpy writes about 128 bytes; its reader refuses more than
// 10,000 by default), and the most a .npy file of data_bytes of data can then take.
inline constexpr size_t kMaxNpyHeaderBytes = 64 << 10;
inline constexpr size_t max_npy_bytes(size_t data_bytes) { return 12 + kMaxNpyHeaderBytes + data_bytes; }

// Parses the header and checks that the data holds exactly prod(shape) items of the dtype's size.
// Throws DataError naming `name`.
NpyArray parse_npy(std::span<const std::byte> file, const std::string& name);

// For reading part of a file: where its data starts, from the file's first 12 bytes or more (a
// header of a file numpy wrote ends on a multiple of 64 bytes), and the header alone (`data` empty)
// from the file's first npy_data_offset bytes.
uint64_t npy_data_offset(std::span<const std::byte> head, const std::string& name);
NpyArray parse_npy_header(std::span<const std::byte> head, const std::string& name);

// A CosmoFlow volume: '<i2' (edge, edge, edge, 4) in C order; throws DataError naming `name`.
void check_npy_volume(const NpyArray& x, const std::string& name, int edge);

// The 4 targets of a _label.npy file, '<f4' and finite; throws DataError naming `label_name`.
std::array<float, kTargets> read_npy_label(std::span<const std::byte> label_npy, const std::string& label_name);

// A .npy file (version 1.0, or 2.0 when the header needs it) holding data, C order.
std::vector<std::byte> encode_npy(std::string_view descr, std::span<const uint64_t> shape,
                                  std::span<const std::byte> data);

// The sample of a _data.npy / _label.npy pair: '<i2' (edge, edge, edge, 4) and '<f4' with 4 values.
Sample read_npy_sample(std::span<const std::byte> data_npy, std::span<const std::byte> label_npy,
                       const std::string& name, int edge);
void read_npy_sample(std::span<const std::byte> data_npy, std::span<const std::byte> label_npy,
                     const std::string& name, int edge, const SampleView& out);

// A _data.npy file's volume read in place: its header alone through `read`, then its counts through
// `read` straight into `x` (one copy from the page cache into a batch's row), in pieces, each checked
// for a negative count while it is still in the cache. True when `x` holds what read_npy_sample
// would decode. False when the file is not what that fast path takes (a header it would refuse, a
// size other than the header says): the caller decodes the whole file, which refuses it with the
// message it always gave; `x` is then unspecified. A negative count throws DataError as
// read_npy_sample does.
bool read_npy_volume_in_place(const RangeReader& read, const std::string& name, int edge, std::span<int16_t> x);

// The file name of the label file that belongs to a data file: x_data.npy -> x_label.npy.
std::string npy_label_path(const std::string& data_path);

// Writes the pair <stem>_data.npy and <stem>_label.npy.
void write_npy_sample(const std::string& stem, const Sample& sample, int edge);

}  // namespace mlph::cosmoflow
