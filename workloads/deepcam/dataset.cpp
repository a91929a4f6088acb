#include "dataset.hpp"


#include "data/file_order.hpp"
#include "data/hdf5_io.hpp"
#include "mlph/sdk/storage.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::deepcam {
using sdk::fail;

DeepCamDataset::DeepCamDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
                               const MLPH_StorageHandle& storage)
    : host_(host), settings_(settings), storage_(storage) {
  const std::string dir = sdk::split_directory(settings_.dir, split);
  std::vector<std::string> sorted = sdk::list_files(host_, storage_, dir, ".h5", "DeepCAM data");
  if (sorted.empty()) fail(MLPH_NOT_FOUND, dir + ": no *.h5 files");
  if (split == MLPH_SPLIT_TRAIN) {
    for (uint64_t i : numpy_shuffled_indices(sorted.size())) files_.push_back(sorted[i]);
  } else {
    files_ = std::move(sorted);
  }
  const uint64_t limit = split == MLPH_SPLIT_TRAIN ? settings_.train_samples : settings_.valid_samples;
  if (limit > 0 && limit < files_.size()) files_.resize(limit);
}

void DeepCamDataset::read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) {
  const auto pixels = static_cast<size_t>(settings_.height) * static_cast<size_t>(settings_.width);
  const size_t values = pixels * static_cast<size_t>(settings_.channels);
  if (n_inputs != 2 || inputs[0].dtype != MLPH_DTYPE_F32 || static_cast<size_t>(sdk::numel(inputs[0])) != n * values ||
      inputs[1].dtype != MLPH_DTYPE_I32 || static_cast<size_t>(sdk::numel(inputs[1])) != n * pixels)
    fail(MLPH_INVALID_ARGUMENT, "DeepCAM read: the input tensors do not match a batch of " + std::to_string(n));
  auto* x = static_cast<float*>(inputs[0].data);
  auto* labels = static_cast<int32_t*>(inputs[1].data);
  for (size_t i = 0; i < n; ++i) {
    if (indices[i] >= files_.size())
      fail(MLPH_OUT_OF_RANGE, "sample " + std::to_string(indices[i]) + " of a dataset of " + std::to_string(files_.size()));
    const std::string& path = files_[indices[i]];
    sdk::read_file(host_, storage_, path, "DeepCAM data",
                   max_sample_file_bytes(settings_.height, settings_.width, settings_.channels), file_bytes_);
    try {  // straight into the batch's row
      decode_sample(file_bytes_, path, settings_.height, settings_.width, settings_.channels,
                    {{x + i * values, values}, {labels + i * pixels, pixels}});
    } catch (const DataError& e) {
      fail(MLPH_DATA_LOSS, e.what());
    }
  }
}

}  // namespace mlph::deepcam
