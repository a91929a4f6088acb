// Synthetic DeepCAM weather that a segmentation network can learn, written in the real format.
//
// Each sample holds 16 channels named after the CAM5 fields of the real dataset (TMQ, U850, V850,
// UBOT, VBOT, QREFHT, PS, PSL, T200, T500, PRECT, TS, TREFHT, Z1000, Z200, ZBOT), each with its own
// physical offset and spread, so that the min/max normalization matters. A channel is
//   offset + spread * (smooth background + features + 0.1 white noise),
// where the background is a few random long waves plus a latitude profile, and the features are:
//   * 0-2 tropical-cyclone-like vortices (label 1) at low latitudes: a Gaussian surface-pressure
//     minimum (PS, PSL, Z1000), winds rotating about it peaking at radius R (U/V at 850 hPa and the
//     surface), a warm core aloft (T500, T200), moisture and rain; labelled within 1.6 R,
//     R = 3-5% of the height;
//   * 1-2 atmospheric-river-like filaments (label 2) at mid latitudes: a long (35-60% of the width),
//     narrow, gently curved band of moisture (TMQ, QREFHT, PRECT) with winds along it; labelled
//     where the band's intensity exceeds 0.4. A cyclone's label wins where both overlap.
// About 94% of the pixels are background (class 0). Sizes scale with the image, so the same
// weather appears at 96x144 and at the real 768x1152. Deterministic per (seed, index): all random
// numbers come from mlph_uniform.
#pragma once

#include <cstdint>
#include <string>

#include "sample.hpp"

namespace mlph::deepcam {

inline constexpr int kSyntheticChannels = 16;

Sample synthesize_sample(uint64_t seed, uint64_t index, int height, int width);

// "data-synthetic-<seed>-<index, 6 digits>.h5"
std::string synthetic_file_name(uint64_t seed, uint64_t index);

// Writes <dir>/train/ (samples 0 .. n_train-1), <dir>/validation/ (n_train .. n_train+n_val-1),
// one data-*.h5 file per sample (climate/data float32 HxWx16, climate/labels_0 int32 HxW), and
// <dir>/stats.h5 (climate/minval, maxval, mean, sqmean float32 per channel, count) over the
// training samples. Earlier generator output in those folders is removed first; a folder holding
// other files is refused. Uses all cores. Throws DataError naming the file or folder.
void write_dataset(const std::string& dir, uint64_t n_train, uint64_t n_val, int height, int width, uint64_t seed);

}  // namespace mlph::deepcam
