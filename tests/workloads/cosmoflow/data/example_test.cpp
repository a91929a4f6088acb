#include "data/example.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "data/bytes.hpp"
#include "test_util.hpp"

namespace mlph::cosmoflow {
namespace {

using test::expect_data_error;
using test::pattern_sample;

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (const int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

std::vector<std::byte> x_bytes(int edge) {
  const Sample s = pattern_sample(edge, 1);
  return to_le_bytes(std::span<const int16_t>(s.x));
}

const float kY[4] = {0.5f, -0.25f, 1.0f, -1.0f};

TEST(CosmoFlowDataExample, EncodesTheWireFormatTensorFlowWrites) {
  // Features { feature { key: "k" value { int64_list { value: [1, 300] } } } }, bytes by hand.
  const auto encoded = ExampleBuilder().int64s("k", std::vector<int64_t>{1, 300}).finish();
  EXPECT_EQ(encoded,
            bytes_of({0x0a, 0x0e, 0x0a, 0x0c, 0x0a, 0x01, 'k', 0x12, 0x07, 0x1a, 0x05, 0x0a, 0x03, 0x01, 0xac, 0x02}));
}

TEST(CosmoFlowDataExample, DecodesAllThreeListKinds) {
  const std::vector<int64_t> ints{-1, 0, 1LL << 40};
  const auto record = ExampleBuilder().bytes("b", bytes_of({1, 2, 3})).floats("f", kY).int64s("i", ints).finish();
  const Features f = decode_example(record, "r");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.at("b").kind, FeatureKind::bytes_list);
  ASSERT_EQ(f.at("b").bytes.size(), 1u);
  EXPECT_EQ(std::vector<std::byte>(f.at("b").bytes[0].begin(), f.at("b").bytes[0].end()), bytes_of({1, 2, 3}));
  EXPECT_EQ(f.at("f").floats, std::vector<float>(kY, kY + 4));
  EXPECT_EQ(f.at("i").int64s, ints);
}

TEST(CosmoFlowDataExample, ReadsUnpackedFloatsAndSkipsUnknownFields) {
  // Feature { float_list { value: 0.5 value: -0.25 ... } } unpacked (wire type 5), plus unknown fields.
  std::vector<std::byte> float_list;
  for (const float v : kY) {
    float_list.push_back(std::byte{0x0d});  // field 1, fixed32
    const auto raw = to_le_bytes(std::span<const float>(&v, 1));
    float_list.insert(float_list.end(), raw.begin(), raw.end());
  }
  const auto unknown = bytes_of({0x28, 0x96, 0x01, 0x31, 1, 2, 3, 4, 5, 6, 7, 8});  // field 5 varint, field 6 fixed64
  float_list.insert(float_list.end(), unknown.begin(), unknown.end());
  std::vector<std::byte> feature{std::byte{0x12}, static_cast<std::byte>(float_list.size())};
  feature.insert(feature.end(), float_list.begin(), float_list.end());
  feature.insert(feature.end(), unknown.begin(), unknown.end());

  const auto x = x_bytes(4);
  const auto record = ExampleBuilder().bytes("x", x).raw_feature("y", feature).finish();
  const Sample s = decode_sample(record, 4, "unpacked.tfrecord: record 0");
  EXPECT_EQ(s.y, (std::array<float, 4>{kY[0], kY[1], kY[2], kY[3]}));
  EXPECT_EQ(s.x, pattern_sample(4, 1).x);
}

TEST(CosmoFlowDataExample, SampleRoundTrip) {
  const Sample in = pattern_sample(8, 2);
  const Sample out = decode_sample(encode_sample(in, 8), 8, "r");
  EXPECT_EQ(out.x, in.x);
  EXPECT_EQ(out.y, in.y);
}

TEST(CosmoFlowDataExample, MissingFeatureNamesWhatIsThere) {
  const auto record = ExampleBuilder().floats("y", kY).finish();
  expect_data_error([&] { decode_sample(record, 4, "train/u.tfrecord: record 0"); },
                    {"train/u.tfrecord: record 0: no feature 'x' (features present: \"y\")"});
  const auto no_y = ExampleBuilder().bytes("x", x_bytes(4)).finish();
  expect_data_error([&] { decode_sample(no_y, 4, "f"); }, {"f: no feature 'y' (features present: \"x\")"});
  expect_data_error([&] { decode_sample({}, 4, "f"); }, {"f: no feature 'x' (the Example has no features)"});
}

TEST(CosmoFlowDataExample, WrongSizeKindOrCountIsNamed) {
  const auto small = ExampleBuilder().bytes("x", std::vector<std::byte>(1000)).floats("y", kY).finish();
  expect_data_error([&] { decode_sample(small, 32, "train/univ_003.tfrecord: record 0"); },
                    {"train/univ_003.tfrecord: record 0: feature 'x' holds 1000 bytes, expected 262144 for a 32^3x4 "
                     "int16 volume"});
  const auto as_floats = ExampleBuilder().floats("x", kY).floats("y", kY).finish();
  expect_data_error([&] { decode_sample(as_floats, 4, "f"); },
                    {"f: feature 'x' is a float_list, expected a bytes_list"});
  const auto x = x_bytes(4);
  const auto three = ExampleBuilder().bytes("x", x).floats("y", std::span(kY, 3)).finish();
  expect_data_error([&] { decode_sample(three, 4, "f"); }, {"f: feature 'y' holds 3 floats, expected 4"});
  const auto two_strings = ExampleBuilder().bytes("x", x).bytes("x", x).floats("y", kY).finish();  // last entry wins
  EXPECT_NO_THROW(decode_sample(two_strings, 4, "f"));
  const float nan_y[4] = {0, std::numeric_limits<float>::quiet_NaN(), 0, 0};
  const auto nan = ExampleBuilder().bytes("x", x).floats("y", nan_y).finish();
  expect_data_error([&] { decode_sample(nan, 4, "f"); }, {"f: feature 'y' value 1 is nan"});
}

TEST(CosmoFlowDataExample, TwoByteStringsInOneListAreRejected) {
  // BytesList { value: "a" value: "b" }
  const auto feature = bytes_of({0x0a, 0x06, 0x0a, 0x01, 'a', 0x0a, 0x01, 'b'});
  const auto record = ExampleBuilder().raw_feature("x", feature).floats("y", kY).finish();
  expect_data_error([&] { decode_sample(record, 4, "f"); }, {"f: feature 'x' holds 2 byte strings, expected 1"});
}

TEST(CosmoFlowDataExample, MalformedWireDataNeverReadsOutOfBounds) {
  const auto good = encode_sample(pattern_sample(2, 1), 2);
  // Every truncation of a valid record either fails cleanly or (at 0) decodes to nothing.
  for (size_t n = 1; n < good.size(); ++n) {
    const std::span<const std::byte> cut(good.data(), n);
    EXPECT_THROW(decode_sample(cut, 2, "cut"), DataError) << n;
  }
  expect_data_error(
      [] {
        decode_example(bytes_of({0x0a, 0x05, 0x0a}), "bad");
      },
      {"bad: malformed tf.train.Example: field length 5 exceeds the 1 bytes left (reading Example)"});
  expect_data_error([] { decode_example(bytes_of({0x0b}), "bad"); },
                    {"bad: malformed tf.train.Example: unsupported wire type 3"});
  expect_data_error(
      [] {
        decode_example(bytes_of({0x80, 0x80}), "bad");
      },
      {"bad: malformed tf.train.Example: truncated varint"});
  expect_data_error([] { decode_example(bytes_of({0x00}), "bad"); }, {"invalid field number 0"});
  // A packed float list whose length is not a multiple of 4.
  const auto odd = ExampleBuilder().raw_feature("y", bytes_of({0x12, 0x05, 0x0a, 0x03, 0, 0, 0})).finish();
  expect_data_error([&] { decode_example(odd, "bad"); }, {"packed floats of 3 bytes (reading FloatList)"});
}

TEST(CosmoFlowDataExample, OneofLastMemberWinsAndSameMemberMerges) {
  // Feature { float_list {1.0} int64_list {7} }: int64_list replaces. Then { int64_list {7} int64_list {8} }: merged.
  const auto replaced =
      ExampleBuilder()
          .raw_feature("k", bytes_of({0x12, 0x06, 0x0a, 0x04, 0, 0, 0x80, 0x3f, 0x1a, 0x03, 0x0a, 0x01, 7}))
          .finish();
  const Features f = decode_example(replaced, "r");
  EXPECT_EQ(f.at("k").kind, FeatureKind::int64_list);
  EXPECT_TRUE(f.at("k").floats.empty());
  const auto merged =
      ExampleBuilder().raw_feature("k", bytes_of({0x1a, 0x03, 0x0a, 0x01, 7, 0x1a, 0x02, 0x08, 8})).finish();
  EXPECT_EQ(decode_example(merged, "r").at("k").int64s, (std::vector<int64_t>{7, 8}));
}

}  // namespace
}  // namespace mlph::cosmoflow
