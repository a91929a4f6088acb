// A checkpoint as --resume and mlph-export read it: the input is manifest.json, then a line
// "--tensors.bin--", then tensors.bin (without that line: the manifest alone, no tensors). Both go
// into a checkpoint directory of this process's own; the reader checks the manifest (bounded YAML,
// names, shapes, sizes, offsets) and every tensor's CRC32. What it accepts goes on as mlph-export
// takes it: every float32 parameter read and exported, in CosmoFlow's and DeepCAM's reference
// layouts, into an .npz in that directory. Bad input must end in CheckpointError (the reader) or
// std::runtime_error naming the parameter (the export: a name or shape its workload does not know).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "cosmoflow/export.hpp"
#include "deepcam/export.hpp"
#include "fuzz.hpp"
#include "mlph/core/checkpoint_file.hpp"
#include "mlph/core/export.hpp"
#include "mlph/sdk/workload/workload.hpp"

namespace fs = std::filesystem;
using namespace mlph;

namespace {

constexpr std::string_view kSeparator = "\n--tensors.bin--\n";

// A directory of this process's own, removed at exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string name = (fs::temp_directory_path() / "mlph-checkpoint-fuzz.XXXXXX").string();
    if (!::mkdtemp(name.data())) std::abort();
    path = name;
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& file, std::string_view bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct CosmoFlow {
  static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& p) { return cosmoflow::reference_layout(p); }
};
struct DeepCam {
  static std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& p) { return deepcam::reference_layout(p); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempDir dir;
  static const fs::path checkpoint = dir.path / "epoch-000001";
  static const bool made = fs::create_directories(checkpoint);
  (void)made;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kSeparator);
  write(checkpoint / "manifest.json", input.substr(0, split));
  write(checkpoint / "tensors.bin", split == std::string_view::npos ? "" : input.substr(split + kSeparator.size()));
  fuzz::refusing<core::CheckpointError>([&] {
    const core::CheckpointReader reader(dir.path / "epoch-000001");
    std::vector<core::ParameterValues> params;
    for (const core::TensorRecord& t : reader.manifest().tensors) {
      const std::vector<std::byte> bytes = reader.read(t);
      if (!t.slot.empty() || t.dtype != MLPH_DTYPE_F32) continue;  // as mlph-export: optimizer state stays behind
      core::ParameterValues p{t.name, t.shape, std::vector<float>(bytes.size() / sizeof(float))};
      std::memcpy(p.data.data(), bytes.data(), bytes.size());
      params.push_back(std::move(p));
    }
    for (const auto layout : {sdk::reference_layout_entry<CosmoFlow>(), sdk::reference_layout_entry<DeepCam>()})
      fuzz::refusing<std::runtime_error>(
          [&] { core::export_weights(layout, params, reader.manifest().state.micro_batches, core::AtomicFile(dir.path / "w.npz")); });
  });
  return 0;
}
