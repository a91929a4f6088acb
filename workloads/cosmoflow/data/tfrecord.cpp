#include "tfrecord.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "bytes.hpp"
#include "crc32c.hpp"
#include "example.hpp"
#include "file_io.hpp"
#include "gzip.hpp"

namespace mlph::cosmoflow {
namespace {

constexpr size_t kLengthBytes = 8, kCrcBytes = 4, kHeaderBytes = kLengthBytes + kCrcBytes;

std::string hex(uint32_t v) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

std::string record_where(const std::string& name, size_t index) { return name + ": record " + std::to_string(index); }

uint32_t load_u32(std::span<const std::byte> bytes) {
  uint32_t v;
  from_le_bytes(bytes.first(4), &v);
  return v;
}

void check_crc(std::span<const std::byte> covered, std::span<const std::byte> stored_bytes, const char* what,
               const std::string& where) {
  const uint32_t stored = load_u32(stored_bytes), computed = masked_crc32c(covered);
  if (stored != computed)
    throw DataError(where,
                    std::string(what) + " CRC mismatch (stored " + hex(stored) + ", computed " + hex(computed) + ")");
}

// Walks the framing of an uncompressed TFRecord stream.
size_t walk_records(std::span<const std::byte> data, const std::string& name, const RecordVisitor& visit) {
  size_t pos = 0, index = 0;
  for (; pos < data.size(); ++index) {
    const std::string where = record_where(name, index);
    const size_t remain = data.size() - pos;
    if (remain < kHeaderBytes)
      throw DataError(where, "truncated record header: " + std::to_string(kHeaderBytes) + " bytes needed, " +
                                 std::to_string(remain) + " remain");
    const auto header = data.subspan(pos, kHeaderBytes);
    check_crc(header.first(kLengthBytes), header.subspan(kLengthBytes), "length", where);
    uint64_t length;
    from_le_bytes(header.first(kLengthBytes), &length);
    const size_t body_remain = remain - kHeaderBytes;
    if (body_remain < kCrcBytes || length > body_remain - kCrcBytes)
      throw DataError(where, "truncated record: header says " + std::to_string(length) + " bytes (+4 CRC), " +
                                 std::to_string(body_remain) + " remain");
    const auto record = data.subspan(pos + kHeaderBytes, static_cast<size_t>(length));
    check_crc(record, data.subspan(pos + kHeaderBytes + record.size(), kCrcBytes), "data", where);
    visit(index, record);
    pos += kHeaderBytes + record.size() + kCrcBytes;
  }
  return index;
}

void put_u64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// One record framed, in three pieces: header (length, its CRC), the record, the record's CRC.
void frame_record(std::span<const std::byte> record, const ByteSink& out) {
  std::vector<std::byte> header;
  put_u64(header, record.size());
  put_u32(header, masked_crc32c(header));
  std::vector<std::byte> trailer;
  put_u32(trailer, masked_crc32c(record));
  out(header);
  out(record);
  out(trailer);
}

// Frames records into `out`, through one gzip stream when the options say so.
void write_records(const std::function<void(const ByteSink&)>& records, const TfRecordWriteOptions& options,
                   const ByteSink& out) {
  if (!options.gzip) return records(out);
  GzipWriter gzip(options.gzip_level, out);
  records([&](std::span<const std::byte> piece) { gzip.write(piece); });
  gzip.finish();
}

// ---- a record read in place ------------------------------------------------------------------

constexpr std::byte kField1{0x0a}, kField2{0x12};  // fields 1 and 2, length-delimited

// A varint at `pos` of `bytes`, moving pos past it; nothing when it does not end within them.
std::optional<uint64_t> read_varint(std::span<const std::byte> bytes, size_t& pos) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && pos < bytes.size(); shift += 7) {
    const auto b = std::to_integer<uint64_t>(bytes[pos++]);
    value |= (b & 0x7f) << shift;
    if (!(b & 0x80)) return value;
  }
  return std::nullopt;
}

size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

void put_varint(std::vector<std::byte>& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
  out.push_back(static_cast<std::byte>(v));
}

