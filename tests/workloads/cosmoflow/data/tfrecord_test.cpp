#include "data/tfrecord.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "data/example.hpp"
#include "data/bytes.hpp"
#include "data/file_io.hpp"
#include "data/gzip.hpp"
#include "test_util.hpp"

namespace mlph::cosmoflow {
namespace {

using test::expect_data_error;
using test::pattern_sample;
using test::TempDir;

// The fixture README's formula: every value of sample i.
void expect_fixture_sample(const Sample& s, int edge, int i) {
  ASSERT_EQ(s.x.size(), volume_elements(edge));
  size_t wrong = 0, n = 0;
  for (int d = 0; d < edge; ++d)
    for (int h = 0; h < edge; ++h)
      for (int w = 0; w < edge; ++w)
        for (int c = 0; c < kChannels; ++c, ++n) wrong += s.x[n] != (d * 7 + h * 3 + w + c * 11 + 5 * i) % 97;
  EXPECT_EQ(wrong, 0u) << "of " << n << " values of sample " << i;
  EXPECT_EQ(s.y[0], 0.25f * static_cast<float>(i) - 0.5f);
  EXPECT_EQ(s.y[1], 0.1f);
  EXPECT_EQ(s.y[2], -0.3f);
  EXPECT_EQ(s.y[3], 0.9f);
}

TEST(CosmoFlowDataTfRecord, ReadsTheGzipFixtureOfTheIndependentWriter) {
  MLPH_REQUIRE_FIXTURES(dir);
  const std::string path = (*dir / "full_gzip_000.tfrecord").string();
  const std::vector<std::byte> file = read_file(path);
  ASSERT_TRUE(is_gzip(file));
  const std::vector<Sample> samples = read_tfrecord_samples(file, path, 128, 1);
  ASSERT_EQ(samples.size(), 1u);
  expect_fixture_sample(samples[0], 128, 0);
}

TEST(CosmoFlowDataTfRecord, ReadsThePlainMultiRecordFixtureOfTheIndependentWriter) {
  MLPH_REQUIRE_FIXTURES(dir);
  const std::string path = (*dir / "mini_plain_010.tfrecord").string();
  const std::vector<std::byte> file = read_file(path);
  ASSERT_FALSE(is_gzip(file));
  const std::vector<Sample> samples = read_tfrecord_samples(file, path, 32, 2);
  ASSERT_EQ(samples.size(), 2u);
  expect_fixture_sample(samples[0], 32, 10);
  expect_fixture_sample(samples[1], 32, 11);
  // Read at the wrong edge, the message says what the file holds.
  expect_data_error([&] { read_tfrecord_samples(file, path, 128, 2); },
                    {"mini_plain_010.tfrecord: record 0: feature 'x' holds 262144 bytes, expected 16777216 for a "
                     "128^3x4 int16 volume"});
}

TEST(CosmoFlowDataTfRecord, RoundTripsPlainAndGzip) {
  const TempDir tmp;
  const std::vector<Sample> samples{pattern_sample(8, 1), pattern_sample(8, 2), pattern_sample(8, 3)};
  for (const bool compressed : {false, true}) {
    const std::string path = tmp / (compressed ? "gzip.tfrecord" : "plain.tfrecord");
    write_tfrecord_file(path, samples, 8, {compressed, 9});
    const std::vector<std::byte> file = read_file(path);
    EXPECT_EQ(is_gzip(file), compressed);
    const std::vector<Sample> back = read_tfrecord_samples(file, path, 8, 3);
    ASSERT_EQ(back.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(back[i].x, samples[i].x);
      EXPECT_EQ(back[i].y, samples[i].y);
    }
    EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  }
}

TEST(CosmoFlowDataTfRecord, ReadsConcatenatedGzipMembers) {
  const std::vector<std::vector<std::byte>> first{encode_sample(pattern_sample(4, 1), 4)},
      second{encode_sample(pattern_sample(4, 2), 4)};
  std::vector<std::byte> file = encode_tfrecords(first, {true, 1});
  const std::vector<std::byte> more = encode_tfrecords(second, {true, 1});
  file.insert(file.end(), more.begin(), more.end());
  const auto samples = read_tfrecord_samples(file, "two_members.tfrecord", 4, 2);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].x, pattern_sample(4, 2).x);
}

