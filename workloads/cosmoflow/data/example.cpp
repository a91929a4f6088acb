#include "example.hpp"

#include <bit>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "bytes.hpp"
#include "mlph/sdk/util/text.hpp"

namespace mlph::cosmoflow {
namespace {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};

// Reads one protobuf message body; every failure names the record and the message being read.
class WireReader {
 public:
  WireReader(std::span<const std::byte> data, const std::string& where, const char* message)
      : data_(data), where_(where), message_(message) {}

  bool done() const { return pos_ == data_.size(); }

  std::pair<uint64_t, uint32_t> tag() {
    const uint64_t key = varint();
    const uint64_t field = key >> 3;
    if (field == 0 || field > 0x1fffffff) fail("invalid field number " + std::to_string(field));
    return {field, static_cast<uint32_t>(key & 7)};
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) fail("truncated varint");
      const auto b = std::to_integer<uint64_t>(data_[pos_++]);
      value |= (b & 0x7f) << shift;
      if (!(b & 0x80)) return value;
    }
    fail("varint longer than 10 bytes");
  }

  std::span<const std::byte> length_delimited() {
    const uint64_t n = varint();
    if (n > data_.size() - pos_)
      fail("field length " + std::to_string(n) + " exceeds the " + std::to_string(data_.size() - pos_) + " bytes left");
    const auto field = data_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return field;
  }

  std::span<const std::byte> fixed(size_t width) {
    if (data_.size() - pos_ < width) fail("truncated fixed-width field");
    const auto field = data_.subspan(pos_, width);
    pos_ += width;
    return field;
  }

  float fixed32_float() {
    float value;
    from_le_bytes(fixed(4), &value);
    return value;
  }

  void skip(uint32_t wire) {
    switch (wire) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        fixed(8);
        return;
      case kLengthDelimited:
        length_delimited();
        return;
      case kFixed32:
        fixed(4);
        return;
      default:
        fail("unsupported wire type " + std::to_string(wire));  // groups are long deprecated
    }
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw DataError(where_, "malformed tf.train.Example: " + problem + " (reading " + message_ + ")");
  }

 private:
  std::span<const std::byte> data_;
  size_t pos_ = 0;
  const std::string& where_;
  const char* message_;
};

void decode_bytes_list(std::span<const std::byte> body, const std::string& where, Feature& f) {
  WireReader r(body, where, "BytesList");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == kLengthDelimited)
      f.bytes.push_back(r.length_delimited());
    else
      r.skip(wire);
  }
}

void decode_float_list(std::span<const std::byte> body, const std::string& where, Feature& f) {
  WireReader r(body, where, "FloatList");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == kLengthDelimited) {  // packed
      const auto packed = r.length_delimited();
      if (packed.size() % 4 != 0) r.fail("packed floats of " + std::to_string(packed.size()) + " bytes");
      const size_t old = f.floats.size();
      f.floats.resize(old + packed.size() / 4);
      from_le_bytes(packed, f.floats.data() + old);
    } else if (field == 1 && wire == kFixed32) {
      f.floats.push_back(r.fixed32_float());
    } else {
      r.skip(wire);
    }
  }
}

void decode_int64_list(std::span<const std::byte> body, const std::string& where, Feature& f) {
  WireReader r(body, where, "Int64List");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == kLengthDelimited) {  // packed
      WireReader packed(r.length_delimited(), where, "Int64List");
      while (!packed.done()) f.int64s.push_back(static_cast<int64_t>(packed.varint()));
    } else if (field == 1 && wire == kVarint) {
      f.int64s.push_back(static_cast<int64_t>(r.varint()));
    } else {
      r.skip(wire);
    }
  }
}

Feature decode_feature(std::span<const std::byte> body, const std::string& where) {
  Feature f;
  WireReader r(body, where, "Feature");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field < 1 || field > 3 || wire != kLengthDelimited) {
      r.skip(wire);
      continue;
    }
    const auto kind = static_cast<FeatureKind>(field);
    if (f.kind != kind) f = Feature{kind, {}, {}, {}};  // oneof: another member replaces; the same one merges
    const auto list = r.length_delimited();
    if (kind == FeatureKind::bytes_list)
      decode_bytes_list(list, where, f);
    else if (kind == FeatureKind::float_list)
      decode_float_list(list, where, f);
    else
      decode_int64_list(list, where, f);
  }
  return f;
}

void decode_features(std::span<const std::byte> body, const std::string& where, Features& features) {
  WireReader r(body, where, "Features");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field != 1 || wire != kLengthDelimited) {
      r.skip(wire);
      continue;
    }
    WireReader entry(r.length_delimited(), where, "Features.feature map entry");
    std::string key;
    Feature value;
    while (!entry.done()) {
      const auto [entry_field, entry_wire] = entry.tag();
      if (entry_field == 1 && entry_wire == kLengthDelimited) {
        const auto k = entry.length_delimited();
        key.assign(reinterpret_cast<const char*>(k.data()), k.size());
      } else if (entry_field == 2 && entry_wire == kLengthDelimited) {
        value = decode_feature(entry.length_delimited(), where);
      } else {
        entry.skip(entry_wire);
      }
    }
    features[key] = std::move(value);  // a repeated key: the last entry wins, as in protobuf maps
  }
}

