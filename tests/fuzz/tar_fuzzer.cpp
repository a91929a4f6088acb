// storage/stage's packed parts (tar.zst, or plain tar so that mutations reach the tar reader) as
// the stager unpacks them: every entry checked against the manifest before a byte is written, the
// data streamed into files of a temporary directory (emptied after each input, removed at exit)
// and verified. Nothing may be written outside that directory, nor past an entry's listed size.
#include <archive.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz.hpp"
#include "manifest.hpp"
#include "mlph/sdk/util/error.hpp"

namespace fs = std::filesystem;
using namespace mlph::stage;

namespace {

// The manifest of the seed corpus, as make_pack_corpus.sh prints it.
constexpr const char* kManifest =
    "mlph-manifest 1 parts 1\n"
    "6 9f606eec a.bin\n"
    "0 00000000 b.bin\n"
    "300 c054b7f4 c.bin\n";

// A directory of this process's own, removed at exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string name = (fs::temp_directory_path() / "mlph-tar-fuzz.XXXXXX").string();
    if (!::mkdtemp(name.data())) std::abort();
    path = name;
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Manifest manifest = parse_manifest(kManifest, "kManifest");
  static const TempDir dir;
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  archive_read_support_filter_zstd(a.get());
  archive_read_support_format_tar(a.get());
  if (archive_read_open_memory(a.get(), data, size) == ARCHIVE_OK) {
    std::vector<char> found(manifest.entries.size());
    mlph::fuzz::refusing<mlph::sdk::Error>([&] {
      unpack_part(
          a.get(), "fuzz.tar.zst", manifest.entries, manifest.parts, 0, [](size_t) { return true; },
          [&](size_t i) { return std::make_unique<OutputFile>(dir.path / manifest.entries[i].name); }, [](uint64_t) {}, found);
    });
  }
  // Only files the manifest names, none longer than it says.
  for (const auto& file : fs::directory_iterator(dir.path)) {
    bool listed = false;
    for (const ManifestEntry& e : manifest.entries)
      listed = listed || (file.path().filename() == e.name && file.file_size() <= e.size);
    if (!listed) std::abort();
    fs::remove(file.path());
  }
  return 0;
}
