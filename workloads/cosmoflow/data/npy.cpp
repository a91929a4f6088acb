#include "npy.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "bytes.hpp"
#include "file_io.hpp"
#include "mlph/sdk/util/text.hpp"

namespace mlph::cosmoflow {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlignment = 64;  // numpy pads headers so the data starts 64-byte aligned

std::string shape_text(std::span<const uint64_t> shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

// The header is a Python dict literal; this reads the subset numpy writes:
//   {'descr': '<i2', 'fortran_order': False, 'shape': (128, 128, 128, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  NpyArray parse() {
    NpyArray array;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr")
        array.descr = string_literal(), seen_descr = true;
      else if (key == "fortran_order")
        array.fortran_order = boolean(), seen_order = true;
      else if (key == "shape")
        array.shape = tuple(), seen_shape = true;
      else
        fail("unexpected key " + sdk::quoted(key));
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    if (!seen_descr || !seen_order || !seen_shape) fail("the header lacks one of 'descr', 'fortran_order', 'shape'");
    return array;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    skip_space();
    const char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {"False", false}})
      if (text_.substr(pos_, word.size()) == word) return pos_ += word.size(), value;
    fail("expected True or False");
  }
  uint64_t integer() {
    skip_space();
    uint64_t value = 0;
    const size_t start = pos_;
    for (; pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])); ++pos_) {
      if (value > (std::numeric_limits<uint64_t>::max() - 9) / 10) fail("dimension too large");
      value = value * 10 + static_cast<uint64_t>(text_[pos_] - '0');
    }
    if (pos_ == start) fail("expected a dimension");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs, as old numpy wrote them
    return value;
  }
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> dims;
    expect('(');
    while (!consume(')')) {
      dims.push_back(integer());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw DataError(name_, "malformed .npy header: " + problem + " at offset " + std::to_string(pos_) + " of " +
                               sdk::quoted(text_));
  }

  std::string_view text_;
  size_t pos_ = 0;
  const std::string& name_;
};

// Bytes per item of a simple dtype such as '<i2' or '|u1'; nullopt for anything else.
std::optional<uint64_t> item_size(std::string_view descr) {
  if (descr.size() < 3 || std::string_view("<>|=").find(descr[0]) == std::string_view::npos) return std::nullopt;
  uint64_t size = 0;
  for (const char c : descr.substr(2)) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || size > 1'000'000) return std::nullopt;
    size = size * 10 + static_cast<uint64_t>(c - '0');
  }
  return size;
}

// prod(shape) x item bytes, or nullopt when that overflows 64 bits.
std::optional<uint64_t> array_bytes(std::span<const uint64_t> shape, uint64_t item) {
  constexpr uint64_t limit = std::numeric_limits<uint64_t>::max();
  for (const uint64_t dim : shape)
    if (dim == 0) return 0;
  uint64_t bytes = item;
  for (const uint64_t dim : shape) {
    if (bytes > limit / dim) return std::nullopt;
    bytes *= dim;
  }
  return bytes;
}

uint64_t read_le(std::span<const std::byte> bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = (v << 8) | std::to_integer<uint64_t>(bytes[i]);
  return v;
}

void check_array(const NpyArray& a, std::string_view descr, const char* dtype_name, const std::string& name) {
  if (a.descr != descr)
    throw DataError(name, "dtype " + sdk::quoted(a.descr) + ", expected '" + std::string(descr) + "' (" + dtype_name + ")");
  if (a.fortran_order) throw DataError(name, "fortran_order is True; CosmoFlow arrays are stored in C order");
}

// Where the header text starts (after magic, version and its length) and where the data starts.
std::pair<size_t, uint64_t> header_extent(std::span<const std::byte> head, const std::string& name) {
  const size_t preamble = kMagic.size() + 2;
  if (head.size() < preamble + 2 ||
      std::string_view(reinterpret_cast<const char*>(head.data()), kMagic.size()) != kMagic)
    throw DataError(name, "not a .npy file (no \\x93NUMPY magic)");
  const auto major = std::to_integer<int>(head[kMagic.size()]);
  if (major < 1 || major > 3)
    throw DataError(name, ".npy format version " + std::to_string(major) + " is not supported");
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (head.size() < preamble + length_bytes) throw DataError(name, "truncated .npy header");
  const uint64_t header_length = read_le(head.subspan(preamble, length_bytes));
  if (header_length > kMaxNpyHeaderBytes)
    throw DataError(name, ".npy header of " + std::to_string(header_length) + " bytes, more than the " +
                              std::to_string(kMaxNpyHeaderBytes) + " this reader accepts");
  return {preamble + length_bytes, preamble + length_bytes + header_length};
}

}  // namespace

