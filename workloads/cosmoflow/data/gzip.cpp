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

// Owns a z_stream for deflating, ending it however the scope is left.
class ZStream {
 public:
  explicit ZStream(int level) {
    const int rc = deflateInit2(&z_, level, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY);
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK) throw std::invalid_argument("zlib init failed: " + std::string(z_.msg ? z_.msg : zError(rc)));
  }
  ~ZStream() { deflateEnd(&z_); }
  ZStream(const ZStream&) = delete;
  ZStream& operator=(const ZStream&) = delete;
  z_stream* operator->() { return &z_; }
  z_stream* get() { return &z_; }
  std::string message(int rc) const { return z_.msg ? z_.msg : zError(rc); }

 private:
  z_stream z_{};
};

Bytef* in_ptr(const std::byte* p) { return reinterpret_cast<Bytef*>(const_cast<std::byte*>(p)); }

// Offers zlib the input from pos on, in a chunk it can count; returns the size offered.
size_t offer(ZStream& z, std::span<const std::byte> data, size_t pos) {
  const size_t chunk = std::min(data.size() - pos, kMaxChunk);
  z->next_in = in_ptr(data.data() + pos);
  z->avail_in = static_cast<uInt>(chunk);
  return chunk;
}

}  // namespace

bool is_gzip(std::span<const std::byte> data) { return gzip::is_gzip(data); }

std::vector<std::byte> gunzip(std::span<const std::byte> data, const std::string& name, size_t max_bytes,
                              gzip::Engine engine) {
  try {
    return gzip::inflate(data, name, max_bytes, engine);
  } catch (const gzip::Error& e) {
    throw DataError(e.name(), e.problem());
  } catch (const std::bad_alloc&) {
    throw DataError(name, "out of memory inflating the gzip stream");
  }
}

std::vector<std::byte> gzip(std::span<const std::byte> data, int level) {
  std::vector<std::byte> out;
  GzipWriter writer(level, [&](std::span<const std::byte> chunk) { out.insert(out.end(), chunk.begin(), chunk.end()); });
  writer.write(data);
  writer.finish();
  return out;
}

struct GzipWriter::Stream {
  explicit Stream(int level) : z(level) {}
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
