#include "gunzip.hpp"

#include <algorithm>
#include <limits>

#include "mlph/sdk/error.hpp"

namespace mlph::stage {

namespace {
constexpr int kGzipOnly = 15 + 16;        // windowBits: the largest window, gzip header and trailer
constexpr size_t kOutputBytes = 1 << 20;  // inflated bytes per emit
}  // namespace

Gunzip::Gunzip(std::string source) : source_(std::move(source)), out_(kOutputBytes) {
  if (inflateInit2(&z_, kGzipOnly) != Z_OK) sdk::fail(MLPH_RESOURCE_EXHAUSTED, source_ + ": cannot start zlib's inflate");
}

Gunzip::~Gunzip() { inflateEnd(&z_); }

void Gunzip::feed(const char* data, size_t bytes, const std::function<void(const char*, size_t)>& emit) {
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(bytes, std::numeric_limits<uInt>::max()));
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z_.avail_in = chunk;
    data += chunk;
    bytes -= chunk;
    // Until the input is used up, and while the output buffer comes back full (more may be pending).
    do {
      if (member_ended_) {  // bytes after a member's end: the next member (or, if not gzip, an error below)
        if (inflateReset(&z_) != Z_OK) sdk::fail(MLPH_INTERNAL, source_ + ": cannot inflate: zlib's inflateReset failed");
        member_ended_ = false;
      }
      z_.next_out = reinterpret_cast<Bytef*>(out_.data());
      z_.avail_out = static_cast<uInt>(out_.size());
      const int status = inflate(&z_, Z_NO_FLUSH);
      if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR)
        sdk::fail(MLPH_DATA_LOSS, source_ + ": cannot inflate: " +
                                      (z_.msg ? z_.msg : "zlib error " + std::to_string(status)));
      const size_t produced = out_.size() - z_.avail_out;
      if (status == Z_BUF_ERROR && produced == 0 && z_.avail_in > 0)  // cannot happen (zlib), and must not spin
        sdk::fail(MLPH_INTERNAL, source_ + ": cannot inflate: zlib made no progress");
      if (produced > 0) emit(out_.data(), produced);
      member_ended_ = status == Z_STREAM_END;
    } while (z_.avail_in > 0 || (!member_ended_ && z_.avail_out == 0));
  }
}

void Gunzip::finish() const {
  if (!member_ended_) sdk::fail(MLPH_DATA_LOSS, source_ + ": cannot inflate: truncated (the gzip stream ends early)");
}

}  // namespace mlph::stage
