// mlph-pack-data: packs a dataset directory for storage/stage (format in manifest.hpp).
//   mlph-pack-data SOURCE OUT [--parts K] [--level L]
// Every subdirectory of SOURCE (train/, validation/) becomes OUT/<split>/ with K tar.zst parts and
// a manifest of sizes and CRC-32s; --parts 0 copies the files plainly and adds only the manifest.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <string>

#include "manifest.hpp"

namespace fs = std::filesystem;
using mlph::stage::parse_integer;

namespace {

// `text` as a T from `low` to `high`, or a one-line error naming the option.
template <class T>
bool parse_option(const char* flag, const char* text, T low, T high, T& out) {
  const auto value = parse_integer<T>(text);
  if (value && *value >= low && *value <= high) {
    out = *value;
    return true;
  }
  std::fprintf(stderr, "mlph-pack-data: %s %s: expected a whole number from %lld to %lld\n", flag, text,
               static_cast<long long>(low), static_cast<long long>(high));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (argc - 3) % 2 != 0) {
    std::fprintf(stderr, "usage: mlph-pack-data SOURCE OUT [--parts K (default 16)] [--level L (zstd, default 3)]\n");
    return 2;
  }
  uint32_t parts = 16;
  int level = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    bool ok = false;
    if (flag == "--parts")
      ok = parse_option(argv[i], argv[i + 1], uint32_t{0}, std::numeric_limits<uint32_t>::max(), parts);
    else if (flag == "--level")
      ok = parse_option(argv[i], argv[i + 1], mlph::stage::kMinLevel, mlph::stage::kMaxLevel, level);
    else
      std::fprintf(stderr, "mlph-pack-data: unknown option %s (see the usage)\n", argv[i]);
    if (!ok) return 2;
  }
  try {
    const fs::path source = argv[1], out = argv[2];
    size_t splits = 0;
    for (const auto& item : fs::directory_iterator(source)) {
      if (!item.is_directory()) continue;
      const fs::path split = out / item.path().filename();
      const mlph::stage::Packed packed = mlph::stage::pack_split(item.path(), split, parts, level);
      if (packed.parts == 0)
        std::printf("%s: %zu files, copied plainly with a manifest\n", split.c_str(), packed.files);
      else
        std::printf("%s: %zu files in %u part(s)\n", split.c_str(), packed.files, packed.parts);
      ++splits;
    }
    if (splits == 0) throw std::runtime_error(source.string() + ": no subdirectories (train/, validation/) to pack");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlph-pack-data: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