uint64_t npy_data_offset(std::span<const std::byte> head, const std::string& name) {
  return header_extent(head, name).second;
}

NpyArray parse_npy_header(std::span<const std::byte> head, const std::string& name) {
  const auto [header_start, data_start] = header_extent(head, name);
  if (data_start > head.size())
    throw DataError(name, "truncated .npy header: it claims " + std::to_string(data_start - header_start) + " bytes, " +
                              std::to_string(head.size() - header_start) + " remain");
  const std::string_view text(reinterpret_cast<const char*>(head.data() + header_start), data_start - header_start);
  NpyArray array = HeaderParser(text, name).parse();
  if (!item_size(array.descr)) throw DataError(name, "unsupported dtype " + sdk::quoted(array.descr));
  return array;
}

NpyArray parse_npy(std::span<const std::byte> file, const std::string& name) {
  NpyArray array = parse_npy_header(file, name);
  const uint64_t data_start = npy_data_offset(file, name), available = file.size() - data_start;
  const auto needed = array_bytes(array.shape, *item_size(array.descr));
  if (needed != available)
    throw DataError(name, "holds " + std::to_string(available) + " data bytes, but shape " + shape_text(array.shape) +
                              " of " + sdk::quoted(array.descr) + " needs " +
                              (needed ? std::to_string(*needed) : "more than 2^64"));
  array.data = file.subspan(data_start);
  return array;
}

namespace {

// The magic, version, header length and header of a .npy file, padded so that its data starts aligned.
std::string npy_prefix(std::string_view descr, std::span<const uint64_t> shape) {
  std::string header =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Pad with spaces and end with a newline so the data starts aligned; version 2.0 only when the
  // header outgrows version 1.0's 16-bit length.
  const auto padded = [&](size_t preamble) {
    return header.size() + 1 + (kAlignment - (preamble + header.size() + 1) % kAlignment) % kAlignment;
  };
  const bool version2 = padded(kMagic.size() + 4) > 0xffff;
  const size_t preamble = kMagic.size() + 2 + (version2 ? 4 : 2);
  header.append(padded(preamble) - header.size() - 1, ' ');
  header += '\n';

  std::string prefix(kMagic);
  prefix += static_cast<char>(version2 ? 2 : 1);
  prefix += '\0';
  for (size_t i = 0; i < preamble - kMagic.size() - 2; ++i) prefix += static_cast<char>(header.size() >> (8 * i));
  return prefix + header;
}

}  // namespace

