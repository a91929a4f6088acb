#include "optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "net.hpp"  // parallel_for

namespace mlph::onednn {

namespace {
using Kind = OptimizerConfig::Kind;
const std::map<std::string, Kind>& kinds() {
  static const std::map<std::string, Kind> table = {
      {"sgd_keras", Kind::sgd_keras}, {"adam", Kind::adam}, {"adamw", Kind::adamw}, {"lamb", Kind::lamb}};
  return table;
}
}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : kinds()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

OptimizerConfig optimizer_config(const sdk::ValidOptimizer& opt) {
  OptimizerConfig c;
  c.kind = kinds().at(opt.name);
  for (const char* slot : sdk::schema::find_optimizer(opt.name)->state) c.state.emplace_back(slot);
  if (c.kind == Kind::sgd_keras) {
    c.momentum = opt.attrs.number("momentum");
    return c;
  }
  c.beta1 = opt.attrs.number("beta1"), c.beta2 = opt.attrs.number("beta2");
  c.eps = opt.attrs.number("eps"), c.weight_decay = opt.attrs.number("weight_decay");
  if (c.kind == Kind::lamb) c.max_grad_norm = opt.attrs.number("max_grad_norm");
  return c;
}

namespace {

// Every loop runs on the OpenMP threads, vectorized (DeepCAM's 56M parameters took 0.4 s a step
// on one core). Sums of squares add 8 interleaved lanes per fixed slice of [0, n), in a fixed
// order: the same result on every run, whatever the thread count.
double squares(int64_t n, const float* x) {
  constexpr int64_t kLanes = 8;
  const int64_t slices = n < (1 << 14) ? 1 : 64;
  std::vector<double> partial(size_t(slices), 0.0);
#pragma omp parallel for schedule(static) if (slices > 1)
  for (int64_t slice = 0; slice < slices; ++slice) {
    double lanes[kLanes] = {};
    int64_t i = n * slice / slices;
    const int64_t end = n * (slice + 1) / slices;
    for (; i + kLanes <= end; i += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lanes[k] += double(x[i + k]) * x[i + k];
    for (; i < end; ++i) lanes[0] += double(x[i]) * x[i];
    for (double lane : lanes) partial[size_t(slice)] += lane;
  }
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}
double norm(int64_t n, const float* x) { return std::sqrt(squares(n, x)); }

// 1 - beta^t in double, cast to float (docs/ops.md).
double bias_correction(double beta, uint64_t t) { return float(1.0 - std::pow(beta, double(t))); }

void sgd_keras(OptimizerSlot& s, double lr, double momentum) {
  const auto rate = float(lr), m = float(momentum);
  float *w = s.w, *velocity = s.m.data();
  const float* g = s.g;
  parallel_for(s.n, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      velocity[i] = m * velocity[i] - rate * g[i];
      w[i] += velocity[i];
    }
  });
}

// Adam's step over [begin, end), as a function of its own so that it vectorizes (see lamb_update).
struct AdamConstants {
  float shrink, coupled, b1, b2, step_size, bc2_sqrt, eps;
};
void adam_update(int64_t begin, int64_t end, const AdamConstants k, const float* __restrict grad, float* __restrict w,
                 float* __restrict m, float* __restrict v) {
  for (int64_t i = begin; i < end; ++i) {
    w[i] *= k.shrink;
    const float g = grad[i] + k.coupled * w[i];
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * g;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * g * g;
    w[i] -= k.step_size * m[i] / (std::sqrt(v[i]) / k.bc2_sqrt + k.eps);
  }
}

void adam(OptimizerSlot& s, const OptimizerConfig& c, double lr, uint64_t t, bool decoupled) {
  const double decay = c.weight_decay * s.decay_multiplier;
  const AdamConstants k{float(decoupled ? 1.0 - lr * decay : 1.0),
                        float(decoupled ? 0.0 : decay),
                        float(c.beta1),
                        float(c.beta2),
                        float(lr / bias_correction(c.beta1, t)),
                        float(std::sqrt(bias_correction(c.beta2, t))),
                        float(c.eps)};
  float *w = s.w, *m = s.m.data(), *v = s.v.data();
  const float* grad = s.g;
  parallel_for(s.n, [=](int64_t begin, int64_t end) { adam_update(begin, end, k, grad, w, m, v); });
}

// LAMB's moments and update direction over [begin, end): a function of its own so that the
// loop vectorizes (no aliasing between the arrays, the constants in registers).
struct LambConstants {
  float clip, b1, b2, bc1, bc2, eps, wd;
};
void lamb_update(int64_t begin, int64_t end, const LambConstants k, const float* __restrict grad,
                 const float* __restrict w, float* __restrict m, float* __restrict v, float* __restrict update) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] / k.clip;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * g;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * g * g;
    update[i] = (m[i] / k.bc1) / (std::sqrt(v[i] / k.bc2) + k.eps) + k.wd * w[i];
  }
}

void lamb(OptimizerSlot& s, const OptimizerConfig& c, double lr, uint64_t t, float clip, std::vector<float>& u) {
  const double decay = c.weight_decay * s.decay_multiplier;
  const LambConstants k{clip, float(c.beta1), float(c.beta2), float(bias_correction(c.beta1, t)),
                        float(bias_correction(c.beta2, t)), float(c.eps), float(decay)};
  u.resize(size_t(s.n));
  float *w = s.w, *m = s.m.data(), *v = s.v.data(), *update = u.data();
  const float* grad = s.g;
  parallel_for(s.n, [=](int64_t begin, int64_t end) { lamb_update(begin, end, k, grad, w, m, v, update); });
  float ratio = 1.0f;
  if (decay != 0.0) {
    const auto p_norm = float(norm(s.n, s.w)), u_norm = float(norm(s.n, u.data()));
    if (p_norm != 0.0f && u_norm != 0.0f) ratio = p_norm / u_norm;
  }
  const float step = float(lr) * ratio;
  parallel_for(s.n, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) w[i] -= step * update[i];
  });
}

}  // namespace

void apply_optimizer(const OptimizerConfig& c, std::vector<OptimizerSlot>& slots, double lr, uint64_t step,
                     std::vector<float>& scratch) {
  float clip = 1.0f;
  if (c.kind == Kind::lamb) {  // the global norm of all gradients together
    double sum = 0;
    for (const OptimizerSlot& s : slots) sum += squares(s.n, s.g);
    const double global = std::sqrt(sum);
    if (global > c.max_grad_norm) clip = float(global / c.max_grad_norm);
  }
  for (OptimizerSlot& s : slots) {
    if (s.m.empty()) s.m.assign(size_t(s.n), 0.0f);
    if (c.kind != Kind::sgd_keras && s.v.empty()) s.v.assign(size_t(s.n), 0.0f);
    switch (c.kind) {
      case Kind::sgd_keras: sgd_keras(s, lr, c.momentum); break;
      case Kind::adam: adam(s, c, lr, step + 1, false); break;
      case Kind::adamw: adam(s, c, lr, step + 1, true); break;
      case Kind::lamb: lamb(s, c, lr, step + 1, clip, scratch); break;
    }
  }
}

}  // namespace mlph::onednn
