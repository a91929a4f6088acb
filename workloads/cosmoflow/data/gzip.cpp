#include "gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <new>
#include <stdexcept>

#include "sample.hpp"

namespace mlph::cosmoflow {
namespace {

constexpr int kGzipWindowBits = 15 + 16;                        // +16: gzip header and trailer, not a raw zlib stream
constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max();  // zlib counts in 32 bits
constexpr size_t kDeflateMaxRatio = 1032;                       // the most deflate can expand

// Owns a z_stream for inflating or deflating, ending it however the scope is left.
class ZStream {
 public:
  enum class Mode { inflate, deflate };
  ZStream(Mode mode, int level) : mode_(mode) {
    const int rc = mode == Mode::inflate ? inflateInit2(&z_, kGzipWindowBits)
                                         : deflateInit2(&z_, level, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY);
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK) throw std::invalid_argument("zlib init failed: " + std::string(z_.msg ? z_.msg : zError(rc)));
  }
  ~ZStream() { mode_ == Mode::inflate ? inflateEnd(&z_) : deflateEnd(&z_); }
  ZStream(const ZStream&) = delete;
  ZStream& operator=(const ZStream&) = delete;
  z_stream* operator->() { return &z_; }
  z_stream* get() { return &z_; }
  std::string message(int rc) const { return z_.msg ? z_.msg : zError(rc); }

 private:
  z_stream z_{};
  Mode mode_;
};

Bytef* in_ptr(const std::byte* p) { return reinterpret_cast<Bytef*>(const_cast<std::byte*>(p)); }

// The gzip trailer ends with the input size mod 2^32: a good first guess for the output size,
// capped by the deflate ratio and the caller's limit so a corrupt trailer cannot demand a huge
// allocation.
size_t expected_size(std::span<const std::byte> data, size_t max_bytes) {
  if (data.size() < 18) return std::min(4 * data.size(), max_bytes);
  const std::byte* t = data.data() + data.size() - 4;
  const size_t isize = std::to_integer<size_t>(t[0]) | std::to_integer<size_t>(t[1]) << 8 |
                       std::to_integer<size_t>(t[2]) << 16 | std::to_integer<size_t>(t[3]) << 24;
  return std::min({std::max(isize, data.size()), data.size() * kDeflateMaxRatio, max_bytes});
}

std::string bytes_left(size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// Offers zlib the input from pos on, in a chunk it can count; returns the size offered.
size_t offer(ZStream& z, std::span<const std::byte> data, size_t pos) {
  const size_t chunk = std::min(data.size() - pos, kMaxChunk);
  z->next_in = in_ptr(data.data() + pos);
  z->avail_in = static_cast<uInt>(chunk);
  return chunk;
}

// Gives zlib the unused tail of out, doubling out (up to `limit` bytes) when it is full; returns
// the room offered.
uInt make_room(ZStream& z, std::vector<std::byte>& out, size_t produced, size_t limit) {
  if (produced == out.size()) out.resize(std::min(out.size() * 2, limit));
  z->next_out = reinterpret_cast<Bytef*>(out.data() + produced);
  z->avail_out = static_cast<uInt>(std::min(out.size() - produced, kMaxChunk));
  return z->avail_out;
}

}  // namespace

bool is_gzip(std::span<const std::byte> data) {
  return data.size() >= 2 && data[0] == std::byte{0x1f} && data[1] == std::byte{0x8b};
}

std::vector<std::byte> gunzip(std::span<const std::byte> data, const std::string& name, size_t max_bytes) {
  std::vector<std::byte> out;
  // One byte past the limit tells a stream that reaches it exactly from one that goes on.
  const size_t limit = max_bytes == std::numeric_limits<size_t>::max() ? max_bytes : max_bytes + 1;
  try {
    ZStream z(ZStream::Mode::inflate, 0);
    out.resize(std::min(expected_size(data, limit) + 64, limit));  // slack: an exact guess never doubles for the trailer
    size_t pos = 0, produced = 0;
    while (true) {
      const size_t offered = offer(z, data, pos);
      const uInt room = make_room(z, out, produced, limit);
      const int rc = inflate(z.get(), Z_NO_FLUSH);
      pos += offered - z->avail_in;
      produced += room - z->avail_out;
      if (produced > max_bytes)
        throw DataError(name, "the gzip stream inflates to more than " + std::to_string(max_bytes) +
                                  " bytes, the most this data can hold");
      if (rc == Z_STREAM_END) {
        if (pos == data.size()) break;
        if (!is_gzip(data.subspan(pos)))
          throw DataError(name, bytes_left(data.size() - pos) + " of trailing data after the gzip stream");
        inflateReset(z.get());  // another gzip member follows; gzip allows concatenation
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        throw DataError(name, "gzip stream is corrupt (zlib: " + z.message(rc) + ")");
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc == Z_BUF_ERROR && z->avail_out > 0) {  // room to write, yet no progress: input gone
        throw DataError(name, "gzip stream is truncated (the file ends " + std::to_string(data.size()) +
                                  " bytes in, before the stream does)");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw DataError(name, "gzip inflate failed (zlib: " + z.message(rc) + ")");
      }
    }
    out.resize(produced);
  } catch (const std::bad_alloc&) {
    throw DataError(name, "out of memory inflating the gzip stream (" + std::to_string(out.size()) + " bytes reached)");
  }
  return out;
}

std::vector<std::byte> gzip(std::span<const std::byte> data, int level) {
  std::vector<std::byte> out;
  GzipWriter writer(level, [&](std::span<const std::byte> chunk) { out.insert(out.end(), chunk.begin(), chunk.end()); });
  writer.write(data);
  writer.finish();
  return out;
}

struct GzipWriter::Stream {
  explicit Stream(int level) : z(ZStream::Mode::deflate, level) {}
  ZStream z;
};

GzipWriter::GzipWriter(int level, Sink sink)
    : stream_(std::make_unique<Stream>(level)), sink_(std::move(sink)), chunk_(size_t{1} << 20) {}

GzipWriter::~GzipWriter() = default;

void GzipWriter::write(std::span<const std::byte> data) { deflate_all(data, false); }

void GzipWriter::finish() { deflate_all({}, true); }

// Feeds all of data (in pieces zlib can count) and hands on every full or final output chunk.
void GzipWriter::deflate_all(std::span<const std::byte> data, bool last) {
  ZStream& z = stream_->z;
  size_t pos = 0;
  for (;;) {
    const size_t offered = offer(z, data, pos);
    const bool final_piece = last && pos + offered == data.size();
    z->next_out = reinterpret_cast<Bytef*>(chunk_.data());
    z->avail_out = static_cast<uInt>(chunk_.size());
    const int rc = deflate(z.get(), final_piece ? Z_FINISH : Z_NO_FLUSH);
    pos += offered - z->avail_in;
    if (const size_t produced = chunk_.size() - z->avail_out) sink_(std::span(chunk_).first(produced));
    if (rc == Z_STREAM_END) return;
    if (rc != Z_OK && rc != Z_BUF_ERROR) throw std::runtime_error("gzip deflate failed: " + z.message(rc));
    if (!last && pos == data.size() && z->avail_out != 0) return;  // all taken; more input may follow
  }
}

}  // namespace mlph::cosmoflow
