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
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace mlph::stage {

inline constexpr const char* kManifestName = "MANIFEST.mlph";

struct ManifestEntry {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  uint32_t parts = 0;  // 0: the files lie beside the manifest, unpacked
  std::vector<ManifestEntry> entries;  // sorted by name
};

// Throws std::runtime_error naming the file and line on a malformed manifest.
Manifest read_manifest(const std::filesystem::path& file);
void write_manifest(const std::filesystem::path& file, const Manifest& manifest);

std::string part_name(uint32_t part);  // "part-00007.tar.zst"

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);  // start with crc = 0

// Packs every regular file of `split_dir` into `out_dir` (created) as `parts` archives plus a
// manifest (parts 0: plain copies plus a manifest). Returns the number of files. `level` is zstd's
// compression level.
size_t pack_split(const std::filesystem::path& split_dir, const std::filesystem::path& out_dir, uint32_t parts,
                  int level);

}  // namespace mlph::stage
