#include "tfrecord.hpp"

#include <cstdio>
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

}  // namespace

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
