// The machine's FP32 multiply-add peak, measured rather than taken from a data sheet, so per-layer
// GFLOP/s can be read as a share of what these cores really sustain.
#pragma once

namespace mlph::bench {

// GFLOP/s of independent vector FMA chains on `threads` threads (the widest vectors the compiler
// targets: AVX-512 with -march=native on this machine), best of a few short trials.
double measure_fp32_peak(unsigned threads);

}  // namespace mlph::bench
