// The machine's multiply-add peaks, measured rather than taken from a data sheet, so per-layer
// GFLOP/s can be read as a share of what these cores really sustain.
#pragma once

namespace mlph::bench {

// GFLOP/s of independent vector FMA chains on `threads` threads (the widest vectors the compiler
// targets: AVX-512 with -march=native on this machine), best of a few short trials.
double measure_fp32_peak(unsigned threads);

// The same for bf16 dot products accumulated in fp32 (AVX512_BF16's vdpbf16ps: two products and
// their sum per fp32 lane, counted as 4 FLOP), what a bf16 convolution's inner loop runs on.
// 0 where the CPU has no AVX512_BF16.
double measure_bf16_peak(unsigned threads);

// The AMX tile unit's bf16 rate (tdpbf16ps, fp32 accumulation), what oneDNN's
// brgconv:avx512_core_amx_bf16 convolutions run on. 0 where the CPU has no AMX_BF16 or Linux
// refuses the tile state.
double measure_amx_bf16_peak(unsigned threads);

// A run's peaks: fp32 FMA always; with bf16, the vector (AVX512_BF16) and tile (AMX) units' too.
struct Peaks {
  double fp32 = 0, bf16_vector = 0, bf16_tiles = 0;
};
Peaks measure_peaks(unsigned threads, bool bf16);

}  // namespace mlph::bench