// The 'x' bytes of a record whose first bytes are `head`: the five lengths that enclose them
// (Features, its map entry, the Feature, the BytesList, the value), each with where its varint lies.
struct XPlace {
  std::array<std::pair<size_t, size_t>, 5> varint{};  // [begin, end) in the record
  std::array<uint64_t, 5> length{};
  size_t value_start() const { return varint[4].second; }
};

// The record must be one Features message whose map entries before x's lie whole in `head`, and
// x's entry (the first that is one) must be its key and one Feature of one BytesList of one value
// of `value_bytes` bytes, exactly nested, its value starting in `head`. Anything else: nothing (read
// whole).
std::optional<XPlace> find_x(std::span<const std::byte> head, uint64_t record_bytes, uint64_t value_bytes) {
  XPlace x;
  size_t pos = 0;
  const auto delimited = [&](std::byte tag, size_t level) {
    if (pos >= head.size() || head[pos] != tag) return false;
    const size_t begin = ++pos;
    const std::optional<uint64_t> n = read_varint(head, pos);
    if (!n) return false;
    x.varint[level] = {begin, pos};
    x.length[level] = *n;
    return true;
  };
  // The map entry at pos (its length read) as x's: key "x", then the exactly nested value.
  const auto x_entry = [&](uint64_t entry_end) {
    if (head.size() - pos < 3 || head[pos] != kField1 || head[pos + 1] != std::byte{1} || head[pos + 2] != std::byte{'x'})
      return false;
    pos += 3;
    for (size_t level = 2; level < 5; ++level)
      if (!delimited(level == 2 ? kField2 : kField1, level) || x.length[level] != entry_end - pos) return false;
    return x.length[4] == value_bytes;
  };
  if (!delimited(kField1, 0) || x.length[0] != record_bytes - pos) return std::nullopt;
  for (;;) {  // map entries up to x's, each whole in head
    if (!delimited(kField1, 1) || x.length[1] > record_bytes - pos) return std::nullopt;
    const size_t entry = pos;
    if (x_entry(entry + x.length[1])) return x;
    pos = entry;
    if (x.length[1] > head.size() - pos) return std::nullopt;
    pos += static_cast<size_t>(x.length[1]);
  }
}

// The record without x's value: `head` up to it with the five enclosing lengths shortened, then
// `tail` (the record after the value). `x_at` receives where the (now empty) value lies.
std::vector<std::byte> without_x(std::span<const std::byte> head, std::span<const std::byte> tail, const XPlace& x,
                                 size_t& x_at) {
  std::array<uint64_t, 5> shorter{};
  shorter[4] = 0;
  for (size_t level = 4; level-- > 0;)
    shorter[level] = x.length[level] - (varint_size(x.length[level + 1]) + x.length[level + 1]) +
                     (varint_size(shorter[level + 1]) + shorter[level + 1]);
  std::vector<std::byte> record;
  size_t from = 0;
  for (size_t level = 0; level < 5; ++level) {
    record.insert(record.end(), head.begin() + static_cast<ptrdiff_t>(from),
                  head.begin() + static_cast<ptrdiff_t>(x.varint[level].first));
    put_varint(record, shorter[level]);
    from = x.varint[level].second;
  }
  x_at = record.size();
  record.insert(record.end(), tail.begin(), tail.end());
  return record;
}

// How many bytes before `offset` a read into `into` should start so that the file's bytes and the
// memory they land in agree modulo 64: the kernel's copy from the page cache (rep movsb) runs at
// about two thirds of its speed when they do not (x's value lies at byte 42 of the files the
// synthetic data writes, and at some such offset in TensorFlow's). 0 when that would start before
// the file.
size_t copy_skew(uint64_t offset, const std::byte* into) {
  constexpr uint64_t kAlign = 64;
  const auto skew = static_cast<size_t>((offset - reinterpret_cast<uintptr_t>(into)) % kAlign);
  return skew <= offset ? skew : 0;
}

}  // namespace

