// The cuda backend's own kernels are written twice over: a body per element (or row, or channel) in
// a header of this folder, a plain function of its index with plain pointers and sizes, which g++
// compiles for the CPU tests and nvcc for the device; and a `__global__` wrapper in a .cu file that
// loops the body over a grid (kernels.cu, reductions.cu). The CPU suite runs every body in a host
// loop against the reference backend (tests/backends/cuda/kernels/math_*_test.cpp, own_*_test.cpp).
//
// Bodies use the C math functions (log1pf, tanhf, exp, sqrt...): glibc's on the host, CUDA's on the
// device. CUDA's transcendental functions are within 1-2 ulp of glibc's, not equal to them; +, -, *,
// / and sqrt are correctly rounded on both. nvcc contracts a*b+c into one fma by default, as g++
// does with -march=native on a CPU that has FMA (the default build), so the device's last bits may
// differ from a host build without FMA; dropout masks, selections, copies and integer counts are
// exact everywhere.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define MLPH_KERNEL __host__ __device__ __forceinline__
#else
#define MLPH_KERNEL inline
#endif

namespace mlph::cuda {

// NaN without <cmath>'s overloads, which differ between host and device (the reference tests v != v too).
MLPH_KERNEL bool is_nan(float v) { return v != v; }

}  // namespace mlph::cuda
