// storage/stage's pack manifests (MANIFEST.mlph): the parser on anything. What it accepts must hold
// what the stager relies on: plain file names, sorted and unique, and it must read back the same.
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz.hpp"
#include "manifest.hpp"
#include "mlph/sdk/util/error.hpp"

using namespace mlph::stage;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mlph::fuzz::refusing<mlph::sdk::Error>([&] {
    const Manifest m = parse_manifest(text, "fuzz.mlph");
    for (size_t i = 0; i < m.entries.size(); ++i) {
      const std::string& name = m.entries[i].name;
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) std::abort();
      if (i > 0 && !(m.entries[i - 1].name < name)) std::abort();
    }
    // What is accepted reads back as itself once written in the canonical form.
    std::string canonical = "mlph-manifest 1 parts " + std::to_string(m.parts) + "\n";
    char crc[16];
    for (const ManifestEntry& e : m.entries) {
      std::snprintf(crc, sizeof crc, "%08x", e.crc32);
      canonical += std::to_string(e.size) + " " + crc + " " + e.name + "\n";
    }
    const Manifest again = parse_manifest(canonical, "canonical");
    if (again.parts != m.parts || again.entries.size() != m.entries.size()) std::abort();
    for (size_t i = 0; i < m.entries.size(); ++i)
      if (again.entries[i].name != m.entries[i].name || again.entries[i].size != m.entries[i].size ||
          again.entries[i].crc32 != m.entries[i].crc32)
        std::abort();
  });
  return 0;
}
