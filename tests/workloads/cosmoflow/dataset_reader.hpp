// A tiny CosmoFlow dataset written in a format and read through storage/posix (or a copy of its table
// without read_range), for the tests of the dataset's reads.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "data/synthetic.hpp"
#include "dataset.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::cosmoflow::test {
namespace fs = std::filesystem;

// A tiny dataset (8^3) in a format, read through storage/posix, or through a copy of its table
// without read_range (whole files only).
class Reader {
 public:
  Reader(const fs::path& dir, Format format, bool ranges, bool cache = false,
         std::shared_ptr<SampleCache> kept = nullptr)
      : plugin_(core::PluginLoader::load_file(std::string(MLPH_PLUGIN_DIR) + "/libmlph-storage-posix.so",
                                              MLPH_KIND_STORAGE, "posix")) {
    write_dataset(dir.string(), 2, 1, kEdge, format, 3);
    table_ = *plugin_.api<MLPH_StorageApi>();
    if (!ranges) table_.read_range = nullptr;
    core::check(table_.create(core::host_api(), nullptr, 0, &storage_), "storage");
    DataSettings data;
    data.dir = dir.string();
    data.format = format == Format::npy ? "npy" : "tfrecord";
    data.edge = kEdge;
    data.cache = cache;
    dataset_ = std::make_unique<CosmoDataset>(core::host_api(), data, MLPH_SPLIT_TRAIN,
                                              MLPH_StorageHandle{sizeof(MLPH_StorageHandle), nullptr, &table_, storage_},
                                              std::move(kept));
  }
  ~Reader() {
    dataset_.reset();
    table_.destroy(storage_);
  }
  CosmoDataset& dataset() { return *dataset_; }
  uint64_t bytes_read() {
    MLPH_IoStats stats{};
    stats.struct_size = sizeof stats;
    core::check(table_.stats(storage_, &stats), "stats");
    return stats.bytes_read;
  }
  static constexpr int64_t kEdge = 8;

 private:
  core::LoadedPlugin plugin_;
  MLPH_StorageApi table_{};
  MLPH_Storage* storage_ = nullptr;
  std::unique_ptr<CosmoDataset> dataset_;
};

// Samples 1 and 0, whole or the part at `at` of `size` voxels (their targets into `targets`).
inline std::vector<int16_t> read(CosmoDataset& d, sdk::spatial::Dims at = {}, sdk::spatial::Dims size = {8, 8, 8},
                                 std::vector<float>* targets = nullptr) {
  const uint64_t indices[2] = {1, 0};
  const int64_t x_shape[5] = {2, size[0], size[1], size[2], 4}, y_shape[2] = {2, 4};
  std::vector<int16_t> x(static_cast<size_t>(2 * size[0] * size[1] * size[2] * 4));
  std::vector<float> y(8);
  MLPH_Tensor inputs[2] = {sdk::host_tensor(MLPH_DTYPE_I16, x_shape, 5, x.data()),
                           sdk::host_tensor(MLPH_DTYPE_F32, y_shape, 2, y.data())};
  if (at.empty()) {
    d.read(indices, 2, inputs, 2);
  } else {
    int64_t offsets[2 * MLPH_MAX_DIMS] = {};
    for (size_t k = 0; k < 3; ++k) offsets[k + 1] = at[k];
    d.read_part(indices, 2, inputs, 2, MLPH_SamplePart{sizeof(MLPH_SamplePart), nullptr, offsets, 2});
  }
  if (targets) *targets = y;
  return x;
}

}  // namespace mlph::cosmoflow::test