bool read_tfrecord_sample_in_place(const RangeReader& read, const std::string& name, int edge, const SampleView& out,
                                   std::vector<std::byte>& scratch) {
  constexpr size_t kHead = 4096, kPiece = kInCachePieceBytes;
  const size_t volume = volume_bytes(edge);
  const std::span<std::byte> x_bytes = std::as_writable_bytes(out.x);
  if (x_bytes.size() != volume)
    throw std::invalid_argument("read_tfrecord_sample_in_place: " + std::to_string(out.x.size()) + " counts for a " +
                                volume_name(edge) + " volume");
  std::array<std::byte, kHeaderBytes> header{};
  if (!read(0, header) || is_gzip(header) || load_u32(std::span(header).subspan(kLengthBytes)) !=
                                                 masked_crc32c(std::span(header).first(kLengthBytes)))
    return false;
  uint64_t length = 0;
  from_le_bytes(std::span(header).first(kLengthBytes), &length);
  if (length < volume || length > max_record_bytes(edge) - kHeaderBytes - kCrcBytes) return false;
  std::byte past{};
  if (read(kHeaderBytes + length + kCrcBytes, std::span(&past, 1))) return false;  // another record, or junk
  std::vector<std::byte> head(static_cast<size_t>(std::min<uint64_t>(length, kHead)));
  if (!read(kHeaderBytes, head)) return false;
  const std::optional<XPlace> x = find_x(head, length, volume);
  if (!x) return false;
  const size_t start = x->value_start();
  const uint64_t x_offset = kHeaderBytes + start;
  const size_t skew = volume > 64 ? copy_skew(x_offset, x_bytes.data()) : 0;  // the first piece holds more than skew
  uint32_t crc = crc32c(std::span(head).first(start));
  uint8_t high_bytes = 0;  // the OR of the counts' high bytes (little-endian, at odd addresses): bit 7, a negative one
  const auto place = [&](std::byte* to, const std::byte* from, size_t bytes) {
    const MovedBytes moved = crc32c_move(to, from, bytes, crc);
    crc = moved.crc;
    high_bytes |= moved.odd_or;
  };
  // Each piece is read `skew` bytes early, so that the page cache and the row agree in their
  // addresses modulo 64 (the kernel's copy then runs at full speed), and moved back by skew while
  // it is in the core's cache, CRC'd and sign-checked in the same pass; the last skew bytes of x
  // come with the tail.
  for (size_t done = 0; done < volume; done += kPiece) {
    const std::span<std::byte> piece = x_bytes.subspan(done, std::min(kPiece, volume - done));
    if (!read(x_offset + done - skew, piece)) return false;
    const size_t to = done == 0 ? 0 : done - skew, from = done == 0 ? skew : 0;
    place(x_bytes.data() + to, piece.data() + from, piece.size() - from);
  }
  scratch.resize(static_cast<size_t>(length - start - volume) + kCrcBytes + skew);
  if (!read(x_offset + volume - skew, scratch)) return false;
  place(x_bytes.data() + volume - skew, scratch.data(), skew);
  const std::span<const std::byte> tail = std::span<const std::byte>(scratch).subspan(skew, scratch.size() - skew - kCrcBytes);
  if (mask_crc(crc32c(tail, crc)) != load_u32(std::span<const std::byte>(scratch).last(kCrcBytes))) return false;
  if constexpr (std::endian::native == std::endian::big)
    for (int16_t& v : out.x) v = byteswap_value(v);
  size_t x_at = 0;
  const std::vector<std::byte> rest = without_x(head, tail, *x, x_at);
  const std::string where = record_where(name, 0);
  Features features;
  try {
    features = decode_example(rest, where);
  } catch (const DataError&) {
    return false;
  }
  const auto it = features.find("x");  // must be the value cut out, not another entry named x
  if (it == features.end() || it->second.kind != FeatureKind::bytes_list || it->second.bytes.size() != 1 ||
      !it->second.bytes[0].empty() || it->second.bytes[0].data() != rest.data() + x_at)
    return false;
  take_targets(features, where, out.y);
  if (high_bytes & 0x80) check_counts(out.x, {0, 0, 0}, {edge, edge, edge}, where);
  return true;
}

size_t max_record_bytes(int edge) {
  constexpr size_t kExampleRoom = 64 << 10;
  return kHeaderBytes + volume_bytes(edge) + kTargets * sizeof(float) + kExampleRoom + kCrcBytes;
}

