#include "mlph/util/gzip.hpp"

#include <libdeflate.h>

#include <algorithm>
#include <memory>
#include <new>

namespace mlph::gzip {
namespace {

constexpr int kGzipWindowBits = 15 + 16;                        // +16: gzip header and trailer, not a raw zlib stream
constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max();  // zlib counts in 32 bits
constexpr size_t kDeflateMaxRatio = 1032;                       // the most deflate can expand
constexpr size_t kMinMemberBytes = 18;                          // a gzip header and trailer, nothing inflated
constexpr size_t kStreamBytes = size_t{1} << 20;                // Inflater's output piece

// One byte past the bound tells a stream that reaches it exactly from one that goes on.
size_t output_limit(size_t max_bytes) {
  return max_bytes == std::numeric_limits<size_t>::max() ? max_bytes : max_bytes + 1;
}

Error too_large(const std::string& name, size_t max_bytes) {
  return Error(name, "the gzip stream inflates to more than " + std::to_string(max_bytes) +
                         " bytes, the most this data can hold", true);
}

std::string bytes_left(size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// An inflating z_stream, ended however the scope is left.
class ZInflate {
 public:
  ZInflate() {
    const int rc = inflateInit2(&z_, kGzipWindowBits);
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK) throw std::runtime_error("zlib's inflateInit2 failed: " + std::string(z_.msg ? z_.msg : zError(rc)));
  }
  ~ZInflate() { inflateEnd(&z_); }
  ZInflate(const ZInflate&) = delete;
  ZInflate& operator=(const ZInflate&) = delete;
  z_stream* get() { return &z_; }
  z_stream* operator->() { return &z_; }
  std::string message(int rc) const { return z_.msg ? z_.msg : zError(rc); }

 private:
  z_stream z_{};
};

Bytef* bytef(const std::byte* p) { return reinterpret_cast<Bytef*>(const_cast<std::byte*>(p)); }

std::vector<std::byte> inflate_zlib(std::span<const std::byte> data, const std::string& name, size_t max_bytes) {
  const size_t limit = output_limit(max_bytes);
  std::vector<std::byte> out(std::min(first_guess(data, limit) + 64, limit));  // slack: an exact guess never doubles
  ZInflate z;
  size_t pos = 0, produced = 0;
  for (;;) {
    const size_t offered = std::min(data.size() - pos, kMaxChunk);
    z->next_in = bytef(data.data() + pos);
    z->avail_in = static_cast<uInt>(offered);
    if (produced == out.size()) out.resize(std::min(out.size() * 2, limit));
    const auto room = static_cast<uInt>(std::min(out.size() - produced, kMaxChunk));
    z->next_out = bytef(out.data() + produced);
    z->avail_out = room;
    const int rc = ::inflate(z.get(), Z_NO_FLUSH);
    pos += offered - z->avail_in;
    produced += room - z->avail_out;
    if (produced > max_bytes) throw too_large(name, max_bytes);
    if (rc == Z_STREAM_END) {
      if (pos == data.size()) break;
      if (!is_gzip(data.subspan(pos))) throw Error(name, bytes_left(data.size() - pos) + " of trailing data after the gzip stream");
      inflateReset(z.get());  // another member follows; gzip allows concatenation
    } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
      throw Error(name, "gzip stream is corrupt (zlib: " + z.message(rc) + ")");
    } else if (rc == Z_MEM_ERROR) {
      throw std::bad_alloc();
    } else if (rc == Z_BUF_ERROR && z->avail_out > 0) {  // room to write, yet no progress: input gone
      throw Error(name, "gzip stream is truncated (the file ends " + std::to_string(data.size()) +
                            " bytes in, before the stream does)");
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw Error(name, "gzip inflate failed (zlib: " + z.message(rc) + ")");
    }
  }
  out.resize(produced);
  return out;
}

using Decompressor = std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)>;

