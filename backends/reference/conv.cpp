#include <algorithm>
#include <vector>

#include "kernels.hpp"

namespace mlph::reference {
namespace {

// Input coordinate read by output coordinate o through kernel tap k along dim d; -1 if in padding.
inline int64_t input_coord(const Window& g, int d, int64_t o, int64_t k) {
  const int64_t i = o * g.stride[d] - g.pad_before[d] + k * g.dilation[d];
  return i >= 0 && i < g.in[d] ? i : -1;
}

// Output coordinate whose tap k reads input coordinate i along dim d; -1 if none.
inline int64_t output_coord(const Window& g, int d, int64_t i, int64_t k) {
  const int64_t t = i + g.pad_before[d] - k * g.dilation[d];
  if (t < 0 || t % g.stride[d] != 0) return -1;
  const int64_t o = t / g.stride[d];
  return o < g.out[d] ? o : -1;
}

}  // namespace

void conv_forward(ThreadPool& pool, const Window& g, const float* x, const float* w, const float* b, float* y) {
  const int64_t ci_g = g.in_channels / g.groups, co_g = g.out_channels / g.groups, co = g.out_channels;
  const int64_t rows = g.batch * g.out[0] * g.out[1];  // parallel over (n, od, oh)
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (g.out[0] * g.out[1]), od = row / g.out[1] % g.out[0], oh = row % g.out[1];
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        float* acc = y + (((n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) * co;
        for (int64_t c = 0; c < co; ++c) acc[c] = b ? b[c] : 0.0f;
        for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
          const int64_t id = input_coord(g, 0, od, kd);
          if (id < 0) continue;
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
            const int64_t ih = input_coord(g, 1, oh, kh);
            if (ih < 0) continue;
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              const int64_t iw = input_coord(g, 2, ow, kw);
              if (iw < 0) continue;
              const float* xs = x + (((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) * g.in_channels;
              const float* wk = w + ((kd * g.kernel[1] + kh) * g.kernel[2] + kw) * ci_g * co;
              for (int64_t grp = 0; grp < g.groups; ++grp)
                for (int64_t c = 0; c < ci_g; ++c) {
                  const float xv = xs[grp * ci_g + c];
                  const float* wr = wk + c * co + grp * co_g;
                  float* out = acc + grp * co_g;
                  for (int64_t o = 0; o < co_g; ++o) out[o] += xv * wr[o];
                }
            }
          }
        }
      }
    }
  });
}

void conv_backward_data(ThreadPool& pool, const Window& g, const float* w, const float* dy, float* dx) {
  const int64_t ci_g = g.in_channels / g.groups, co_g = g.out_channels / g.groups, co = g.out_channels;
  const int64_t rows = g.batch * g.in[0] * g.in[1];  // parallel over (n, id, ih): each dx row has one writer
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (g.in[0] * g.in[1]), id = row / g.in[1] % g.in[0], ih = row % g.in[1];
      for (int64_t iw = 0; iw < g.in[2]; ++iw) {
        float* acc = dx + (((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) * g.in_channels;
        for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
          const int64_t od = output_coord(g, 0, id, kd);
          if (od < 0) continue;
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
            const int64_t oh = output_coord(g, 1, ih, kh);
            if (oh < 0) continue;
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              const int64_t ow = output_coord(g, 2, iw, kw);
              if (ow < 0) continue;
              const float* ds = dy + (((n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) * co;
              const float* wk = w + ((kd * g.kernel[1] + kh) * g.kernel[2] + kw) * ci_g * co;
              for (int64_t grp = 0; grp < g.groups; ++grp)
                for (int64_t c = 0; c < ci_g; ++c) {
                  const float* wr = wk + c * co + grp * co_g;
                  const float* d = ds + grp * co_g;
                  float sum = 0.0f;
                  for (int64_t o = 0; o < co_g; ++o) sum += wr[o] * d[o];
                  acc[grp * ci_g + c] += sum;
                }
            }
          }
        }
      }
    }
  });
}

void conv_backward_weights(ThreadPool& pool, const Window& g, const float* x, const float* dy, float* dw, float* db) {
  const int64_t ci_g = g.in_channels / g.groups, co_g = g.out_channels / g.groups, co = g.out_channels;
  // Tasks own disjoint slices of dw: one kernel tap and a block of its input channels.
  const int64_t taps = g.kernel_size();
  const int64_t blocks = std::min<int64_t>(ci_g, std::max<int64_t>(1, (4 * pool.size() + taps - 1) / taps));
  pool.parallel_for(taps * blocks, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t tap = task / blocks, block = task % blocks;
      const int64_t kd = tap / (g.kernel[1] * g.kernel[2]), kh = tap / g.kernel[2] % g.kernel[1], kw = tap % g.kernel[2];
      const int64_t c_begin = ci_g * block / blocks, c_end = ci_g * (block + 1) / blocks;
      float* wk = dw + tap * ci_g * co;
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t od = 0; od < g.out[0]; ++od) {
          const int64_t id = input_coord(g, 0, od, kd);
          if (id < 0) continue;
          for (int64_t oh = 0; oh < g.out[1]; ++oh) {
            const int64_t ih = input_coord(g, 1, oh, kh);
            if (ih < 0) continue;
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              const int64_t iw = input_coord(g, 2, ow, kw);
              if (iw < 0) continue;
              const float* xs = x + (((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) * g.in_channels;
              const float* ds = dy + (((n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) * co;
              for (int64_t grp = 0; grp < g.groups; ++grp)
                for (int64_t c = c_begin; c < c_end; ++c) {
                  const float xv = xs[grp * ci_g + c];
                  float* wr = wk + c * co + grp * co_g;
                  const float* d = ds + grp * co_g;
                  for (int64_t o = 0; o < co_g; ++o) wr[o] += xv * d[o];
                }
            }
          }
        }
    }
  });
  if (!db) return;
  const int64_t positions = g.batch * g.out_spatial();
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t o = 0; o < co; ++o) db[o] += dy[p * co + o];
}

}  // namespace mlph::reference
