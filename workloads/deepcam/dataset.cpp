#include "dataset.hpp"


#include "data/file_order.hpp"
#include "data/hdf5_io.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/storage/storage.hpp"

namespace mlph::deepcam {
using sdk::fail;

std::optional<SampleLayout> LayoutCache::find(const std::string& path) const {
  std::lock_guard lock(mutex_);
  const auto it = layouts_.find(path);
  return it == layouts_.end() ? std::nullopt : std::optional(it->second);
}

void LayoutCache::keep(const std::string& path, const std::optional<SampleLayout>& layout) {
  std::lock_guard lock(mutex_);
  if (layout)
    layouts_[path] = *layout;
  else
    layouts_.erase(path);
}

DeepCamDataset::DeepCamDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
                               const MLPH_StorageHandle& storage, std::shared_ptr<LayoutCache> layouts)
    : host_(host), settings_(settings), storage_(storage),
      layouts_(layouts ? std::move(layouts) : std::make_shared<LayoutCache>()) {
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

// Straight into the batch's row: a file whose layout is known (found while it was read whole, the
// first time) read at its arrays' offsets from the page cache into the row (one copy); otherwise
// the whole file through one buffer kept from sample to sample, decoded by HDF5 into the row.
void DeepCamDataset::read_sample(size_t index, const SampleView& row) {
  const std::string& path = files_[index];
  try {
    std::optional<SampleLayout> layout = layouts_->find(path);
    if (layout && sdk::has_read_range(storage_.api) &&
        read_sample_in_place(range_reader(path), *layout, path, settings_.height, settings_.width, settings_.channels,
                             row, scratch_))
      return;
    sdk::read_file(host_, storage_, path, "DeepCAM data",
                   max_sample_file_bytes(settings_.height, settings_.width, settings_.channels), file_bytes_);
    decode_sample(file_bytes_, path, settings_.height, settings_.width, settings_.channels, row, layout);
    layouts_->keep(path, layout);
  } catch (const DataError& e) {
    fail(MLPH_DATA_LOSS, e.what());
  }
}

// Ranges through the storage's read_range; any failure reads as "the file ends sooner": the file is
// then read whole, whose read says what went wrong.
RangeReader DeepCamDataset::range_reader(const std::string& path) const {
  return [this, &path](uint64_t offset, std::span<std::byte> into) {
    MLPH_Error* error = storage_.api->read_range(storage_.storage, path.c_str(), offset, into.size(), into.data());
    if (!error) return true;
    host_->error_free(error);
    return false;
  };
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
    read_sample(static_cast<size_t>(indices[i]), {{x + i * values, values}, {labels + i * pixels, pixels}});
  }
}

}  // namespace mlph::deepcam
