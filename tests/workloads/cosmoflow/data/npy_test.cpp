#include "data/npy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "data/bytes.hpp"
#include "data/file_io.hpp"
#include "test_util.hpp"

namespace mlph::cosmoflow {
namespace {

using test::expect_data_error;
using test::pattern_sample;
using test::TempDir;

std::string header_text(const std::vector<std::byte>& file) {
  const size_t length = std::to_integer<size_t>(file[8]) | std::to_integer<size_t>(file[9]) << 8;
  return std::string(reinterpret_cast<const char*>(file.data() + 10), length);
}

std::vector<std::byte> label_npy(std::span<const float> y) {
  const uint64_t shape[] = {y.size()};
  return encode_npy("<f4", shape, to_le_bytes(y));
}

std::vector<std::byte> data_npy(const Sample& s, std::vector<uint64_t> shape, std::string_view descr = "<i2") {
  return encode_npy(descr, shape, to_le_bytes(std::span<const int16_t>(s.x)));
}

TEST(CosmoFlowDataNpy, WritesTheHeaderNumpyWrites) {
  const Sample s = pattern_sample(4, 1);
  const auto file = data_npy(s, {4, 4, 4, 4});
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::string header = header_text(file);
  EXPECT_EQ(header.substr(0, header.find(" }") + 2),
            "{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4, 4, 4), }");
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ((10 + header.size()) % 64, 0u);  // data 64-byte aligned, as numpy >= 1.14 writes
  EXPECT_EQ(file.size(), 10 + header.size() + s.x.size() * 2);
  const float y[4] = {1, 2, 3, 4};
  EXPECT_NE(header_text(label_npy(y)).find("'shape': (4,), }"), std::string::npos);
}

TEST(CosmoFlowDataNpy, RoundTripsASampleThroughFiles) {
  const TempDir tmp;
  const Sample s = pattern_sample(8, 5);
  write_npy_sample(tmp / "univ_1_000007_000", s, 8);
  const std::string data_path = tmp / "univ_1_000007_000_data.npy";
  EXPECT_EQ(npy_label_path(data_path), tmp / "univ_1_000007_000_label.npy");
  const Sample back = read_npy_sample(read_file(data_path), read_file(npy_label_path(data_path)), data_path, 8);
  EXPECT_EQ(back.x, s.x);
  EXPECT_EQ(back.y, s.y);
}

TEST(CosmoFlowDataNpy, ParsesHeadersOfOtherWriters) {
  // Version 2.0, double quotes, no trailing comma, Python 2 longs, odd spacing.
  const std::string header = "{\"descr\":'<f4' ,  'shape':(4L,),'fortran_order':False}      \n";
  std::vector<std::byte> file;
  for (const char c : std::string("\x93NUMPY\x02\x00", 8)) file.push_back(static_cast<std::byte>(c));
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<std::byte>(header.size() >> (8 * i)));
  for (const char c : header) file.push_back(static_cast<std::byte>(c));
  const float y[4] = {0.5f, -0.5f, 0.25f, 0};
  const auto raw = to_le_bytes(std::span<const float>(y));
  file.insert(file.end(), raw.begin(), raw.end());
  const NpyArray a = parse_npy(file, "v2.npy");
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, std::vector<uint64_t>{4});
  EXPECT_EQ(a.data.size(), 16u);
}

// Replaces the first occurrence of from by to (same length) in a file's header.
std::vector<std::byte> patched(std::vector<std::byte> file, std::string_view from, std::string_view to) {
  const std::string text(reinterpret_cast<const char*>(file.data()), std::min<size_t>(file.size(), 128));
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  for (size_t i = 0; i < to.size(); ++i) file[at + i] = static_cast<std::byte>(to[i]);
  return file;
}

