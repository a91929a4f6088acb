// A padded conv's input side (plan::pad_channels) as the taps_fold kernel writes it: shared by the model
// (model_nodes.cpp) and mlph-cuda-probe, so that the probe times the layout the model runs.
#pragma once

#include <cstdint>

#include "kernels/layout.hpp"
#include "plan/lowering.hpp"

namespace mlph::cuda {

// x [N, spatial..., Ci], `in_width` positions along its last spatial axis, as the rows of `c.in`: its
// taps along that axis folded in where the plan folds them, its channels padded to c.padded_channels.
inline TapsFold taps_fold_of(const plan::ConvPlan& c, int64_t in_width) {
  TapsFold f;
  f.out_width = c.in.dims[static_cast<size_t>(1 + c.spatial)];
  f.lines = c.in.dims[0] * c.in.strides[0] / (f.out_width * c.padded_channels);
  f.in_width = in_width, f.channels = c.channels / c.taps;
  f.taps = c.taps, f.shift = c.tap_pad, f.width = c.padded_channels;
  return f;
}

}  // namespace mlph::cuda