std::vector<std::byte> encode_npy(std::string_view descr, std::span<const uint64_t> shape,
                                  std::span<const std::byte> data) {
  const std::string prefix = npy_prefix(descr, shape);
  std::vector<std::byte> out(prefix.size() + data.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  if (!data.empty()) std::memcpy(out.data() + prefix.size(), data.data(), data.size());
  return out;
}

void check_npy_volume(const NpyArray& x, const std::string& name, int edge) {
  check_array(x, "<i2", "little-endian int16", name);
  const auto e = static_cast<uint64_t>(edge);
  const std::vector<uint64_t> expected{e, e, e, kChannels};
  if (x.shape != expected)
    throw DataError(
        name, "shape " + shape_text(x.shape) + ", expected " + shape_text(expected) + " (D, H, W, channels last)");
}

std::array<float, kTargets> read_npy_label(std::span<const std::byte> label_npy, const std::string& label_name) {
  const NpyArray y = parse_npy(label_npy, label_name);
  check_array(y, "<f4", "little-endian float32", label_name);
  if (y.data.size() != kTargets * sizeof(float))
    throw DataError(label_name, "shape " + shape_text(y.shape) + " holds " + std::to_string(y.data.size() / 4) +
                                    " values, expected " + std::to_string(kTargets));
  std::array<float, kTargets> out{};
  from_le_bytes(y.data, out.data());
  for (int i = 0; i < kTargets; ++i)
    if (!std::isfinite(out[i])) throw DataError(label_name, "value " + std::to_string(i) + " is " + std::to_string(out[i]));
  return out;
}

Sample read_npy_sample(std::span<const std::byte> data_npy, std::span<const std::byte> label_npy,
                       const std::string& name, int edge) {
  Sample sample;
  sample.x.resize(volume_elements(edge));
  read_npy_sample(data_npy, label_npy, name, edge, {sample.x, sample.y});
  return sample;
}

void read_npy_sample(std::span<const std::byte> data_npy, std::span<const std::byte> label_npy,
                     const std::string& name, int edge, const SampleView& out) {
  const NpyArray x = parse_npy(data_npy, name);
  check_npy_volume(x, name, edge);
  const std::array<float, kTargets> y = read_npy_label(label_npy, npy_label_path(name));
  std::copy(y.begin(), y.end(), out.y.begin());
  decode_counts(x.data, edge, name, out.x);
}

bool read_npy_volume_in_place(const RangeReader& read, const std::string& name, int edge, std::span<int16_t> x) {
  constexpr size_t kPiece = kInCachePieceBytes;
  const std::span<std::byte> bytes = std::as_writable_bytes(x);
  if (bytes.size() != volume_bytes(edge))
    throw std::invalid_argument("read_npy_volume_in_place: " + std::to_string(x.size()) + " counts for a " +
                                volume_name(edge) + " volume");
  uint64_t data = 0;
  try {
    std::vector<std::byte> head(128);  // what numpy writes before a 4-dim array (its header ends on 64 bytes)
    if (!read(0, head)) return false;
    data = npy_data_offset(head, name);
    if (data > head.size()) {
      head.resize(static_cast<size_t>(data));
      if (!read(0, head)) return false;
    }
    check_npy_volume(parse_npy_header(head, name), name, edge);
  } catch (const DataError&) {
    return false;  // the whole file's decoding says what is wrong, as it always did
  }
  std::byte past{};
  if (read(data + bytes.size(), std::span(&past, 1))) return false;  // bytes the shape does not account for
  for (size_t done = 0; done < bytes.size(); done += kPiece) {
    const std::span<std::byte> piece = bytes.subspan(done, std::min(kPiece, bytes.size() - done));
    if (!read(data + done, piece)) return false;
    const std::span<int16_t> counts = x.subspan(done / sizeof(int16_t), piece.size() / sizeof(int16_t));
    if constexpr (std::endian::native == std::endian::big)
      for (int16_t& v : counts) v = byteswap_value(v);
    int16_t any_sign = 0;
    for (const int16_t v : counts) any_sign |= v;
    if (any_sign < 0)  // the first negative count lies in this piece: named as a whole decode names it
      check_counts(x.first((done + piece.size()) / sizeof(int16_t)), {0, 0, 0}, {edge, edge, edge}, name);
  }
  return true;
}

std::string npy_label_path(const std::string& data_path) {
  constexpr std::string_view suffix = "_data.npy";
  if (data_path.size() >= suffix.size() && data_path.ends_with(suffix))
    return data_path.substr(0, data_path.size() - suffix.size()) + "_label.npy";
  return data_path + "_label.npy";
}

void write_npy_sample(const std::string& stem, const Sample& sample, int edge) {
  const size_t elements = volume_elements(edge);
  if (sample.x.size() != elements)
    throw std::invalid_argument("write_npy_sample: x holds " + std::to_string(sample.x.size()) + " values, a " +
                                volume_name(edge) + " volume has " + std::to_string(elements));
  const auto e = static_cast<uint64_t>(edge);
  const uint64_t data_shape[] = {e, e, e, kChannels}, label_shape[] = {kTargets};
  // Written from the sample itself (on little-endian hosts): a 512^3 volume is 1 GiB.
  write_file_atomically(stem + "_data.npy", [&](const ByteSink& out) {
    out(as_bytes(npy_prefix("<i2", data_shape)));
    if constexpr (std::endian::native == std::endian::little)
      out(std::as_bytes(std::span(sample.x)));
    else
      out(to_le_bytes(std::span<const int16_t>(sample.x)));
  });
  write_file_atomically(stem + "_label.npy",
                        encode_npy("<f4", label_shape, to_le_bytes(std::span<const float>(sample.y))));
}

}  // namespace mlph::cosmoflow