TEST(CosmoFlowDataNpy, BadDataFilesAreNamed) {
  const Sample s = pattern_sample(4, 1);
  const float y[4] = {0, 0, 0, 0};
  const auto label = label_npy(y);
  const auto good = data_npy(s, {4, 4, 4, 4});
  const std::string name = "train/u_data.npy";
  auto read = [&](const std::vector<std::byte>& data, int edge) { return read_npy_sample(data, label, name, edge); };
  EXPECT_NO_THROW(read(good, 4));
  expect_data_error(
      [&] {
        read(data_npy(s, {4, 4, 4, 4}, "<u2"), 4);
      },
      {"train/u_data.npy: dtype \"<u2\", expected '<i2' (little-endian int16)"});
  expect_data_error([&] { read(good, 8); },
                    {"train/u_data.npy: shape (4, 4, 4, 4), expected (8, 8, 8, 4) (D, H, W, channels last)"});
  const Sample small = pattern_sample(2, 1);
  expect_data_error(
      [&] {
        read(data_npy(small, {4, 2, 2, 2}), 2);
      },
      {"train/u_data.npy: shape (4, 2, 2, 2), expected (2, 2, 2, 4)"});
  const std::vector<std::byte> cut(good.begin(), good.end() - 2);
  expect_data_error([&] { read(cut, 4); },
                    {"train/u_data.npy: holds 510 data bytes, but shape (4, 4, 4, 4) of \"<i2\" needs 512"});
  expect_data_error([&] { read(std::vector<std::byte>(good.begin(), good.begin() + 20), 4); },
                    {"train/u_data.npy: truncated .npy header"});
  expect_data_error([&] { read(patched(good, "NUMPY", "NUMPX"), 4); }, {"train/u_data.npy: not a .npy file"});
  expect_data_error([&] { read(patched(good, "False", "True "), 4); }, {"train/u_data.npy: fortran_order is True"});
  expect_data_error([&] { read(patched(good, "'shape'", "'shapx'"), 4); },
                    {"train/u_data.npy: malformed .npy header: unexpected key \"shapx\""});
  expect_data_error([&] { read(patched(good, "'<i2'", "'<i2 "), 4); }, {"train/u_data.npy: malformed .npy header"});
  expect_data_error([&] { read({}, 4); }, {"train/u_data.npy: not a .npy file"});
}

TEST(CosmoFlowDataNpy, BadLabelFilesAreNamedByTheirOwnName) {
  const Sample s = pattern_sample(2, 1);
  const auto data = data_npy(s, {2, 2, 2, 4});
  const float three[3] = {0, 0, 0};
  expect_data_error([&] { read_npy_sample(data, label_npy(three), "v/a_data.npy", 2); },
                    {"v/a_label.npy: shape (3,) holds 3 values, expected 4"});
  const uint64_t shape[] = {4};
  const auto doubles = encode_npy("<f8", shape, std::vector<std::byte>(32));
  expect_data_error([&] { read_npy_sample(data, doubles, "v/a_data.npy", 2); },
                    {"v/a_label.npy: dtype \"<f8\", expected '<f4' (little-endian float32)"});
}

TEST(CosmoFlowDataNpy, HugeShapesDoNotOverflow) {
  const uint64_t shape[] = {1ull << 40, 1ull << 40, 1ull << 40};
  const auto file = encode_npy("<i2", shape, std::vector<std::byte>(8));
  expect_data_error([&] { parse_npy(file, "huge.npy"); },
                    {"huge.npy: holds 8 data bytes, but shape (1099511627776, 1099511627776, 1099511627776) of \"<i2\" "
                     "needs more than 2^64"});
}

// Issue 16 #20: bytes of the file reach the message quoted, never raw (a terminal escape in a
// header would otherwise act on the user's terminal).
TEST(CosmoFlowDataNpy, HeaderBytesAreQuotedInMessages) {
  const Sample s = pattern_sample(2, 1);
  const float y[4] = {0, 0, 0, 0};
  const auto good = data_npy(s, {2, 2, 2, 4});
  const auto escaped = patched(good, "'descr'", "'\x1b[2J\n'");
  expect_data_error([&] { read_npy_sample(escaped, label_npy(y), "e_data.npy", 2); },
                    {"e_data.npy: malformed .npy header: unexpected key \"\\x1b[2J\\n\""});
  const auto bad_dtype = patched(good, "'<i2'", "'\x07\x9b!'");
  try {
    read_npy_sample(bad_dtype, label_npy(y), "d_data.npy", 2);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("\"\\x07\\x9b!\""), std::string::npos) << message;
    for (const char c : message) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "raw byte " << int(static_cast<unsigned char>(c));
  }
}

