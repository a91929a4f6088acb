// The ops this backend implements, as plain loops: forward and backward of each, exactly as
// docs/ops.md defines them, and the sgd_keras update. A backward function adds into its gradient
// outputs, so a value read by two nodes receives both contributions.
#pragma once

#include <cmath>
#include <cstdint>

namespace mlp {

// dense: y[n, out] = x[n, in] · w[in, out] + b[out]; b may be null.
inline void dense_forward(int64_t n, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                          float* y) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      float sum = b ? b[o] : 0.0f;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[i * out + o];
      y[r * out + o] = sum;
    }
}

// dx += dy · wᵀ, dw += xᵀ · dy, db += dy summed over the batch (db null: no bias).
inline void dense_backward(int64_t n, int64_t in, int64_t out, const float* x, const float* w, const float* dy,
                           float* dx, float* dw, float* db) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const float g = dy[r * out + o];
      for (int64_t i = 0; i < in; ++i) {
        dx[r * in + i] += g * w[i * out + o];
        dw[i * out + o] += g * x[r * in + i];
      }
      if (db) db[o] += g;
    }
}

inline void relu_forward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
}
inline void relu_backward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] += x[i] > 0 ? dy[i] : 0.0f;
}

inline void tanh_forward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
// From the output: d tanh(x)/dx = 1 - y².
inline void tanh_backward(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
}

// scale: y = factor * x (e.g. the loss divided over an accumulation window).
inline void scale_forward(int64_t n, float factor, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = factor * x[i];
}
inline void scale_backward(int64_t n, float factor, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] += factor * dy[i];
}

// mse: mean((p - t)²) over all n elements, summed in double.
inline float mse_forward(int64_t n, const float* p, const float* t) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(p[i]) - t[i];
    sum += e * e;
  }
  return static_cast<float>(sum / static_cast<double>(n));
}
// dloss: the gradient arriving at the (scalar) loss.
inline void mse_backward(int64_t n, const float* p, const float* t, float dloss, float* dp, float* dt) {
  const float scale = 2.0f * dloss / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = scale * (p[i] - t[i]);
    dp[i] += g;
    dt[i] -= g;
  }
}

// Keras' kernel_regularizer: l2 * sum(w²) joins the loss (returned), 2 * l2 * w the gradient.
inline double l2_regularize(int64_t n, double l2, const float* w, float* dw) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(w[i]) * w[i];
    if (dw) dw[i] += static_cast<float>(2 * l2) * w[i];
  }
  return l2 * sum;
}

// sgd_keras: v = momentum * v - lr * g; w += v (the learning rate sits inside the velocity).
inline void sgd_keras_update(int64_t n, double lr, double momentum, const float* g, float* v, float* w) {
  const auto rate = static_cast<float>(lr), m = static_cast<float>(momentum);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = m * v[i] - rate * g[i];
    w[i] += v[i];
  }
}

}  // namespace mlp
