// Element-wise ops. NaN propagates through every one of them (relu included: max(NaN, 0) is NaN),
// so a diverging run shows up in the loss rather than being silently clipped.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mlph/common.h"
#include "ops.hpp"

namespace mlph::reference {
namespace {

constexpr int64_t kMinChunk = 1 << 15;  // elements: below this, waking the other threads costs more

template <class F>
void for_each_index(ThreadPool& pool, int64_t n, F&& f) {
  pool.parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

}  // namespace

void log1p_forward(ThreadPool& pool, int64_t n, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = std::log1p(x[i]); });
}

void leaky_relu_forward(ThreadPool& pool, int64_t n, float alpha, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = x[i] > 0 ? x[i] : alpha * x[i]; });
}

void leaky_relu_backward(ThreadPool& pool, int64_t n, float alpha, const float* x, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += x[i] > 0 ? dy[i] : alpha * dy[i]; });
}

void relu_forward(ThreadPool& pool, int64_t n, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = std::isnan(x[i]) ? x[i] : std::max(x[i], 0.0f); });
}

void relu_backward(ThreadPool& pool, int64_t n, const float* x, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += x[i] > 0 ? dy[i] : 0.0f; });
}

void tanh_forward(ThreadPool& pool, int64_t n, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = std::tanh(x[i]); });
}

void tanh_backward(ThreadPool& pool, int64_t n, const float* y, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += dy[i] * (1.0f - y[i] * y[i]); });
}

void scale_forward(ThreadPool& pool, int64_t n, float factor, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = factor * x[i]; });
}

void scale_backward(ThreadPool& pool, int64_t n, float factor, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += factor * dy[i]; });
}

void copy_forward(ThreadPool& pool, int64_t n, const float* x, float* y) {
  pool.parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) {
    std::memcpy(y + begin, x + begin, static_cast<size_t>(end - begin) * sizeof(float));
  });
}

void copy_backward(ThreadPool& pool, int64_t n, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += dy[i]; });
}

void fill_zero(ThreadPool& pool, int64_t n, float* x) {
  pool.parallel_for(n, kMinChunk, [&](int64_t begin, int64_t end) { std::fill(x + begin, x + end, 0.0f); });
}

void int16_to_float(ThreadPool& pool, int64_t n, const int16_t* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = static_cast<float>(x[i]); });
}

void dropout_mask(ThreadPool&, int64_t n, double rate, uint64_t seed, uint64_t node_index, uint64_t step, float* mask) {
  // Compared as in docs/ops.md's C expression `u >= rate`: the float u is promoted to double.
  const float kept = static_cast<float>(1.0 / (1.0 - rate));
  for (int64_t i = 0; i < n; ++i)
    mask[i] = static_cast<double>(mlph_uniform(seed, node_index, step, static_cast<uint64_t>(i))) >= rate ? kept : 0.0f;
}

void mask_forward(ThreadPool& pool, int64_t n, const float* mask, const float* x, float* y) {
  for_each_index(pool, n, [&](int64_t i) { y[i] = x[i] * mask[i]; });
}

void mask_backward(ThreadPool& pool, int64_t n, const float* mask, const float* dy, float* dx) {
  for_each_index(pool, n, [&](int64_t i) { dx[i] += dy[i] * mask[i]; });
}

}  // namespace mlph::reference