// Issue 16 #19: a negative count (log1p(-1) = -inf) is refused where it is decoded, naming the
// file and the voxel.
TEST(CosmoFlowDataNpy, NegativeCountsAreRefusedNamingFileAndVoxel) {
  Sample s = pattern_sample(2, 1);
  s.x[(1 * 4 + 0 * 2 + 1) * 4 + 3] = -1;  // voxel (1, 0, 1), channel 3
  const float y[4] = {0, 0, 0, 0};
  expect_data_error([&] { read_npy_sample(data_npy(s, {2, 2, 2, 4}), label_npy(y), "t/n_data.npy", 2); },
                    {"t/n_data.npy: voxel (1, 0, 1) channel 3 holds -1: particle counts cannot be negative"});
}

// A file's bytes read by ranges, as a storage plug-in's read_range reads them; counts the reads.
struct Ranges {
  const std::vector<std::byte>& file;
  int reads = 0;
  RangeReader reader() {
    return [this](uint64_t offset, std::span<std::byte> into) {
      ++reads;
      if (offset > file.size() || into.size() > file.size() - offset) return false;
      std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
      return true;
    };
  }
};

// In place, a good volume lands in the row as the whole decode gives it (in several pieces: 64^3x4
// is 2 MiB); a file the fast path does not take (short, long, a header it would refuse) returns
// false for the whole decode to name; a negative count is named as the whole decode names it, also
// in a later piece than the first.
TEST(CosmoFlowDataNpy, InPlaceReadsWhatTheWholeDecodeReads) {
  const Sample s = pattern_sample(64, 3);
  const auto good = data_npy(s, {64, 64, 64, 4});
  std::vector<int16_t> x(volume_elements(64), 7);
  Ranges ranges{good};
  ASSERT_TRUE(read_npy_volume_in_place(ranges.reader(), "t/a_data.npy", 64, x));
  EXPECT_EQ(x, s.x);
  const size_t volume = volume_elements(64) * sizeof(int16_t);  // 2 MiB
  EXPECT_EQ(ranges.reads, 2 + (volume + kInCachePieceBytes - 1) / kInCachePieceBytes);  // header, probe, the pieces

  const std::vector<std::byte> shorter(good.begin(), good.end() - 2);
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  for (const auto& bad : {shorter, longer, patched(good, "False", "True "), std::vector<std::byte>(good.begin(), good.begin() + 20)}) {
    Ranges r{bad};
    EXPECT_FALSE(read_npy_volume_in_place(r.reader(), "t/a_data.npy", 64, x));
  }
  Sample negative = s;
  negative.x[volume_elements(64) - 1] = -3;  // the last voxel's channel 3: in the second piece
  const auto with_negative = data_npy(negative, {64, 64, 64, 4});
  Ranges r{with_negative};
  expect_data_error([&] { read_npy_volume_in_place(r.reader(), "t/a_data.npy", 64, x); },
                    {"t/a_data.npy: voxel (63, 63, 63) channel 3 holds -3: particle counts cannot be negative"});
}

TEST(CosmoFlowDataNpy, AnAbsurdHeaderLengthIsRefused) {
  std::vector<std::byte> file;
  for (const char c : std::string("\x93NUMPY\x02\x00\x00\x00\x10\x00", 12)) file.push_back(static_cast<std::byte>(c));
  file.resize(file.size() + (1 << 20) + 100, std::byte{' '});
  expect_data_error([&] { parse_npy(file, "h.npy"); },
                    {"h.npy: .npy header of 1048576 bytes, more than the 65536 this reader accepts"});
}

}  // namespace
}  // namespace mlph::cosmoflow
