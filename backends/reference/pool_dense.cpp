#include <limits>

#include "kernels.hpp"

namespace mlph::reference {

void max_pool_forward(ThreadPool& pool, const Window& g, const float* x, float* y, int64_t* argmax) {
  const int64_t c = g.in_channels;
  const int64_t rows = g.batch * g.out[0] * g.out[1];
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (g.out[0] * g.out[1]), od = row / g.out[1] % g.out[0], oh = row % g.out[1];
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        const int64_t o = (((n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow) * c;
        for (int64_t ch = 0; ch < c; ++ch) y[o + ch] = -std::numeric_limits<float>::infinity(), argmax[o + ch] = -1;
        // Window taps in row-major order with a strict '>': the first maximum wins.
        for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              const int64_t id = od * g.stride[0] + kd, ih = oh * g.stride[1] + kh, iw = ow * g.stride[2] + kw;
              const int64_t i = (((n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw) * c;
              for (int64_t ch = 0; ch < c; ++ch)
                if (x[i + ch] > y[o + ch] || argmax[o + ch] < 0) y[o + ch] = x[i + ch], argmax[o + ch] = i + ch;
            }
      }
    }
  });
}

void max_pool_backward(const Window& g, const int64_t* argmax, const float* dy, float* dx) {
  const int64_t outputs = g.batch * g.out_spatial() * g.in_channels;
  for (int64_t o = 0; o < outputs; ++o) dx[argmax[o]] += dy[o];
}

void dense_forward(ThreadPool& pool, int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                   const float* b, float* y) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      float* ys = y + s * out;
      for (int64_t o = 0; o < out; ++o) ys[o] = b ? b[o] : 0.0f;
      for (int64_t i = 0; i < in; ++i) {
        const float xv = x[s * in + i];
        const float* wr = w + i * out;
        for (int64_t o = 0; o < out; ++o) ys[o] += xv * wr[o];
      }
    }
  });
}

void dense_backward(ThreadPool& pool, int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db) {
  // Rows of w (one input feature each) are independent: dw[i, :] and dx[:, i] have one writer.
  pool.parallel_for(in, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* wr = w + i * out;
      for (int64_t s = 0; s < n; ++s) {
        const float* d = dy + s * out;
        if (dw) {
          const float xv = x[s * in + i];
          float* dwr = dw + i * out;
          for (int64_t o = 0; o < out; ++o) dwr[o] += xv * d[o];
        }
        if (dx) {
          float sum = 0.0f;
          for (int64_t o = 0; o < out; ++o) sum += wr[o] * d[o];
          dx[s * in + i] += sum;
        }
      }
    }
  });
  if (db)
    for (int64_t s = 0; s < n; ++s)
      for (int64_t o = 0; o < out; ++o) db[o] += dy[s * out + o];
}

}  // namespace mlph::reference