// Protobuf encoding helpers.
void put_varint(std::vector<std::byte>& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
  out.push_back(static_cast<std::byte>(v));
}
size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
void put_tag(std::vector<std::byte>& out, uint32_t field, WireType wire) { put_varint(out, field << 3 | wire); }
size_t delimited_size(size_t body) { return 1 + varint_size(body) + body; }  // fields 1..15: 1-byte tags
void put_delimited_header(std::vector<std::byte>& out, uint32_t field, size_t body) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, body);
}
void append(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// A Feature holding one list kind whose body is a single packed or bytes field 1 of `payload`.
std::vector<std::byte> list_feature_prefix(FeatureKind kind, size_t payload) {
  std::vector<std::byte> prefix;
  put_delimited_header(prefix, static_cast<uint32_t>(kind), delimited_size(payload));
  put_delimited_header(prefix, 1, payload);
  return prefix;
}

std::string present_keys(const Features& features) {
  if (features.empty()) return "the Example has no features";
  std::string keys = "features present:";
  for (const auto& entry : features) keys += " " + sdk::quoted(entry.first);
  return keys;
}

const Feature& require(const Features& features, const std::string& key, FeatureKind kind, const std::string& where) {
  const auto it = features.find(key);
  if (it == features.end()) throw DataError(where, "no feature '" + key + "' (" + present_keys(features) + ")");
  if (it->second.kind != kind)
    throw DataError(where, "feature '" + key + "' is a " + std::string(kind_name(it->second.kind)) + ", expected a " +
                               std::string(kind_name(kind)));
  return it->second;
}

}  // namespace

std::string_view kind_name(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::bytes_list:
      return "bytes_list";
    case FeatureKind::float_list:
      return "float_list";
    case FeatureKind::int64_list:
      return "int64_list";
    case FeatureKind::none:
      break;
  }
  return "feature with no value";
}

Features decode_example(std::span<const std::byte> record, const std::string& where) {
  Features features;
  WireReader r(record, where, "Example");
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == kLengthDelimited)
      decode_features(r.length_delimited(), where, features);
    else
      r.skip(wire);
  }
  return features;
}

ExampleBuilder& ExampleBuilder::bytes(std::string_view key, std::span<const std::byte> value) {
  return add(key, list_feature_prefix(FeatureKind::bytes_list, value.size()), value);
}

ExampleBuilder& ExampleBuilder::floats(std::string_view key, std::span<const float> values) {
  const std::vector<std::byte> payload = to_le_bytes(values);
  return add(key, list_feature_prefix(FeatureKind::float_list, payload.size()), payload);
}

ExampleBuilder& ExampleBuilder::int64s(std::string_view key, std::span<const int64_t> values) {
  std::vector<std::byte> payload;
  for (const int64_t v : values) put_varint(payload, static_cast<uint64_t>(v));
  return add(key, list_feature_prefix(FeatureKind::int64_list, payload.size()), payload);
}

ExampleBuilder& ExampleBuilder::add(std::string_view key, std::span<const std::byte> prefix,
                                    std::span<const std::byte> rest) {
  const size_t feature = prefix.size() + rest.size();
  const size_t entry = delimited_size(key.size()) + delimited_size(feature);
  features_.reserve(features_.size() + delimited_size(entry));
  put_delimited_header(features_, 1, entry);
  put_delimited_header(features_, 1, key.size());
  append(features_, cosmoflow::as_bytes(key));
  put_delimited_header(features_, 2, feature);
  append(features_, prefix);
  append(features_, rest);
  return *this;
}

std::vector<std::byte> ExampleBuilder::finish() const {
  std::vector<std::byte> out;
  out.reserve(delimited_size(features_.size()));
  put_delimited_header(out, 1, features_.size());
  append(out, features_);
  return out;
}

Sample decode_sample(std::span<const std::byte> record, int edge, const std::string& where) {
  Sample sample;
  sample.x.resize(volume_elements(edge));
  decode_sample(record, edge, where, {sample.x, sample.y});
  return sample;
}

void decode_sample(std::span<const std::byte> record, int edge, const std::string& where, const SampleView& out) {
  const size_t elements = volume_elements(edge);
  const Features features = decode_example(record, where);
  const Feature& x = require(features, "x", FeatureKind::bytes_list, where);
  if (x.bytes.size() != 1)
    throw DataError(where, "feature 'x' holds " + std::to_string(x.bytes.size()) + " byte strings, expected 1");
  if (x.bytes[0].size() != elements * sizeof(int16_t))
    throw DataError(where, "feature 'x' holds " + std::to_string(x.bytes[0].size()) + " bytes, expected " +
                               std::to_string(elements * sizeof(int16_t)) + " for a " + volume_name(edge) +
                               " int16 volume");
  take_targets(features, where, out.y);
  decode_counts(x.bytes[0], edge, where, out.x);
}

void take_targets(const Features& features, const std::string& where, std::span<float, kTargets> out) {
  const Feature& y = require(features, "y", FeatureKind::float_list, where);
  if (y.floats.size() != kTargets)
    throw DataError(where, "feature 'y' holds " + std::to_string(y.floats.size()) + " floats, expected " +
                               std::to_string(kTargets));
  for (int i = 0; i < kTargets; ++i) {
    if (!std::isfinite(y.floats[i]))
      throw DataError(where, "feature 'y' value " + std::to_string(i) + " is " + std::to_string(y.floats[i]));
    out[static_cast<size_t>(i)] = y.floats[i];
  }
}

std::vector<std::byte> encode_sample(const Sample& sample, int edge) {
  const size_t elements = volume_elements(edge);
  if (sample.x.size() != elements)
    throw std::invalid_argument("encode_sample: x holds " + std::to_string(sample.x.size()) + " values, a " +
                                volume_name(edge) + " volume has " + std::to_string(elements));
  ExampleBuilder example;
  if constexpr (std::endian::native == std::endian::little)
    example.bytes("x", std::as_bytes(std::span(sample.x)));
  else
    example.bytes("x", to_le_bytes(std::span<const int16_t>(sample.x)));
  return example.floats("y", sample.y).finish();
}

}  // namespace mlph::cosmoflow
