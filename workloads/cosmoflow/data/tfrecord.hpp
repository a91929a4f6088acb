// TFRecord files: records framed as
//   uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// optionally inside one gzip stream (CosmoFlow v1.0+), detected from the magic bytes.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mlph/util/gzip.hpp"
#include "sample.hpp"

namespace mlph::cosmoflow {

using RecordVisitor = std::function<void(size_t index, std::span<const std::byte> record)>;

// The most one record holding a CosmoFlow sample of `edge` can take: the int16 volume, the 4
// targets, the Example's keys and framing, and room (64 KiB) for a few small extra features.
size_t max_record_bytes(int edge);

// The most a TFRecord stream of `records` such records can take (inflated), and the most its file
// can take (a gzip stream of incompressible data is slightly larger than the data).
size_t max_tfrecord_bytes(int edge, int records);
size_t max_tfrecord_file_bytes(int edge, int records);

// Calls visit for every record of a TFRecord file held in memory (plain or gzip), in order; the
// span lives only during the call. Both CRCs of every record are verified. Throws DataError naming
// `name` (and the record) for a corrupt or truncated file, for a file holding no record at all, and
// for a gzip stream inflating to more than max_bytes (checked as it inflates).
void for_each_tfrecord(std::span<const std::byte> file, const std::string& name, const RecordVisitor& visit,
                       size_t max_bytes = std::numeric_limits<size_t>::max(),
                       gzip::Engine engine = gzip::Engine::libdeflate);

// Copies of all records; for_each_tfrecord avoids the copies.
std::vector<std::vector<std::byte>> read_tfrecords(std::span<const std::byte> file, const std::string& name);

// Every record decoded as a CosmoFlow sample of the given edge (see decode_sample); a file that
// holds (or inflates to) more than max_records records' worth of bytes is refused.
std::vector<Sample> read_tfrecord_samples(std::span<const std::byte> file, const std::string& name, int edge,
                                          int max_records, gzip::Engine engine = gzip::Engine::libdeflate);
// The one record of a file that holds exactly one, decoded into `out`.
void read_tfrecord_sample(std::span<const std::byte> file, const std::string& name, int edge, const SampleView& out,
                          gzip::Engine engine = gzip::Engine::libdeflate);

// The one record of a plain (not GZIP) TFRecord file read in place: its framing and the Example's
// head through `read`, the 'x' bytes straight into out.x (one copy from the page cache into a
// batch's row; in pieces, each folded into the record's CRC and checked for a negative count while
// still in the cache), the rest after them; the CRCs checked over the bytes where they landed and the
// Example parsed without its 'x' bytes (its enclosing lengths shortened by as many), then checked as
// read_tfrecord_sample checks it. True when `out` holds what read_tfrecord_sample would decode.
// False, `out` unspecified, for any file this path does not take (GZIP, several records, a CRC that
// does not match, an Example laid out otherwise or malformed): the caller decodes the whole file,
// which refuses it with the message it always gave. Bad targets and negative counts throw DataError
// as read_tfrecord_sample does.
bool read_tfrecord_sample_in_place(const RangeReader& read, const std::string& name, int edge, const SampleView& out,
                                   std::vector<std::byte>& scratch);

struct TfRecordWriteOptions {
  bool gzip = false;
  int gzip_level = -1;  // zlib: 0..9, -1 its default (6)
};

// The bytes of a TFRecord file holding records, framed (and compressed) as options say.
std::vector<std::byte> encode_tfrecords(std::span<const std::vector<std::byte>> records,
                                        const TfRecordWriteOptions& options = {});

// Writes samples as a TFRecord file, one tf.train.Example per sample. The file appears complete or
// not at all (written to a temporary name, then renamed). Throws std::runtime_error on I/O failure.
void write_tfrecord_file(const std::string& path, std::span<const Sample> samples, int edge,
                         const TfRecordWriteOptions& options = {});

}  // namespace mlph::cosmoflow
