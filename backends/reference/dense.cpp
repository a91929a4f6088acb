// Dense (fully connected) layers: y[s] = x[s]·w + b with w [in, out].
#include "ops.hpp"

namespace mlph::reference {

// Parallel over blocks of output columns: with batch 1 (CosmoFlow's) the samples give no parallelism.
void dense_forward(ThreadPool& pool, Scratch&, const DenseShape& s, const float* x, const float* w, const float* b,
                   float* y) {
  pool.parallel_for(s.out, 16, [&](int64_t o0, int64_t o1) {
    for (int64_t n = 0; n < s.batch; ++n) {
      float* yr = y + n * s.out;
      for (int64_t o = o0; o < o1; ++o) yr[o] = b ? b[o] : 0.0f;
      for (int64_t i = 0; i < s.in; ++i) {
        const float xv = x[n * s.in + i];
        const float* wr = w + i * s.out;
        for (int64_t o = o0; o < o1; ++o) yr[o] += xv * wr[o];
      }
    }
  });
}

// Parallel over input features: row i of w gives dw[i, :] and dx[:, i], each with one writer.
void dense_backward(ThreadPool& pool, const DenseShape& s, const float* x, const float* w, const float* dy, float* dx,
                    float* dw, float* db) {
  pool.parallel_for(s.in, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* wr = w + i * s.out;
      for (int64_t n = 0; n < s.batch; ++n) {
        const float* d = dy + n * s.out;
        if (dw) {
          const float xv = x[n * s.in + i];
          float* dwr = dw + i * s.out;
          for (int64_t o = 0; o < s.out; ++o) dwr[o] += xv * d[o];
        }
        if (dx) {
          float sum = 0.0f;
          for (int64_t o = 0; o < s.out; ++o) sum += wr[o] * d[o];
          dx[n * s.in + i] += sum;
        }
      }
    }
  });
  for (int64_t n = 0; db && n < s.batch; ++n)
    for (int64_t o = 0; o < s.out; ++o) db[o] += dy[n * s.out + o];
}

}  // namespace mlph::reference
