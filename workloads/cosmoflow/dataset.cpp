#include "dataset.hpp"

#include <cstring>

#include "data/npy.hpp"
#include "data/tfrecord.hpp"
#include "mlph/sdk/storage.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::cosmoflow {
using sdk::fail;

CosmoDataset::CosmoDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
                           const MLPH_StorageHandle& storage)
    : host_(host), settings_(settings), storage_(storage) {
  const std::string dir = sdk::split_directory(settings_.dir, split);
  const bool npy = settings_.format == "npy";
  files_ = sdk::list_files(host_, storage_, dir, npy ? "_data.npy" : ".tfrecord", "CosmoFlow data");
  if (files_.empty())
    fail(MLPH_NOT_FOUND, dir + ": no " + (npy ? "*_data.npy" : "*.tfrecord") + " files (data.format is " +
                             settings_.format + ")");
  const uint64_t limit = split == MLPH_SPLIT_TRAIN ? settings_.train_samples : settings_.valid_samples;
  const uint64_t per_file = npy ? 1 : static_cast<uint64_t>(settings_.records_per_file);
  samples_ = files_.size() * per_file;
  if (limit > 0 && limit < samples_) samples_ = limit;  // the reference takes sorted(files)[:n]
}

std::vector<std::byte> CosmoDataset::read_file(const std::string& path, size_t max_bytes) const {
  return sdk::read_file(host_, storage_, path, "CosmoFlow data", max_bytes);
}

std::vector<CosmoDataset::Decoded> CosmoDataset::decode_file(size_t file_index) const {
  const std::string& path = files_[file_index];
  std::vector<Decoded> out;
  try {
    if (settings_.format == "npy") {
      const std::vector<std::byte> data = read_file(path, max_npy_bytes(volume_bytes(settings_.edge)));
      const std::vector<std::byte> label = read_file(npy_label_path(path), max_npy_bytes(kTargets * sizeof(float)));
      Sample s = read_npy_sample(data, label, path, settings_.edge);
      out.push_back({std::move(s.x), s.y});
    } else {
      const std::vector<std::byte> file =
          read_file(path, max_tfrecord_file_bytes(settings_.edge, settings_.records_per_file));
      for (Sample& s : read_tfrecord_samples(file, path, settings_.edge, settings_.records_per_file))
        out.push_back({std::move(s.x), s.y});
      if (out.size() != static_cast<size_t>(settings_.records_per_file))
        fail(MLPH_INVALID_ARGUMENT, path + ": holds " + std::to_string(out.size()) + " records, but data.records_per_file is " +
                                        std::to_string(settings_.records_per_file));
    }
  } catch (const DataError& e) {
    fail(MLPH_DATA_LOSS, e.what());
  }
  return out;
}

const CosmoDataset::Decoded& CosmoDataset::sample(uint64_t index) {
  if (auto it = cache_.find(index); it != cache_.end()) return it->second;
  const uint64_t per_file = settings_.format == "npy" ? 1 : static_cast<uint64_t>(settings_.records_per_file);
  const size_t file = static_cast<size_t>(index / per_file);
  if (last_file_.first != file) last_file_ = {file, decode_file(file)};
  Decoded& decoded = last_file_.second[index % per_file];
  if (!settings_.cache) return decoded;
  return cache_.emplace(index, decoded).first->second;
}

void CosmoDataset::read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) {
  if (n_inputs != 2) fail(MLPH_INVALID_ARGUMENT, "CosmoFlow reads two inputs (x, y), got " + std::to_string(n_inputs));
  const size_t volume = static_cast<size_t>(settings_.edge) * settings_.edge * settings_.edge * 4;
  if (inputs[0].dtype != MLPH_DTYPE_I16 || static_cast<size_t>(sdk::numel(inputs[0])) != n * volume ||
      inputs[1].dtype != MLPH_DTYPE_F32 || sdk::numel(inputs[1]) != static_cast<int64_t>(n * 4))
    fail(MLPH_INVALID_ARGUMENT, "CosmoFlow read: input tensors do not match the batch of " + std::to_string(n));
  auto* x = static_cast<int16_t*>(inputs[0].data);
  auto* y = static_cast<float*>(inputs[1].data);
  for (size_t i = 0; i < n; ++i) {
    if (indices[i] >= samples_)
      fail(MLPH_OUT_OF_RANGE, "sample " + std::to_string(indices[i]) + " of a dataset of " + std::to_string(samples_));
    const Decoded& s = sample(indices[i]);
    std::memcpy(x + i * volume, s.x.data(), volume * sizeof(int16_t));
    std::memcpy(y + i * 4, s.y.data(), 4 * sizeof(float));
  }
}

}  // namespace mlph::cosmoflow
