// A split of a CosmoFlow dataset on disk, read through the storage plug-in and decoded here
// (TFRecord plain/GZIP with CRC checks, or the npy layout): whole samples, or with spatial
// parallelism one box of each sample's volume (npy through a storage with read_range: only the box's
// bytes; otherwise the whole sample decoded, then cut).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/npy.hpp"
#include "data/sample.hpp"
#include "mlph/sdk/workload/workload.hpp"
#include "mlph/util/gzip.hpp"
#include "settings.hpp"

namespace mlph::cosmoflow {

// A box of a sample's volume, in voxels along D, H, W (all 4 channels).
struct VolumeBox {
  std::array<int64_t, 3> at{0, 0, 0}, size{0, 0, 0};
  bool operator==(const VolumeBox&) const = default;
};

// A decoded sample: the box of its volume and its targets.
struct DecodedSample {
  std::vector<int16_t> x;
  std::array<float, kTargets> y;
};

// data.cache: decoded samples kept after first use, one cache per split of a workload, shared by the
// datasets that the run's readers open (each sample is kept once, whichever reader decoded it).
// Samples of one box: keeping one of another box forgets the rest.
class SampleCache {
 public:
  std::shared_ptr<const DecodedSample> find(uint64_t index, const VolumeBox& box);
  void keep(uint64_t index, const VolumeBox& box, std::shared_ptr<const DecodedSample> sample);

 private:
  std::mutex mutex_;
  VolumeBox box_;
  std::map<uint64_t, std::shared_ptr<const DecodedSample>> samples_;
};

class CosmoDataset final : public sdk::Dataset {
 public:
  // `cache`: where data.cache keeps samples (null: a cache of this dataset's own).
  CosmoDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
               const MLPH_StorageHandle& storage, std::shared_ptr<SampleCache> cache = nullptr);
  uint64_t size() override { return samples_; }
  void read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) override;
  // x: the box at the part's offsets of x's dims 1-3, as large as the tensor; y: whole.
  void read_part(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs,
                 const MLPH_SamplePart& part) override;

 private:
  void read_box(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs, const VolumeBox& box);
  bool decodes_in_place() const;
  void decode_into(uint64_t index, const SampleView& out);
  std::vector<std::byte> read_file(const std::string& path, size_t max_bytes) const;
  std::vector<DecodedSample> decode_file(size_t file_index);
  DecodedSample read_npy_box(const std::string& path) const;
  void refuse_bytes_past(const std::string& path, uint64_t end) const;
  RangeReader range_reader(const std::string& path) const;
  gzip::Engine engine() const;  // data.inflate
  std::vector<int16_t> cut(std::vector<int16_t> volume) const;
  void copy_sample(uint64_t index, int16_t* x, float* y);

  const MLPH_HostApi* host_;
  DataSettings settings_;
  MLPH_StorageHandle storage_;
  std::vector<std::string> files_;        // tfrecord files, or *_data.npy files
  uint64_t samples_ = 0;
  VolumeBox box_;                         // what the decoded samples below hold (a new box clears them)
  std::shared_ptr<SampleCache> cache_;    // data.cache
  std::pair<size_t, std::vector<DecodedSample>> last_file_{SIZE_MAX, {}};  // multi-record files decode once
  std::vector<std::byte> file_bytes_;  // decode_into's file, its memory kept from one sample to the next
};

}  // namespace mlph::cosmoflow
