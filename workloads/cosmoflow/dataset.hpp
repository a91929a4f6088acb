// A split of a CosmoFlow dataset on disk, read through the storage plug-in and decoded here
// (TFRecord plain/GZIP with CRC checks, or the npy layout).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mlph/sdk/workload.hpp"
#include "settings.hpp"

namespace mlph::cosmoflow {

class CosmoDataset final : public sdk::Dataset {
 public:
  CosmoDataset(const MLPH_HostApi* host, const DataSettings& settings, MLPH_Split split,
               const MLPH_StorageHandle& storage);
  uint64_t size() override { return samples_; }
  void read(const uint64_t* indices, size_t n, MLPH_Tensor* inputs, size_t n_inputs) override;

 private:
  struct Decoded {
    std::vector<int16_t> x;
    std::array<float, 4> y;
  };
  std::vector<std::byte> read_file(const std::string& path, size_t max_bytes) const;
  std::vector<Decoded> decode_file(size_t file_index) const;
  const Decoded& sample(uint64_t index);

  const MLPH_HostApi* host_;
  DataSettings settings_;
  MLPH_StorageHandle storage_;
  std::vector<std::string> files_;        // tfrecord files, or *_data.npy files
  uint64_t samples_ = 0;
  std::map<uint64_t, Decoded> cache_;     // data.cache: decoded samples kept after first use
  std::pair<size_t, std::vector<Decoded>> last_file_{SIZE_MAX, {}};  // multi-record files decode once
};

}  // namespace mlph::cosmoflow
