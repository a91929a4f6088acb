// NumPy's .npz (a zip of .npy arrays, stored uncompressed), which numpy.load reads and which PyTorch
// turns into a state_dict in three lines:
//   import numpy, torch
//   state = {k: torch.from_numpy(v) for k, v in numpy.load("weights.npz").items()}
//   model.load_state_dict(state)
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mlph/common.h"

namespace mlph::core {

class NpzWriter {
 public:
  explicit NpzWriter(std::filesystem::path file);  // written to file.tmp, renamed by finish()
  ~NpzWriter();                                    // an unfinished archive is removed
  NpzWriter(const NpzWriter&) = delete;
  NpzWriter& operator=(const NpzWriter&) = delete;

  // Array `name` (numpy.load's key) of little-endian float32, int64, ... row-major; ndim 0 is a scalar.
  void add(const std::string& name, MLPH_DType dtype, const std::vector<int64_t>& shape, const void* data);
  void finish();  // the central directory; the file appears under its name

 private:
  struct Entry {
    std::string name;
    uint32_t crc32, size, offset;
  };
  std::filesystem::path file_, temp_;
  std::ofstream out_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
  bool finished_ = false;
};

}  // namespace mlph::core
