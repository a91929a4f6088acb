#include "peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mlph::bench {
namespace {

constexpr int kLanes = 16;   // one 512-bit vector of floats; narrower targets split it, same count
constexpr int kChains = 12;  // enough independent FMAs to cover latency x ports on current cores
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));

// Returns a value derived from the result so the compiler cannot drop the loop.
float fma_chains(long iterations) {
  Vec acc[kChains];
  const Vec scale = Vec{} + 0.999999f, shift = Vec{} + 1e-7f;
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + static_cast<float>(c);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * scale + shift;
  float sum = 0;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0];
  return sum;
}

#if defined(__x86_64__)
// Built for AVX512_BF16 whatever the compiler targets; called only where the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains(long iterations) {
  __m512 acc[kChains];
  // bf16 bit patterns: 2^-20 and 1, so the sums grow by 2^-19 per call and stay finite.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x35800000 >> 16));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f800000 >> 16));
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  float sum = 0;
  for (int c = 0; c < kChains; ++c) sum += acc[c][0];
  return sum;
}
#endif

#if defined(__x86_64__)
// AMX: 16x16 fp32 accumulator tiles (0-5) += a 16x32 bf16 tile (6) times a 32x16 bf16 tile (7, VNNI
// pairs): 2*16*16*32 FLOP per tdpbf16ps; six accumulators cover the instruction's latency, as
// oneDNN's brgemm kernels block for. The operands stay in the tiles: this is the tile unit's rate,
// without the loads that a convolution adds.
constexpr int kTileFlop = 2 * 16 * 16 * 32;
constexpr int kAmxAccumulators = 6;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Linux hands out the tile data state only on request, per process (else the first tile
// instruction faults).
bool amx_permitted() {
  constexpr long kReqPermission = 0x1023, kTileData = 18;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kReqPermission, kTileData) == 0;
}

__attribute__((target("amx-tile,amx-bf16"))) float amx_tile_chains(long iterations) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
  _tile_loadconfig(&config);
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& v : operand) v = 0x3580;  // 2^-20 in bf16: the sums stay small and finite
  _tile_zero(0);  // tile numbers are immediates: one statement each
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (long i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}
#endif

// GFLOP/s of `chains(iterations)` on `threads` threads, each call doing `flop_per_iteration`.
double trial(unsigned threads, long iterations, double flop_per_iteration, float (*chains)(long)) {
  std::vector<std::thread> workers;
  std::vector<float> sink(threads);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&, t] { sink[t] = chains(iterations); });
  for (auto& w : workers) w.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float keep = sink[0];
  (void)keep;
  return flop_per_iteration * static_cast<double>(iterations) * threads / s / 1e9;
}

double best_of_trials(unsigned threads, double flop_per_iteration, float (*chains)(long),
                      long iterations = 20'000'000) {
  double best = 0;
  for (int i = 0; i < 5; ++i) best = std::max(best, trial(std::max(threads, 1u), iterations, flop_per_iteration, chains));
  return best;
}

}  // namespace

double measure_fp32_peak(unsigned threads) { return best_of_trials(threads, 2.0 * kLanes * kChains, fma_chains); }

double measure_bf16_peak(unsigned threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) return best_of_trials(threads, 4.0 * kLanes * kChains, bf16_dot_chains);
#endif
  (void)threads;
  return 0;
}

double measure_amx_bf16_peak(unsigned threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") && amx_permitted())
    return best_of_trials(threads, double(kTileFlop) * kAmxAccumulators, amx_tile_chains, 2'000'000);
#endif
  (void)threads;
  return 0;
}

Peaks measure_peaks(unsigned threads, bool bf16) {
  Peaks p;
  p.fp32 = measure_fp32_peak(threads);
  if (bf16) p.bf16_vector = measure_bf16_peak(threads), p.bf16_tiles = measure_amx_bf16_peak(threads);
  return p;
}

}  // namespace mlph::bench
