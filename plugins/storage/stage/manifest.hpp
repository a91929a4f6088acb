// The packed-dataset format of storage/stage, shared by the plug-in and mlph-pack-data.
//
// A dataset directory holds one subdirectory per split (train/, validation/). A split is either
// plain files, or packed:
//   <split>/MANIFEST.mlph           "mlph-manifest 1 parts K", then one "size crc32 name" line per
//                                   file, sorted by name (crc32 in hex, zlib's CRC-32)
//   <split>/part-00000.tar.zst ...  K tar archives compressed with zstd; file number i of the
//                                   manifest is in part i % K
// A rank of `size` that stages files[rank::size] then reads only the parts p with p % size == rank
// when size divides K. A plain split may carry a manifest too (parts 0): its checksums are verified.
//
// Manifests and archives are untrusted input: every number is parsed into its type with a range
// check, names are plain file names, and no byte count from a file is believed before it is
// checked (an entry is never written past the size its manifest states). Errors are
// mlph::sdk::Error naming the file (and line or entry); malformed or mismatching data is
// MLPH_DATA_LOSS.
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "files.hpp"

struct archive;

namespace mlph::stage {

inline constexpr const char* kManifestName = "MANIFEST.mlph";
// A manifest line takes about 60 bytes: this is ample for tens of millions of files.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

// The whole of `text` as a T: digits only (no sign, space or prefix) and within T's range.
template <class T>
std::optional<T> parse_integer(std::string_view text, int base = 10) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || text.front() == '-' || error != std::errc() || end != text.data() + text.size()) return {};
  return value;
}

struct ManifestEntry {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  uint32_t parts = 0;  // 0: the files lie beside the manifest, unpacked
  std::vector<ManifestEntry> entries;  // sorted by name
};

// A manifest's text, `where` naming it in errors ("file:line: ...").
Manifest parse_manifest(std::string_view text, const std::string& where);
// The manifest in `file`: a regular file of at most kMaxManifestBytes.
Manifest read_manifest(const std::filesystem::path& file);
void write_manifest(const std::filesystem::path& file, const Manifest& manifest);

std::string part_name(uint32_t part);  // "part-00007.tar.zst"

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);  // start with crc = 0

// zstd's compression levels.
inline constexpr int kMinLevel = 1, kMaxLevel = 22;

// Packs every regular file of `split_dir` into `out_dir` (created) as `parts` archives plus a
// manifest (parts 0: plain copies plus a manifest). No part is left empty: with fewer files than
// `parts`, each file gets a part of its own. `level` is zstd's compression level.
struct Packed {
  size_t files = 0;
  uint32_t parts = 0;  // as written
};
Packed pack_split(const std::filesystem::path& split_dir, const std::filesystem::path& out_dir, uint32_t parts,
                  int level);

// Whether `bytes` and `crc` (when `check_crc`) are what `entry` states; else MLPH_DATA_LOSS naming `where`.
void verify(const std::string& where, const ManifestEntry& entry, uint64_t bytes, uint32_t crc, bool check_crc);

// Unpacks part `part` of a packed split from `a` (opened by the caller for reading tar.zst; `where`
// names it in errors) whose manifest lists `entries` in `parts` parts. Every entry of the archive
// must be a regular file listed in this part, and appear once; its header must state the listed
// size. Those that `keep(i)` wants (i: index into `entries`) are written to `create(i)`, never
// more bytes than listed, and verified (size, CRC-32, of the bytes in the archive); each sets found[i] and calls `progress`
// with the bytes written. Returns the archive bytes read.
uint64_t unpack_part(archive* a, const std::string& where, const std::vector<ManifestEntry>& entries, uint32_t parts,
                     uint32_t part, const std::function<bool(size_t)>& keep,
                     const std::function<std::unique_ptr<Sink>(size_t)>& create, const std::function<void(uint64_t)>& progress,
                     std::vector<char>& found);

}  // namespace mlph::stage
