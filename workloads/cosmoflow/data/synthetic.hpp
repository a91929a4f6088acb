// Synthetic CosmoFlow universes that a small 3D CNN can learn, written in the real formats.
//
// Each sample's 4 targets y in [-1, 1] (uniform, reproducible per (seed, index)) set:
//   y0  the mean particle count per voxel          mean_count = 8 exp(0.7 y0)      (4 .. 16)
//   y1  the fluctuation amplitude today (channel 3) amplitude  = 0.65 exp(0.5 y1)  (0.39 .. 1.07)
//   y2  the correlation length in voxels            smoothing  = 1.5 exp(0.4 y2)   (1.0 .. 2.2)
//   y3  the growth across the 4 redshift channels   growth     = 0.8 + 0.8 y3      (0 .. 1.6)
// A unit Gaussian random field g (white noise smoothed by a periodic Gaussian blur of width
// `smoothing`, normalized to mean 0 and variance 1) is shared by the channels, as one universe is
// seen at 4 redshifts. Channel c scales it by the growth factor D_c = exp(growth (c - 3) / 3)
// (1 today, down to 0.2 at the earliest) and turns it into counts: lognormal density
// rho = exp(a g - a^2 / 2) with a = amplitude D_c, then Poisson counts of mean mean_count * rho,
// as int16. Counts are mostly small (about 5% zeros, 99.7% below 50) with tails to several hundred.
// The parameters are strongly and separately visible: a ridge regression on 27 summary statistics
// reaches a validation MAE of about 0.03 (see the learnability test); a small 3D CNN on log1p(x)
// (5 conv + max-pool blocks of 16..64 filters, Adam, 30-40 epochs) reached 0.062 from 512 samples
// of 32^3 and 0.075 from 256 (the CosmoFlow target is 0.124).
//
// Everything uses the generator's own RNG (xoshiro256**) and arithmetic only (+ - * / sqrt; exp is
// computed here, not by libm), and synthetic.cpp is built without floating-point contraction, so a
// sample is the same bytes whatever the compiler flags or libm (a test pins them).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "sample.hpp"

namespace mlph::cosmoflow {

enum class Format { tfrecord, tfrecord_gzip, npy };

// "tfrecord", "tfrecord_gzip" or "npy"; throws std::invalid_argument for anything else.
Format parse_format(std::string_view text);
std::string_view format_name(Format format);

struct UniverseParameters {
  double mean_count, amplitude, smoothing, growth;
};
UniverseParameters universe_parameters(const std::array<float, kTargets>& y);

// The targets of sample `index`, uniform in [-1, 1] (as float, the value the label stores).
std::array<float, kTargets> synthetic_targets(uint64_t seed, uint64_t index);

// Sample `index` of the universe family `seed`, edge^3 x 4 counts; deterministic.
Sample synthesize_sample(uint64_t seed, uint64_t index, int edge);

// The file name stem of a generated sample, like the reference's: "univ_<seed>_<index>_000".
std::string synthetic_stem(uint64_t seed, uint64_t index);

// Writes <dir>/train/ (samples 0 .. n_train-1) and <dir>/validation/ (samples n_train ..
// n_train+n_val-1), one sample per file: <stem>.tfrecord (plain, or gzip at level 1) or <stem>_data.npy +
// <stem>_label.npy. Earlier generator output in those folders is removed first (so a smaller
// dataset never inherits stale samples); a folder holding other files is refused. Uses all cores.
void write_dataset(const std::string& dir, uint64_t n_train, uint64_t n_val, int edge, Format format, uint64_t seed);

}  // namespace mlph::cosmoflow
