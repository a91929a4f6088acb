// Optimizers: the update a train step applies after the gradients are averaged over ranks.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.hpp"

namespace mlph::reference {

void sgd_keras_update(ThreadPool&, int64_t n, double lr, double momentum, const float* g, float* velocity, float* w) {
  const auto rate = static_cast<float>(lr), m = static_cast<float>(momentum);
  for (int64_t i = 0; i < n; ++i) {
    velocity[i] = m * velocity[i] - rate * g[i];
    w[i] += velocity[i];
  }
}

namespace {

constexpr int64_t kMinChunk = 1 << 15;  // elements: below this, waking the other threads costs more

// sum of x[i]^2 in double, in 8 interleaved lanes: the compiler vectorises it without reordering anything.
double sum_of_squares(const float* x, int64_t n) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// The element loops take every scalar and pointer as a parameter: captured by reference, a float could alias
// the arrays, and the compiler would reload it every element instead of vectorising.
struct AdamScalars {
  float b1, b2, eps, step_size, bc2_sqrt, coupled, shrink;
};
void adam_range(int64_t begin, int64_t end, AdamScalars k, const float* g, float* m, float* v, float* w) {
  for (int64_t i = begin; i < end; ++i) {
    w[i] *= k.shrink;
    const float grad = g[i] + k.coupled * w[i];
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * grad;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * grad * grad;
    w[i] -= k.step_size * m[i] / (std::sqrt(v[i]) / k.bc2_sqrt + k.eps);
  }
}

struct LambScalars {
  float b1, b2, eps, bc1, bc2, wd, clip;
};
void lamb_range(int64_t begin, int64_t end, LambScalars k, const float* g, float* m, float* v, const float* w,
                float* update) {
  for (int64_t i = begin; i < end; ++i) {
    const float grad = g[i] / k.clip;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * grad;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * grad * grad;
    update[i] = (m[i] / k.bc1) / (std::sqrt(v[i] / k.bc2) + k.eps) + k.wd * w[i];
  }
}

void subtract_scaled(int64_t begin, int64_t end, float scale, const float* x, float* w) {
  for (int64_t i = begin; i < end; ++i) w[i] -= scale * x[i];
}

// 1 - beta^t in double, cast to float (docs/ops.md).
double bias_correction(double beta, uint64_t t) {
  return static_cast<float>(1.0 - std::pow(beta, static_cast<double>(t)));
}
}  // namespace

// Partial sums over a fixed split (parts depend only on n and the thread count), added in order: repeatable.
double l2_norm(ThreadPool& pool, int64_t n, const float* x) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.size(), n / kMinChunk));
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part)
      partial[static_cast<size_t>(part)] =
          sum_of_squares(x + n * part / parts, n * (part + 1) / parts - n * part / parts);
  });
  double sum = 0;
  for (double p : partial) sum += p;
  return std::sqrt(sum);
}

// PyTorch's Adam/AdamW (single-tensor path): the scalar step size lr/bc1 and sqrt(bc2) are formed in double and
// enter the float arithmetic once each.
void adam_update(ThreadPool& pool, int64_t n, double lr, const AdamAttrs& a, uint64_t t, double decay, bool decoupled,
                 const float* g, float* m, float* v, float* w) {
  const auto b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2), eps = static_cast<float>(a.eps);
  const auto step_size = static_cast<float>(lr / bias_correction(a.beta1, t));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bias_correction(a.beta2, t)));
  const auto coupled = static_cast<float>(decoupled ? 0.0 : decay);
  const auto shrink = static_cast<float>(decoupled ? 1.0 - lr * decay : 1.0);
  const AdamScalars k{b1, b2, eps, step_size, bc2_sqrt, coupled, shrink};
  pool.parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) { adam_range(begin, end, k, g, m, v, w); });
}

// One pass computes the moments, the update and both squared norms (memory-bound: 56 M parameters in DeepCAM),
// a second applies it. The norms are partial sums over a fixed split, as l2_norm's.
void lamb_update(ThreadPool& pool, int64_t n, double lr, const AdamAttrs& a, uint64_t t, double decay, float clip,
                 const float* g, float* m, float* v, float* w, float* update) {
  const auto b1 = static_cast<float>(a.beta1), b2 = static_cast<float>(a.beta2), eps = static_cast<float>(a.eps);
  const auto bc1 = static_cast<float>(bias_correction(a.beta1, t)),
             bc2 = static_cast<float>(bias_correction(a.beta2, t));
  const auto wd = static_cast<float>(decay);
  const LambScalars k{b1, b2, eps, bc1, bc2, wd, clip};
  constexpr int64_t kBlock = 2048;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.size(), n / kMinChunk));
  std::vector<double> squares(2 * static_cast<size_t>(parts), 0.0);  // per part: ||p||^2, ||u||^2
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      double p_square = 0, u_square = 0;
      const int64_t last = n * (part + 1) / parts;
      for (int64_t first = n * part / parts; first < last; first += kBlock) {  // the block stays in cache
        const int64_t stop = std::min(last, first + kBlock);
        lamb_range(first, stop, k, g, m, v, w, update);
        p_square += sum_of_squares(w + first, stop - first);
        u_square += sum_of_squares(update + first, stop - first);
      }
      squares[2 * static_cast<size_t>(part)] = p_square, squares[2 * static_cast<size_t>(part) + 1] = u_square;
    }
  });
  float ratio = 1.0f;
  if (decay != 0.0) {
    double p_square = 0, u_square = 0;
    for (int64_t part = 0; part < parts; ++part)
      p_square += squares[2 * static_cast<size_t>(part)], u_square += squares[2 * static_cast<size_t>(part) + 1];
    const auto p_norm = static_cast<float>(std::sqrt(p_square)), u_norm = static_cast<float>(std::sqrt(u_square));
    if (p_norm != 0.0f && u_norm != 0.0f) ratio = p_norm / u_norm;
  }
  const float step = static_cast<float>(lr) * ratio;
  pool.parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) { subtract_scaled(begin, end, step, update, w); });
}

}  // namespace mlph::reference
