// Max pooling without padding (Keras 'valid'), channels-last. The backward pass recomputes each
// window's winner from x with the same rule as the forward pass instead of storing an argmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.hpp"

namespace mlph::reference {
namespace {

// The first maximum wins (strict '>'), and a NaN beats any number so it propagates like in PyTorch.
inline bool beats(float v, float best) { return v > best || (v != v && best == best); }  // v != v: NaN

// Routes dy of output position `pos`, channels [c0, c1), to each window's winner. `best` and
// `winner` are the caller's scratch for those channels. Written without branches (selects, and
// adding 0 to the losers) so that the compiler vectorises the loops over channels.
void route_to_winners(const Window& g, const std::vector<int64_t>& taps, const float* x, const float* dy, float* dx,
                      int64_t pos, int64_t c0, int64_t c1, float* best, int32_t* winner) {
  const int64_t base = g.window_offset(pos), c = g.in_channels;
  for (int64_t ch = c0; ch < c1; ++ch) best[ch] = x[base + taps[0] + ch], winner[ch] = 0;
  for (size_t t = 1; t < taps.size(); ++t) {
    const float* xt = x + base + taps[t];
    for (int64_t ch = c0; ch < c1; ++ch) {
      const bool wins = beats(xt[ch], best[ch]);
      best[ch] = wins ? xt[ch] : best[ch];
      winner[ch] = wins ? static_cast<int32_t>(t) : winner[ch];
    }
  }
  for (size_t t = 0; t < taps.size(); ++t) {
    float* dxt = dx + base + taps[t];
    for (int64_t ch = c0; ch < c1; ++ch) dxt[ch] += winner[ch] == static_cast<int32_t>(t) ? dy[pos * c + ch] : 0.0f;
  }
}

}  // namespace

void max_pool_forward(ThreadPool& pool, const Window& g, const float* x, float* y) {
  const std::vector<int64_t> taps = g.tap_offsets();
  const int64_t c = g.in_channels;
  pool.parallel_for(g.out_positions(), [&](int64_t begin, int64_t end) {
    for (int64_t pos = begin; pos < end; ++pos) {
      const float* window = x + g.window_offset(pos);
      float* best = y + pos * c;
      for (int64_t ch = 0; ch < c; ++ch) best[ch] = window[taps[0] + ch];
      for (size_t t = 1; t < taps.size(); ++t)
        for (int64_t ch = 0; ch < c; ++ch)
          if (beats(window[taps[t] + ch], best[ch])) best[ch] = window[taps[t] + ch];
    }
  });
}

// Windows that do not overlap (stride >= kernel, CosmoFlow's case) write disjoint parts of dx, so
// positions run in parallel; overlapping ones run in parallel over channels instead, never racing.
void max_pool_backward(ThreadPool& pool, const Window& g, const float* x, const float* dy, float* dx) {
  const std::vector<int64_t> taps = g.tap_offsets();
  const int64_t c = g.in_channels;
  bool overlapping = false;
  for (int d = 0; d < 3; ++d) overlapping = overlapping || g.stride[d] < g.kernel[d];
  if (!overlapping) {
    const int64_t parts = std::min<int64_t>(pool.size(), g.out_positions()), positions = g.out_positions();
    std::vector<float> best(static_cast<size_t>(parts * c));  // scratch per part
    std::vector<int32_t> winner(static_cast<size_t>(parts * c));
    pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
      for (int64_t part = begin; part < end; ++part)
        for (int64_t pos = positions * part / parts; pos < positions * (part + 1) / parts; ++pos)
          route_to_winners(g, taps, x, dy, dx, pos, 0, c, best.data() + part * c, winner.data() + part * c);
    });
    return;
  }
  std::vector<float> best(static_cast<size_t>(c));  // each thread uses its own channels' slots
  std::vector<int32_t> winner(static_cast<size_t>(c));
  pool.parallel_for(c, 8, [&](int64_t c0, int64_t c1) {
    for (int64_t pos = 0; pos < g.out_positions(); ++pos)
      route_to_winners(g, taps, x, dy, dx, pos, c0, c1, best.data(), winner.data());
  });
}

}  // namespace mlph::reference
