// Where a CUDA, cuDNN or cuBLASLt call failed, in one line: every runtime wrapper reports through a
// Context, which names the device, the call and what it was for:
//   cuda backend: device 0 (NVIDIA H100 80GB HBM3): cudnnConvolutionForward for node 'conv3': CUDNN_STATUS_BAD_PARAM
// No CUDA header here: the statuses come in as their names.
#pragma once

#include <string>

#include "mlph/common.h"

namespace mlph::cuda::runtime {

class Context {
 public:
  // "cuda backend: device 0 (NVIDIA H100 80GB HBM3)"; before a device is bound, "cuda backend".
  explicit Context(std::string where) : where_(std::move(where)) {}
  static Context for_device(int index, const std::string& name);

  const std::string& where() const { return where_; }
  // "<where>: <call>[ for <about>]: <status>"
  std::string line(const char* call, const std::string& about, const std::string& status) const;
  [[noreturn]] void fail(MLPH_Code code, const char* call, const std::string& about, const std::string& status) const;
  // "<where>: <what>"
  [[noreturn]] void fail(MLPH_Code code, const std::string& what) const;

 private:
  std::string where_;
};

}  // namespace mlph::cuda::runtime