// Member after member into one buffer; a member that does not fit is inflated again into a buffer
// twice as large (the trailer's size is the last member's alone, so a multi-member file may not fit
// the first guess), up to the bound. A member libdeflate refuses goes to zlib for the message.
std::vector<std::byte> inflate_libdeflate(std::span<const std::byte> data, const std::string& name, size_t max_bytes) {
  if (data.size() < kMinMemberBytes) return inflate_zlib(data, name, max_bytes);
  const Decompressor d(libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  if (!d) throw std::bad_alloc();
  const size_t limit = output_limit(max_bytes);
  std::vector<std::byte> out(std::min(first_guess(data, limit), limit));
  size_t pos = 0, produced = 0;
  while (pos < data.size()) {
    if (pos > 0 && !is_gzip(data.subspan(pos))) return inflate_zlib(data, name, max_bytes);  // zlib names the trailing bytes
    size_t used = 0, made = 0;
    const libdeflate_result r = libdeflate_gzip_decompress_ex(d.get(), data.data() + pos, data.size() - pos,
                                                              out.data() + produced, out.size() - produced, &used, &made);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
      if (out.size() >= limit) throw too_large(name, max_bytes);
      out.resize(std::min(std::max<size_t>(out.size(), 1 << 16) * 2, limit));
      continue;
    }
    if (r != LIBDEFLATE_SUCCESS) return inflate_zlib(data, name, max_bytes);
    pos += used;
    produced += made;
    if (produced > max_bytes) throw too_large(name, max_bytes);
  }
  out.resize(produced);
  return out;
}

}  // namespace

bool is_gzip(std::span<const std::byte> data) {
  return data.size() >= 2 && data[0] == std::byte{0x1f} && data[1] == std::byte{0x8b};
}

uint64_t trailer_size(std::span<const std::byte, 4> t) {
  return std::to_integer<uint64_t>(t[0]) | std::to_integer<uint64_t>(t[1]) << 8 | std::to_integer<uint64_t>(t[2]) << 16 |
         std::to_integer<uint64_t>(t[3]) << 24;
}

size_t first_guess(std::span<const std::byte> data, size_t max_bytes) {
  if (data.size() < kMinMemberBytes) return std::min(4 * data.size(), max_bytes);
  const auto isize = static_cast<size_t>(trailer_size(data.last<4>()));
  return std::min({std::max(isize, data.size()), data.size() * kDeflateMaxRatio, max_bytes});
}

std::vector<std::byte> inflate(std::span<const std::byte> data, const std::string& name, size_t max_bytes,
                               Engine engine) {
  return engine == Engine::libdeflate ? inflate_libdeflate(data, name, max_bytes) : inflate_zlib(data, name, max_bytes);
}

Inflater::Inflater(std::string name) : name_(std::move(name)), out_(kStreamBytes) {
  if (inflateInit2(&z_, kGzipWindowBits) != Z_OK) throw std::bad_alloc();
}

Inflater::~Inflater() { inflateEnd(&z_); }

void Inflater::feed(const std::byte* data, size_t bytes, const std::function<void(const std::byte*, size_t)>& emit) {
  while (bytes > 0) {  // zlib takes uInt lengths
    const auto chunk = static_cast<uInt>(std::min<size_t>(bytes, kMaxChunk));
    z_.next_in = bytef(data);
    z_.avail_in = chunk;
    data += chunk;
    bytes -= chunk;
    // Until the input is used up, and while the output buffer comes back full (more may be pending).
    do {
      if (member_ended_) {  // bytes after a member's end: the next member (or, if not gzip, an error below)
        if (inflateReset(&z_) != Z_OK) throw Error(name_, "cannot inflate: zlib's inflateReset failed");
        member_ended_ = false;
      }
      z_.next_out = bytef(out_.data());
      z_.avail_out = static_cast<uInt>(out_.size());
      const int status = ::inflate(&z_, Z_NO_FLUSH);
      if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR)
        throw Error(name_, "cannot inflate: " + (z_.msg ? std::string(z_.msg) : "zlib error " + std::to_string(status)));
      const size_t produced = out_.size() - z_.avail_out;
      if (status == Z_BUF_ERROR && produced == 0 && z_.avail_in > 0)  // cannot happen (zlib), and must not spin
        throw Error(name_, "cannot inflate: zlib made no progress");
      if (produced > 0) emit(out_.data(), produced);
      member_ended_ = status == Z_STREAM_END;
    } while (z_.avail_in > 0 || (!member_ended_ && z_.avail_out == 0));
  }
}

void Inflater::finish() const {
  if (!member_ended_) throw Error(name_, "cannot inflate: truncated (the gzip stream ends early)");
}

}  // namespace mlph::gzip
