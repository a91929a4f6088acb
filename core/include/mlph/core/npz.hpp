// NumPy's .npz (a zip of .npy arrays, stored uncompressed), which numpy.load reads and which PyTorch
// turns into a state_dict in three lines:
//   import numpy, torch
//   state = {k: torch.from_numpy(v) for k, v in numpy.load("weights.npz").items()}
//   model.load_state_dict(state)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mlph/common.h"
#include "mlph/core/atomic_file.hpp"

namespace mlph::core {

class NpzWriter {
 public:
  // Written into `file` (atomic_file.hpp: it may have been made long before, to reserve the path);
  // an unfinished archive never appears under its name.
  explicit NpzWriter(AtomicFile file);
  explicit NpzWriter(const std::filesystem::path& file) : NpzWriter(AtomicFile(file)) {}

  // Array `name` (numpy.load's key) of little-endian float32, int64, ... row-major; ndim 0 is a scalar.
  void add(const std::string& name, MLPH_DType dtype, const std::vector<int64_t>& shape, const void* data);
  void finish();  // the central directory; the file appears under its name

 private:
  struct Entry {
    std::string name;
    uint32_t crc32, size, offset;
  };
  AtomicFile out_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace mlph::core