size_t max_tfrecord_bytes(int edge, int records) {
  if (records < 1) throw std::invalid_argument("a TFRecord file holds at least 1 record, not " + std::to_string(records));
  return static_cast<size_t>(records) * max_record_bytes(edge);
}

size_t max_tfrecord_file_bytes(int edge, int records) {
  const size_t inflated = max_tfrecord_bytes(edge, records);
  return inflated + inflated / 1024 + 1024;  // stored deflate blocks: 5 bytes per 64 KiB, plus the gzip header
}

void for_each_tfrecord(std::span<const std::byte> file, const std::string& name, const RecordVisitor& visit,
                       size_t max_bytes, gzip::Engine engine) {
  if (file.empty()) throw DataError(name, "empty file: no TFRecord records");
  size_t records = 0;
  if (is_gzip(file)) {
    const std::vector<std::byte> inflated = gunzip(file, name, max_bytes, engine);
    records = walk_records(inflated, name, visit);
  } else {
    records = walk_records(file, name, visit);
  }
  if (records == 0) throw DataError(name, "holds no TFRecord records (the gzip stream inflates to nothing)");
}

std::vector<std::vector<std::byte>> read_tfrecords(std::span<const std::byte> file, const std::string& name) {
  std::vector<std::vector<std::byte>> records;
  for_each_tfrecord(file, name, [&](size_t, std::span<const std::byte> record) {
    records.emplace_back(record.begin(), record.end());
  });
  return records;
}

std::vector<Sample> read_tfrecord_samples(std::span<const std::byte> file, const std::string& name, int edge,
                                          int max_records, gzip::Engine engine) {
  const size_t max_bytes = max_tfrecord_bytes(edge, max_records);
  if (!is_gzip(file) && file.size() > max_bytes)
    throw DataError(name, std::to_string(file.size()) + " bytes, more than the " + std::to_string(max_bytes) +
                              " that " + std::to_string(max_records) + " record(s) of a " + volume_name(edge) +
                              " sample can take");
  std::vector<Sample> samples;
  for_each_tfrecord(
      file, name,
      [&](size_t index, std::span<const std::byte> record) {
        samples.push_back(decode_sample(record, edge, record_where(name, index)));
      },
      max_bytes, engine);
  return samples;
}

void read_tfrecord_sample(std::span<const std::byte> file, const std::string& name, int edge, const SampleView& out,
                          gzip::Engine engine) {
  const size_t max_bytes = max_tfrecord_bytes(edge, 1);
  if (!is_gzip(file) && file.size() > max_bytes)
    throw DataError(name, std::to_string(file.size()) + " bytes, more than the " + std::to_string(max_bytes) +
                              " that one record of a " + volume_name(edge) + " sample can take");
  for_each_tfrecord(
      file, name,
      [&](size_t index, std::span<const std::byte> record) {
        if (index > 0) throw DataError(name, "holds more than one record, but data.records_per_file is 1");
        decode_sample(record, edge, record_where(name, index), out);
      },
      max_bytes, engine);
}

std::vector<std::byte> encode_tfrecords(std::span<const std::vector<std::byte>> records,
                                        const TfRecordWriteOptions& options) {
  std::vector<std::byte> file;
  const auto each = [&](const ByteSink& out) {
    for (const auto& record : records) frame_record(record, out);
  };
  write_records(each, options, [&](std::span<const std::byte> piece) { file.insert(file.end(), piece.begin(), piece.end()); });
  return file;
}

// One record in memory at a time, framed (and compressed) straight into the file: a 512^3 sample
// (1 GiB of counts) needs its counts and its record, no copy of the file.
void write_tfrecord_file(const std::string& path, std::span<const Sample> samples, int edge,
                         const TfRecordWriteOptions& options) {
  const auto each = [&](const ByteSink& out) {
    for (const Sample& sample : samples) frame_record(encode_sample(sample, edge), out);
  };
  write_file_atomically(path, [&](const ByteSink& file) { write_records(each, options, file); });
}

}  // namespace mlph::cosmoflow
