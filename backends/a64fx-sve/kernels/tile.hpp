// The register-blocked micro-kernel under every convolution pass and dense layer:
//
//   C[p, j] = init + sum over segments s, r < s.depth of A[s.a + p*a_row + r*a_step] * s.b[r*b_step + j]
//
// for rows p < P and columns j < cols (at most V vectors). The P x V accumulators stay in SVE
// registers for the whole reduction; each step loads V vectors of B and broadcasts P scalars of A
// (LD1RW), then issues P*V FMAs: (P + V) loads per P*V FMAs. A "segment" is one contiguous run of the
// reduction (a kernel tap, a range of input channels, a row of output positions), so one call covers a
// whole window. Vector-length agnostic: the columns are predicated with whilelt.
// Two address patterns keep the loop free of per-row address arithmetic (A64FX decodes 4 instructions
// a cycle: the loop must stay near 1.5 per FMA): when A's reduction steps are consecutive floats
// (forward, backward data, dense forward), the loop is unrolled by 4 and each row's broadcasts use
// immediate offsets; when A's rows are consecutive floats (weight gradients), one pointer serves all
// rows with immediate offsets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sve.hpp"

namespace mlph::a64fx {

struct Segment {
  int64_t a;       // offset of row 0's first element from TileArgs::a
  const float* b;  // B's first row for this segment
  int64_t depth;   // reduction steps
};

enum class TileInit { zero, bias, accumulate };

struct TileArgs {
  const float* a;
  int64_t a_row, a_step;  // A strides between rows p and between reduction steps r
  const Segment* segments;
  size_t n_segments;
  int64_t b_step;  // B stride between reduction steps
  float* c;
  int64_t c_row;  // C stride between rows
  int64_t rows, cols;
  TileInit init;
  const float* bias;  // TileInit::bias: cols values
};

// The accumulator c<p>_<v> exists for p < P and v < V; statements naming others are discarded.
#define MLPH_ROW(M, p) M(p, 0) M(p, 1) M(p, 2) M(p, 3)
#define MLPH_ALL(M)                                                                                       \
  MLPH_ROW(M, 0) MLPH_ROW(M, 1) MLPH_ROW(M, 2) MLPH_ROW(M, 3) MLPH_ROW(M, 4) MLPH_ROW(M, 5) MLPH_ROW(M, 6) \
  MLPH_ROW(M, 7) MLPH_ROW(M, 8) MLPH_ROW(M, 9) MLPH_ROW(M, 10) MLPH_ROW(M, 11)
#define MLPH_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define MLPH_DECLARE(p, v) [[maybe_unused]] svfloat32_t c##p##_##v = svdup_n_f32(0.0f);
#define MLPH_INIT(p, v)                                                                          \
  if constexpr (p < P && v < V) {                                                                \
    if (t.init == TileInit::bias) c##p##_##v = svld1(col##v, t.bias + v * lanes);               \
    if (t.init == TileInit::accumulate) c##p##_##v = svld1(col##v, t.c + p * t.c_row + v * lanes); \
  }
#define MLPH_FMA(p, v) \
  if constexpr (p < P && v < V) c##p##_##v = svmla_m(all, c##p##_##v, b##v, a##p);
// One reduction step: V vectors of B from `b`, row p's scalar of A at `A_OF(p)`.
#define MLPH_LOAD_B(b)                                   \
  const svfloat32_t b0 = svld1(col0, b);                 \
  [[maybe_unused]] svfloat32_t b1, b2, b3;               \
  if constexpr (V > 1) b1 = svld1(col1, b + lanes);      \
  if constexpr (V > 2) b2 = svld1(col2, b + 2 * lanes);  \
  if constexpr (V > 3) b3 = svld1(col3, b + 3 * lanes);
#define MLPH_STEP_ROW(p)                              \
  if constexpr (p < P) {                              \
    const svfloat32_t a##p = svdup_n_f32(A_OF(p));    \
    MLPH_ROW(MLPH_FMA, p)                             \
  }
#define MLPH_STEP(b)      \
  {                       \
    MLPH_LOAD_B(b)        \
    MLPH_ROWS(MLPH_STEP_ROW) \
  }
#define MLPH_STORE(p, v)                                                      \
  if constexpr (p < P && v < V) svst1(col##v, t.c + p * t.c_row + v * lanes, c##p##_##v);

template <int P, int V, bool kRowsContiguous>
void gemm_tile(const TileArgs& t) {
  static_assert(P >= 1 && P <= 12 && V >= 1 && V <= 4, "the accumulators are c0_0 .. c11_3");
  const svbool_t all = svptrue_b32();
  const int64_t lanes = static_cast<int64_t>(svcntw()), b_step = t.b_step, a_step = t.a_step;
  [[maybe_unused]] const svbool_t col0 = lanes_from(0, t.cols), col1 = lanes_from(lanes, t.cols),
                                  col2 = lanes_from(2 * lanes, t.cols), col3 = lanes_from(3 * lanes, t.cols);
  MLPH_ALL(MLPH_DECLARE)
  MLPH_ALL(MLPH_INIT)
  for (size_t s = 0; s < t.n_segments; ++s) {
    const Segment& seg = t.segments[s];
    const float* b = seg.b;
    int64_t r = 0;
    if constexpr (kRowsContiguous) {  // row p of step r at a[p]: immediate offsets from one pointer
      const float* a = t.a + seg.a;
#define A_OF(p) a[p]
      for (; r < seg.depth; ++r, a += a_step, b += b_step) MLPH_STEP(b)
#undef A_OF
    } else {  // rows apart; when steps are consecutive, four steps per iteration at immediate offsets
      const float* rows[P];
      for (int p = 0; p < P; ++p) rows[p] = t.a + seg.a + p * t.a_row;
      if (a_step == 1) {
        for (; r + 4 <= seg.depth; r += 4) {
          for (int k = 0; k < 4; ++k, b += b_step) {
#define A_OF(p) rows[p][k]
            MLPH_STEP(b)
#undef A_OF
            // Keeps GCC from hoisting the next steps' B loads into this one: with 24 accumulators live,
            // 4 steps of B do not fit the 32 registers and spill to the stack.
            asm volatile("" ::: "memory");
          }
          for (int p = 0; p < P; ++p) rows[p] += 4;
        }
      }
      for (; r < seg.depth; ++r, b += b_step) {
#define A_OF(p) rows[p][0]
        MLPH_STEP(b)
#undef A_OF
        for (int p = 0; p < P; ++p) rows[p] += a_step;
      }
    }
  }
  MLPH_ALL(MLPH_STORE)
}

#undef MLPH_ROW
#undef MLPH_ALL
#undef MLPH_ROWS
#undef MLPH_DECLARE
#undef MLPH_INIT
#undef MLPH_FMA
#undef MLPH_LOAD_B
#undef MLPH_STEP_ROW
#undef MLPH_STEP
#undef MLPH_STORE

// The tile shapes: V vectors of columns (1 to 4) and the most rows that keep P*V <= 24 accumulators
// (2 FMA pipes x 9 cycles of latency on A64FX need >= 18 independent chains), at most 12.
constexpr int kMaxVectors = 4;
constexpr int max_rows(int vectors) { return vectors == 1 ? 12 : vectors == 2 ? 12 : vectors == 3 ? 8 : 6; }

// Runs the tile with V vectors and t.rows rows (at most max_rows(V)); A's rows or steps must be
// consecutive floats (a_row == 1 or a_step == 1) for the fast loops, any strides work.
void run_tile(int vectors, const TileArgs& t);

// The number of column vectors for `cols` columns: enough to cover them, at most kMaxVectors.
inline int vectors_for(int64_t cols) {
  const int64_t lanes = static_cast<int64_t>(svcntw());
  return static_cast<int>(std::clamp<int64_t>((cols + lanes - 1) / lanes, 1, kMaxVectors));
}

}  // namespace mlph::a64fx
