// mlph-pack-data: packs a dataset directory for storage/stage (format in manifest.hpp).
//   mlph-pack-data SOURCE OUT [--parts K] [--level L]
// Every subdirectory of SOURCE (train/, validation/) becomes OUT/<split>/ with K tar.zst parts and
// a manifest of sizes and CRC-32s; --parts 0 copies the files plainly and adds only the manifest.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "manifest.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 3 || (argc - 3) % 2 != 0) {
    std::fprintf(stderr, "usage: mlph-pack-data SOURCE OUT [--parts K (default 16)] [--level L (zstd, default 3)]\n");
    return 2;
  }
  unsigned long parts = 16;
  int level = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    char* end = nullptr;
    const long value = std::strtol(argv[i + 1], &end, 10);
    if (*end != '\0' || value < 0 || (flag != "--parts" && flag != "--level")) {
      std::fprintf(stderr, "mlph-pack-data: bad option %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
    if (flag == "--parts") parts = static_cast<unsigned long>(value);
    else level = static_cast<int>(value);
  }
  try {
    const fs::path source = argv[1], out = argv[2];
    size_t splits = 0;
    for (const auto& item : fs::directory_iterator(source)) {
      if (!item.is_directory()) continue;
      const size_t files = mlph::stage::pack_split(item.path(), out / item.path().filename(), static_cast<uint32_t>(parts), level);
      std::printf("%s: %zu files in %lu part(s)\n", (out / item.path().filename()).c_str(), files, parts);
      ++splits;
    }
    if (splits == 0) throw std::runtime_error(source.string() + ": no subdirectories (train/, validation/) to pack");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlph-pack-data: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
