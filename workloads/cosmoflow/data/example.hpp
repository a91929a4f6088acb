// tf.train.Example in protobuf wire format, decoded and encoded by hand: the data layer needs
// three list types and one map, not a protobuf runtime.
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }  Int64List { repeated int64 value
//   = 1; }
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sample.hpp"

namespace mlph::cosmoflow {

enum class FeatureKind { none, bytes_list, float_list, int64_list };
std::string_view kind_name(FeatureKind kind);

// One decoded feature. Byte strings are views into the record they were decoded from.
struct Feature {
  FeatureKind kind = FeatureKind::none;
  std::vector<std::span<const std::byte>> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;
};
using Features = std::map<std::string, Feature, std::less<>>;

// Decodes a serialized tf.train.Example, skipping unknown fields as protobuf does and reading
// float/int64 lists packed or not. Throws DataError("<where>: malformed tf.train.Example: ...").
Features decode_example(std::span<const std::byte> record, const std::string& where);

// Builds a serialized tf.train.Example feature by feature (lists are written packed, as TF does).
class ExampleBuilder {
 public:
  ExampleBuilder& bytes(std::string_view key, std::span<const std::byte> value);
  ExampleBuilder& floats(std::string_view key, std::span<const float> values);
  ExampleBuilder& int64s(std::string_view key, std::span<const int64_t> values);
  // Adds an already encoded Feature message, for writing forms the methods above do not (unpacked lists).
  ExampleBuilder& raw_feature(std::string_view key, std::span<const std::byte> feature_message) {
    return add(key, feature_message, {});
  }
  std::vector<std::byte> finish() const;

 private:
  // Appends the map entry key -> Feature, the Feature message being prefix followed by rest.
  ExampleBuilder& add(std::string_view key, std::span<const std::byte> prefix, std::span<const std::byte> rest);

  std::vector<std::byte> features_;  // the body of the Features message
};

// The CosmoFlow sample in a record: 'x' one byte string of edge^3 x 4 int16 LE, 'y' 4 finite floats.
Sample decode_sample(std::span<const std::byte> record, int edge, const std::string& where);
void decode_sample(std::span<const std::byte> record, int edge, const std::string& where, const SampleView& out);
std::vector<std::byte> encode_sample(const Sample& sample, int edge);
// The 'y' feature's 4 finite targets into `y`, checked as decode_sample checks them.
void take_targets(const Features& features, const std::string& where, std::span<float, kTargets> y);

}  // namespace mlph::cosmoflow
