// A split of a DeepCAM dataset on disk (<dir>/train or <dir>/validation, every *.h5 file), read
// through the storage plug-in and decoded from memory here.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/hdf5_io.hpp"
#include "mlph/sdk/workload/workload.hpp"
#include "settings.hpp"

namespace mlph::deepcam {

// Where the files of a split keep their arrays (SampleLayout), found by whichever reader first
// decodes a file whole and shared by the datasets the run's readers open: each file's layout is
// found once.
class LayoutCache {
 public:
  std::optional<SampleLayout> find(const std::string& path) const;
  void keep(const std::string& path, const std::optional<SampleLayout>& layout);

 private:
  mutable std::mutex mutex_;
  std::map<std::string, SampleLayout> layouts_;
};

class DeepCamDataset final : public sdk::Dataset {
 public:
  // Lists the split's files: sorted by name, and for training in the reference's order (shuffled
  // once with numpy's RandomState(12345)). data.train_samples / valid_samples keep the first N.
  // `layouts`: shared with the split's other readers (null: this dataset's own).
  DeepCamDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
                 const MLPH_StorageHandle& storage, std::shared_ptr<LayoutCache> layouts = nullptr);
  uint64_t size() override { return files_.size(); }
  void read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) override;
  const std::vector<std::string>& files() const { return files_; }

 private:
  const MLPH_HostApi* host_;
  DataSettings settings_;
  MLPH_StorageHandle storage_;
  std::vector<std::string> files_;  // index i is sample i
  void read_sample(size_t index, const SampleView& row);
  RangeReader range_reader(const std::string& path) const;

  std::vector<std::byte> file_bytes_;  // the file being decoded, its memory kept from one sample to the next
  std::shared_ptr<LayoutCache> layouts_;
  std::vector<std::byte> scratch_;  // labels read in place
};

}  // namespace mlph::deepcam
