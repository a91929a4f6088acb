// Dense layers. The forward and the weight gradient are tiles (tile.hpp): rows are samples (forward) or
// input features (weight gradient), columns output features. With a small batch the forward is a
// matrix-vector product that streams the weights once, so its reduction over the input features is split
// among the threads (partial sums added in order); the input gradient takes dot products of weight
// rows with dy, each weight row read once for the whole batch.
#include <algorithm>
#include <vector>

#include "kernels.hpp"
#include "sve.hpp"
#include "tile.hpp"

namespace mlph::a64fx {
namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

void dense_forward(Threads t, Scratch& scratch, const DenseShape& s, const float* x, const float* w, const float* b,
                   float* y) {
  std::vector<float>& partial = scratch.partial;
  const int vectors = vectors_for(s.out);
  const int64_t tile_cols = vectors * vector_lanes(), col_tiles = ceil_div(s.out, tile_cols);
  const int64_t tile_rows = max_rows(vectors), row_tiles = ceil_div(s.batch, tile_rows);
  // Slices of the reduction: enough items for every thread, none shorter than 256 steps.
  const int64_t slices = std::clamp<int64_t>(ceil_div(thread_count(t), row_tiles * col_tiles), 1,
                                             std::max<int64_t>(1, s.in / 256));
  float* out = y;
  if (slices > 1) {
    partial.resize(static_cast<size_t>(slices * s.batch * s.out));
    out = partial.data();
  }
  parallel_items(t, slices * row_tiles * col_tiles, [&](int64_t item) {
    const int64_t col_tile = item % col_tiles, row_tile = item / col_tiles % row_tiles, slice = item / (col_tiles * row_tiles);
    const int64_t k0 = s.in * slice / slices, k1 = s.in * (slice + 1) / slices;
    const int64_t n0 = row_tile * tile_rows, o0 = col_tile * tile_cols;
    const Segment segment{k0, w + k0 * s.out + o0, k1 - k0};
    TileArgs a{};
    a.a = x + n0 * s.in;
    a.a_row = s.in, a.a_step = 1;
    a.segments = &segment, a.n_segments = 1;
    a.b_step = s.out;
    a.c = out + (slice * s.batch + n0) * s.out + o0, a.c_row = s.out;
    a.rows = std::min(tile_rows, s.batch - n0), a.cols = std::min(tile_cols, s.out - o0);
    a.init = b && slices == 1 ? TileInit::bias : TileInit::zero;
    a.bias = b ? b + o0 : nullptr;
    run_tile(vectors, a);
  });
  if (slices == 1) return;
  const int64_t n = s.batch * s.out;
  vector_loop(t, n, [&](svbool_t pg, int64_t i) {
    svfloat32_t sum = svld1(pg, partial.data() + i);
    for (int64_t slice = 1; slice < slices; ++slice) sum = svadd_x(pg, sum, svld1(pg, partial.data() + slice * n + i));
    svst1(pg, y + i, sum);
  });
  if (b)
    for (int64_t r = 0; r < s.batch; ++r)
      for (int64_t o = 0; o < s.out; o += vector_lanes()) {
        const svbool_t pg = lanes_from(o, s.out);
        svst1(pg, y + r * s.out + o, svadd_x(pg, svld1(pg, y + r * s.out + o), svld1(pg, b + o)));
      }
}

void dense_backward(Threads t, const DenseShape& s, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db) {
  if (dx)
    parallel_chunks(t, s.in, 64, [&](int64_t begin, int64_t end, int64_t) {
      for (int64_t j = begin; j < end; ++j)
        for (int64_t n = 0; n < s.batch; ++n) {
          svfloat32_t acc = svdup_n_f32(0.0f);
          for (int64_t o = 0; o < s.out; o += vector_lanes()) {
            const svbool_t pg = lanes_from(o, s.out);
            acc = svmla_m(pg, acc, svld1(pg, w + j * s.out + o), svld1(pg, dy + n * s.out + o));
          }
          dx[n * s.in + j] += svaddv(svptrue_b32(), acc);
        }
    });
  if (dw) {
    const int vectors = vectors_for(s.out);
    const int64_t tile_cols = vectors * vector_lanes(), col_tiles = ceil_div(s.out, tile_cols);
    const int64_t tile_rows = max_rows(vectors), row_tiles = ceil_div(s.in, tile_rows);
    parallel_items(t, row_tiles * col_tiles, [&](int64_t item) {
      const int64_t col_tile = item % col_tiles, row_tile = item / col_tiles;
      const int64_t j0 = row_tile * tile_rows, o0 = col_tile * tile_cols;
      const Segment segment{0, dy + o0, s.batch};
      TileArgs a{};
      a.a = x + j0;
      a.a_row = 1, a.a_step = s.in;
      a.segments = &segment, a.n_segments = 1;
      a.b_step = s.out;
      a.c = dw + j0 * s.out + o0, a.c_row = s.out;
      a.rows = std::min(tile_rows, s.in - j0), a.cols = std::min(tile_cols, s.out - o0);
      a.init = TileInit::accumulate;
      run_tile(vectors, a);
    });
  }
  if (db) bias_backward(t, s.batch, s.out, dy, db);
}

}  // namespace mlph::a64fx