TEST(CosmoFlowDataTfRecord, ZeroLengthRecordIsFramedAndRead) {
  const std::vector<std::vector<std::byte>> records{{}, {std::byte{7}}};
  const auto file = encode_tfrecords(records);
  EXPECT_EQ(file.size(), 2 * 16u + 1);
  EXPECT_EQ(read_tfrecords(file, "empty_record.tfrecord"), records);
}

// A plain file of two 8^3 records to break in the tests below: record 0 spans bytes [0, 16 + n0).
struct TwoRecords {
  std::vector<std::byte> file =
      encode_tfrecords(std::vector{encode_sample(pattern_sample(8, 1), 8), encode_sample(pattern_sample(8, 2), 8)});
  size_t first_record_bytes = encode_sample(pattern_sample(8, 1), 8).size();
};

TEST(CosmoFlowDataTfRecord, CorruptDataCrcNamesFileRecordAndBothValues) {
  TwoRecords t;
  t.file[12 + 100] ^= std::byte{0x01};  // one bit inside record 0's data
  expect_data_error([&] { read_tfrecords(t.file, "train/univ_003.tfrecord"); },
                    {"train/univ_003.tfrecord: record 0: data CRC mismatch (stored 0x", ", computed 0x"});
  TwoRecords u;
  u.file[u.file.size() - 1] ^= std::byte{0x80};  // record 1's stored data CRC
  expect_data_error([&] { read_tfrecords(u.file, "a.tfrecord"); }, {"a.tfrecord: record 1: data CRC mismatch"});
}

TEST(CosmoFlowDataTfRecord, CorruptLengthOrItsCrcIsCaughtBeforeTheLengthIsTrusted) {
  TwoRecords t;
  t.file[9] ^= std::byte{0x10};  // the length CRC
  expect_data_error([&] { read_tfrecords(t.file, "x.tfrecord"); }, {"x.tfrecord: record 0: length CRC mismatch"});
  TwoRecords u;
  u.file[5] = std::byte{0x7f};  // a huge length: must not be believed (nor allocated)
  expect_data_error([&] { read_tfrecords(u.file, "x.tfrecord"); }, {"x.tfrecord: record 0: length CRC mismatch"});
}

TEST(CosmoFlowDataTfRecord, TruncatedRecordSaysWhatTheHeaderPromised) {
  TwoRecords t;
  const size_t second = 16 + t.first_record_bytes;
  std::vector<std::byte> cut(t.file.begin(), t.file.begin() + static_cast<std::ptrdiff_t>(second + 12 + 1000));
  const size_t second_length = t.file.size() - second - 16;
  expect_data_error([&] { read_tfrecords(cut, "v/univ_9.tfrecord"); },
                    {"v/univ_9.tfrecord: record 1: truncated record: header says " + std::to_string(second_length) +
                     " bytes (+4 CRC), 1000 remain"});
  cut.resize(second + 5);
  expect_data_error([&] { read_tfrecords(cut, "v/univ_9.tfrecord"); },
                    {"v/univ_9.tfrecord: record 1: truncated record header: 12 bytes needed, 5 remain"});
  cut.assign(t.file.begin(), t.file.begin() + static_cast<std::ptrdiff_t>(second + 12 + second_length));  // no data CRC
  expect_data_error([&] { read_tfrecords(cut, "v/univ_9.tfrecord"); }, {"record 1: truncated record"});
}

TEST(CosmoFlowDataTfRecord, EmptyFileIsAnError) {
  expect_data_error([] { read_tfrecords({}, "train/empty.tfrecord"); }, {"train/empty.tfrecord: empty file"});
  const std::vector<std::byte> empty_gzip = gzip({});
  expect_data_error([&] { read_tfrecords(empty_gzip, "train/empty_gz.tfrecord"); },
                    {"train/empty_gz.tfrecord: holds no TFRecord records"});
}

