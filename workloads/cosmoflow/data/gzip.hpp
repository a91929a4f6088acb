// GZIP as the CosmoFlow v1.0+ data uses it: the whole TFRecord file is one gzip stream.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlph/util/gzip.hpp"

namespace mlph::cosmoflow {

// True when data starts with the gzip magic bytes 1f 8b.
bool is_gzip(std::span<const std::byte> data);

// Inflates a gzip file (one stream, or several concatenated members as gzip allows) with the
// plug-ins' shared inflater (plugins/util: libdeflate, or zlib to compare). Throws DataError naming
// `name` for a corrupt or truncated stream, for trailing bytes that are no gzip, and for a stream
// that inflates to more than max_bytes (a few bytes can inflate to gigabytes: the caller bounds it
// by what its data can be), before allocating more than that.
std::vector<std::byte> gunzip(std::span<const std::byte> data, const std::string& name,
                              size_t max_bytes = std::numeric_limits<size_t>::max(),
                              gzip::Engine engine = gzip::Engine::libdeflate);

// One gzip stream of data; level 0 (store) .. 9 (smallest), -1 for zlib's default (6).
std::vector<std::byte> gzip(std::span<const std::byte> data, int level = -1);

// One gzip stream deflated piece by piece: the compressed bytes go to `sink` in chunks of up to
// 1 MiB as they come, so neither the input nor the output needs to be in memory whole.
class GzipWriter {
 public:
  using Sink = std::function<void(std::span<const std::byte>)>;
  GzipWriter(int level, Sink sink);
  ~GzipWriter();
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;
  void write(std::span<const std::byte> data);
  void finish();  // ends the stream; write no more

 private:
  void deflate_all(std::span<const std::byte> data, bool last);
  struct Stream;
  std::unique_ptr<Stream> stream_;
  Sink sink_;
  std::vector<std::byte> chunk_;
};

}  // namespace mlph::cosmoflow
