// Max pooling without padding, channels-last: each output position takes the maximum over its window
// one vector of channels at a time. The backward pass finds each window's winner again (the first
// maximum, a NaN beating any number) and routes dy to it: no argmax is stored between the passes.
#include <algorithm>
#include <vector>

#include "kernels.hpp"
#include "sve.hpp"

namespace mlph::a64fx {
namespace {

// Lanes where v beats best: greater, or v is NaN while best is not (so the first NaN wins and stays).
inline svbool_t beats(svbool_t pg, svfloat32_t v, svfloat32_t best) {
  return svorr_z(pg, svcmpgt(pg, v, best), svbic_z(pg, svcmpuo(pg, v, v), svcmpuo(pg, best, best)));
}

// dx[winner] += dy for the window of `pos`, channels [c, c + lanes) under pg.
void route(const Window& g, const std::vector<int64_t>& taps, const float* x, const float* dy, float* dx, int64_t pos,
           int64_t c, svbool_t pg) {
  const int64_t base = g.window_offset(pos) + c;
  svfloat32_t best = svld1(pg, x + base + taps[0]);
  svint32_t winner = svdup_n_s32(0);
  for (size_t k = 1; k < taps.size(); ++k) {
    const svfloat32_t v = svld1(pg, x + base + taps[k]);
    const svbool_t wins = beats(pg, v, best);
    best = svsel(wins, v, best);
    winner = svsel(wins, svdup_n_s32(static_cast<int32_t>(k)), winner);
  }
  const svfloat32_t grad = svld1(pg, dy + pos * g.in_channels + c);
  for (size_t k = 0; k < taps.size(); ++k) {
    const svbool_t mine = svcmpeq(pg, winner, static_cast<int32_t>(k));
    float* to = dx + base + taps[k];
    svst1(pg, to, svadd_m(mine, svld1(pg, to), grad));
  }
}

}  // namespace

void max_pool_forward(Threads t, const Window& g, const float* x, float* y) {
  const std::vector<int64_t> taps = g.tap_offsets();
  const int64_t c = g.in_channels;
  parallel_chunks(t, g.out_positions(), std::max<int64_t>(1, kMinChunk / (c * g.taps())), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t pos = begin; pos < end; ++pos) {
      const float* window = x + g.window_offset(pos);
      for (int64_t ch = 0; ch < c; ch += vector_lanes()) {
        const svbool_t pg = lanes_from(ch, c);
        svfloat32_t best = svld1(pg, window + taps[0] + ch);
        for (size_t k = 1; k < taps.size(); ++k) {
          const svfloat32_t v = svld1(pg, window + taps[k] + ch);
          best = svsel(beats(pg, v, best), v, best);
        }
        svst1(pg, y + pos * c + ch, best);
      }
    }
  });
}

// Windows that do not overlap (stride >= kernel, CosmoFlow's case) write disjoint parts of dx, so
// positions run in parallel; overlapping ones run in parallel over channel vectors, never racing.
void max_pool_backward(Threads t, const Window& g, const float* x, const float* dy, float* dx) {
  const std::vector<int64_t> taps = g.tap_offsets();
  const int64_t c = g.in_channels, lanes = vector_lanes();
  bool overlapping = false;
  for (int d = 0; d < 3; ++d) overlapping = overlapping || g.stride[d] < g.kernel[d];
  if (!overlapping) {
    parallel_chunks(t, g.out_positions(), std::max<int64_t>(1, kMinChunk / (c * g.taps())), [&](int64_t begin, int64_t end, int64_t) {
      for (int64_t pos = begin; pos < end; ++pos)
        for (int64_t ch = 0; ch < c; ch += lanes) route(g, taps, x, dy, dx, pos, ch, lanes_from(ch, c));
    });
    return;
  }
  parallel_items(t, (c + lanes - 1) / lanes, [&](int64_t vector) {
    const int64_t ch = vector * lanes;
    for (int64_t pos = 0; pos < g.out_positions(); ++pos) route(g, taps, x, dy, dx, pos, ch, lanes_from(ch, c));
  });
}

}  // namespace mlph::a64fx
