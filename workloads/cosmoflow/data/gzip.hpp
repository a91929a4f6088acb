// GZIP as the CosmoFlow v1.0+ data uses it: the whole TFRecord file is one gzip stream.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace mlph::cosmoflow {

// True when data starts with the gzip magic bytes 1f 8b.
bool is_gzip(std::span<const std::byte> data);

// Inflates a gzip file (one stream, or several concatenated members as gzip allows). Throws
// DataError naming `name` for a corrupt or truncated stream or for trailing bytes that are no gzip.
std::vector<std::byte> gunzip(std::span<const std::byte> data, const std::string& name);

// One gzip stream of data; level 0 (store) .. 9 (smallest), -1 for zlib's default (6).
std::vector<std::byte> gzip(std::span<const std::byte> data, int level = -1);

}  // namespace mlph::cosmoflow
