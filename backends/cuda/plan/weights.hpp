// Where each element of a parameter lives on the device. Its slice of the masters, of the gradient
// buffer and of every optimizer slot share one layout: the one its reader reads, so that neither the
// update nor backward transposes anything.
//   conv, conv_transpose on cuDNN: the graph's [K..., Ci/g, Co], seen as [rows = taps·Ci/g, cols = Co],
//     kept as cuDNN's CUDNN_TENSOR_NHWC filter [Co, K..., Ci/g], its transpose [cols, rows]: cuDNN
//     reads the fp32 masters as they are and backward-filter adds dw into the gradient buffer in place;
//     bf16/fp16 keep a half copy the optimizer writes as it updates the master (kernels/optimizer.hpp
//     HalfCopy), not a transpose.
//   dense and pointwise convs (cuBLASLt) and everything else: the graph's layout.
// The model's layout is converted only where a tensor crosses the backend's boundary: the initial
// values, read/write_parameter, read/write_state and read_gradient (checkpoints go through those).
// The optimizer, L2 and LAMB's norms are element-wise or whole-tensor sums: layout-blind.
#pragma once

#include <vector>

#include "lowering.hpp"

namespace mlph::cuda::plan {

struct ParamMap {
  int64_t rows = 0, cols = 0;  // transposed: the model's [rows, cols] is the device's [cols, rows]; 0: as the model

  bool identity() const { return rows == 0; }
  // The device position of the model's element i.
  int64_t device(int64_t i) const {
    if (identity()) return i;
    const int64_t r = i / cols, c = i - r * cols;
    return c * rows + r;
  }
};

// Per Program::params entry. A weight read by a cuDNN conv and by another reader in another layout
// fails in one line naming the nodes (no graph of ours shares weights).
std::vector<ParamMap> param_maps(const Program& program, const std::vector<NodeLowering>& lowering);

// The model's `count` elements into the device layout, and back (host buffers of `count` floats).
void to_device(const ParamMap& map, const float* model, float* device, int64_t count);
void to_model(const ParamMap& map, const float* device, float* model, int64_t count);

}  // namespace mlph::cuda::plan