TEST(CosmoFlowDataTfRecord, GzipGarbageTruncationAndTrailingBytes) {
  std::vector<std::byte> garbage{std::byte{0x1f}, std::byte{0x8b}};
  for (int i = 0; i < 200; ++i) garbage.push_back(static_cast<std::byte>(i * 37 + 11));
  expect_data_error([&] { read_tfrecords(garbage, "g.tfrecord"); }, {"g.tfrecord: gzip stream is corrupt (zlib: "});

  const std::vector<std::byte> good =
      encode_tfrecords(std::vector<std::vector<std::byte>>{encode_sample(pattern_sample(16, 1), 16)}, {true, 6});
  const std::vector<std::byte> half(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  expect_data_error([&] { read_tfrecords(half, "h.tfrecord"); }, {"h.tfrecord: gzip stream is truncated"});

  std::vector<std::byte> trailing = good;
  trailing.insert(trailing.end(), {std::byte{'x'}, std::byte{'y'}, std::byte{'z'}});
  expect_data_error([&] { read_tfrecords(trailing, "t.tfrecord"); },
                    {"t.tfrecord: 3 bytes of trailing data after the gzip stream"});

  std::vector<std::byte> bad_trailer = good;
  bad_trailer[bad_trailer.size() - 6] ^= std::byte{0xff};  // the gzip CRC32 of the contents
  expect_data_error([&] { read_tfrecords(bad_trailer, "c.tfrecord"); }, {"c.tfrecord: gzip stream is corrupt"});
}

TEST(CosmoFlowDataTfRecord, GzipOfCorruptFramingReportsTheFraming) {
  TwoRecords t;
  t.file[12 + 50] ^= std::byte{0x04};
  const std::vector<std::byte> compressed = gzip(t.file);
  expect_data_error([&] { read_tfrecords(compressed, "z.tfrecord"); }, {"z.tfrecord: record 0: data CRC mismatch"});
}

TEST(CosmoFlowDataTfRecord, NonTfRecordBytesAreRejected) {
  std::vector<std::byte> text(64, std::byte{'#'});
  expect_data_error([&] { read_tfrecords(text, "notes.txt"); }, {"notes.txt: record 0: length CRC mismatch"});
}

TEST(CosmoFlowDataTfRecord, VisitorSeesRecordsInOrderWithoutCopies) {
  TwoRecords t;
  std::vector<size_t> sizes;
  for_each_tfrecord(t.file, "v.tfrecord", [&](size_t index, std::span<const std::byte> record) {
    EXPECT_EQ(index, sizes.size());
    EXPECT_GE(record.data(), t.file.data());
    sizes.push_back(record.size());
  });
  EXPECT_EQ(sizes.size(), 2u);
}

long peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

// Issue 16 #5: 3.2 MB of gzip (200 concatenated members of 16 MiB of zeros each) inflated to 3.2 GB
// before any check. The inflated size is capped at what the expected records can take, and the
// reader stops there.
TEST(CosmoFlowDataTfRecord, AGzipBombStopsAtWhatTheSamplesCanTake) {
  const std::vector<std::byte> member = gzip(std::vector<std::byte>(16 << 20), 9);
  std::vector<std::byte> bomb;
  for (int i = 0; i < 200; ++i) bomb.insert(bomb.end(), member.begin(), member.end());
  ASSERT_LT(bomb.size(), 4u << 20);
  const long before = peak_rss_mib();
  const size_t cap = max_tfrecord_bytes(128, 1);
  expect_data_error([&] { read_tfrecord_samples(bomb, "train/bomb.tfrecord", 128, 1); },
                    {"train/bomb.tfrecord: the gzip stream inflates to more than " + std::to_string(cap) +
                     " bytes, the most this data can hold"});
  EXPECT_LT(peak_rss_mib() - before, 256) << "MiB more at the peak: the stream was inflated past the cap";
  EXPECT_LT(cap, (16u << 20) + (128u << 10));  // one 128^3x4 int16 sample and its framing
  expect_data_error([&] { gunzip(bomb, "b", 1000); }, {"b: the gzip stream inflates to more than 1000 bytes"});
  EXPECT_EQ(gunzip(member, "m", 16 << 20).size(), 16u << 20);  // exactly at the cap is fine
}

TEST(CosmoFlowDataTfRecord, APlainFileLargerThanItsRecordsCanBeIsRefused) {
  TwoRecords t;  // two 8^3 records
  EXPECT_EQ(read_tfrecord_samples(t.file, "p.tfrecord", 8, 2).size(), 2u);
  std::vector<std::byte> padded = t.file;
  padded.resize(max_tfrecord_bytes(8, 1) + 1);
  expect_data_error([&] { read_tfrecord_samples(padded, "p.tfrecord", 8, 1); },
                    {"p.tfrecord: " + std::to_string(padded.size()) + " bytes, more than the " +
                     std::to_string(max_tfrecord_bytes(8, 1)) + " that 1 record(s) of a 8^3x4 sample can take"});
}

// Issue 16 #19: a -1 count (log1p gives -inf, the loss NaN later, naming nothing) is refused where
// the record is decoded, naming the file, the record and the voxel.
TEST(CosmoFlowDataTfRecord, NegativeCountsAreRefusedNamingFileRecordAndVoxel) {
  Sample bad = pattern_sample(4, 2);
  bad.x[((2 * 4 + 3) * 4 + 1) * 4 + 0] = -1;  // voxel (2, 3, 1), channel 0
  const auto file = encode_tfrecords(std::vector{encode_sample(pattern_sample(4, 1), 4), encode_sample(bad, 4)});
  expect_data_error([&] { read_tfrecord_samples(file, "train/n.tfrecord", 4, 2); },
                    {"train/n.tfrecord: record 1: voxel (2, 3, 1) channel 0 holds -1: particle counts cannot be negative"});
}

using Records = std::vector<std::vector<std::byte>>;

RangeReader ranges_of(const std::vector<std::byte>& file) {
  return [&file](uint64_t offset, std::span<std::byte> into) {
    if (offset > file.size() || into.size() > file.size() - offset) return false;
    std::copy_n(file.begin() + static_cast<ptrdiff_t>(offset), into.size(), into.begin());
    return true;
  };
}

// A plain one-record file read in place: the sample the whole decode gives, in pieces (64^3x4 is
// 2 MiB, x before y as TensorFlow's sorted map writes them, and y before x); what this path does not
// take is left to the whole decode (false): a corrupt CRC, GZIP, two records, an Example laid out
// otherwise, a second 'x' entry; bad targets and negative counts are named as the whole decode names
// them.
TEST(CosmoFlowDataTfRecord, APlainRecordIsReadInPlaceAsTheWholeDecodeReadsIt) {
  const Sample s = pattern_sample(64, 5);
  const auto x_bytes = to_le_bytes(std::span<const int16_t>(s.x));
  const auto y_first = ExampleBuilder().floats("y", s.y).bytes("x", x_bytes).finish();
  std::vector<int16_t> x(volume_elements(64));
  std::array<float, kTargets> y{};
  std::vector<std::byte> scratch;
  const auto in_place = [&](const std::vector<std::byte>& file) {
    return read_tfrecord_sample_in_place(ranges_of(file), "t/a.tfrecord", 64, {x, y}, scratch);
  };
  for (const auto& record : {encode_sample(s, 64), y_first}) {
    std::fill(x.begin(), x.end(), int16_t{7});
    ASSERT_TRUE(in_place(encode_tfrecords(Records{record})));
    EXPECT_EQ(x, s.x);
    EXPECT_EQ(y, s.y);
  }
  const auto good = encode_tfrecords(Records{encode_sample(s, 64)});
  std::vector<std::byte> corrupt = good;
  corrupt[corrupt.size() / 2] ^= std::byte{1};
  const auto two_x = encode_tfrecords(Records{ExampleBuilder().bytes("x", x_bytes).floats("y", s.y).bytes("x", x_bytes).finish()});
  for (const auto& other : {corrupt, encode_tfrecords(Records{encode_sample(s, 64)}, {true}),
                            encode_tfrecords(Records{encode_sample(s, 64), encode_sample(s, 64)}), two_x,
                            std::vector<std::byte>(good.begin(), good.end() - 1)})
    EXPECT_FALSE(in_place(other));

  const std::array<float, kTargets> nan_y{0, NAN, 0, 0};
  const auto bad_y = encode_tfrecords(Records{ExampleBuilder().bytes("x", x_bytes).floats("y", nan_y).finish()});
  expect_data_error([&] { in_place(bad_y); }, {"t/a.tfrecord: record 0: feature 'y' value 1 is nan"});
  Sample negative = s;
  negative.x[volume_elements(64) - 4] = -2;  // the last voxel's channel 0: in the second piece
  expect_data_error([&] { in_place(encode_tfrecords(Records{encode_sample(negative, 64)})); },
                    {"t/a.tfrecord: record 0: voxel (63, 63, 63) channel 0 holds -2: particle counts cannot be negative"});
  Sample lowest = s;  // -32768: of the high byte only the top bit set, inside a piece's folded blocks
  lowest.x[((21 * 64 + 7) * 64 + 5) * 4 + 2] = std::numeric_limits<int16_t>::min();
  expect_data_error([&] { in_place(encode_tfrecords(Records{encode_sample(lowest, 64)})); },
                    {"t/a.tfrecord: record 0: voxel (21, 7, 5) channel 2 holds -32768: particle counts cannot be negative"});

  const Sample small = pattern_sample(4, 1);  // a whole record within the first bytes read
  std::vector<int16_t> small_x(volume_elements(4));
  const auto small_file = encode_tfrecords(Records{encode_sample(small, 4)});
  ASSERT_TRUE(read_tfrecord_sample_in_place(ranges_of(small_file), "s", 4, {small_x, y}, scratch));
  EXPECT_EQ(small_x, small.x);
}

// The in-place read starts each piece a few bytes early so that file and row agree modulo 64, and
// moves it back: at every alignment of the row (x's value at an even and at an odd file offset),
// the counts must be the sample's, and a flipped bit anywhere in x (in the first piece, in the
// bytes the tail read brings, in between) must fail the CRC.
TEST(CosmoFlowDataTfRecord, InPlaceReadsGiveTheSampleAtEveryRowAlignment) {
  const Sample s = pattern_sample(64, 9);
  const auto x_bytes = to_le_bytes(std::span<const int16_t>(s.x));
  const auto x_first = encode_tfrecords(Records{encode_sample(s, 64)});
  const auto y_first = encode_tfrecords(Records{ExampleBuilder().floats("y", s.y).bytes("tag", as_bytes("odd")).bytes("x", x_bytes).finish()});
  std::vector<int16_t> memory(volume_elements(64) + 64);
  std::array<float, kTargets> y{};
  std::vector<std::byte> scratch;
  for (const auto* file : {&x_first, &y_first}) {
    for (size_t shift = 0; shift < 32; ++shift) {
      const std::span<int16_t> x = std::span(memory).subspan(shift, volume_elements(64));
      std::fill(memory.begin(), memory.end(), int16_t{7});
      ASSERT_TRUE(read_tfrecord_sample_in_place(ranges_of(*file), "t", 64, {x, y}, scratch)) << shift;
      ASSERT_TRUE(std::equal(x.begin(), x.end(), s.x.begin())) << shift;
      EXPECT_EQ(memory[shift + volume_elements(64)], 7) << shift;  // nothing written past the row
      EXPECT_TRUE(shift == 0 || memory[shift - 1] == 7) << shift;  // nor before it
      EXPECT_EQ(y, s.y);
    }
    const auto where = std::search(file->begin(), file->end(), x_bytes.begin(), x_bytes.begin() + 64);
    const auto x_at = static_cast<size_t>(where - file->begin());
    for (const size_t flip : {size_t{0}, size_t{1}, size_t{100}, x_bytes.size() / 2, x_bytes.size() - 63, x_bytes.size() - 1}) {
      std::vector<std::byte> corrupt = *file;
      corrupt[x_at + flip] ^= std::byte{0x10};
      for (size_t shift = 0; shift < 32; ++shift)
        EXPECT_FALSE(read_tfrecord_sample_in_place(ranges_of(corrupt), "t", 64,
                                                   {std::span(memory).subspan(shift, volume_elements(64)), y}, scratch))
            << flip << " " << shift;
    }
  }
}

}  // namespace
}  // namespace mlph::cosmoflow
