#include "optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "mlph/sdk/error.hpp"
#include "mlph/sdk/graph.hpp"

namespace mlph::onednn {

OptimizerConfig read_optimizer(const MLPH_Optimizer& opt) {
  const std::string name = opt.name ? opt.name : "";
  OptimizerConfig c;
  std::vector<std::string> known;
  if (name == "sgd_keras") c.kind = OptimizerConfig::Kind::sgd_keras, known = {"momentum"};
  else if (name == "adam") c.kind = OptimizerConfig::Kind::adam;
  else if (name == "adamw") c.kind = OptimizerConfig::Kind::adamw;
  else if (name == "lamb") c.kind = OptimizerConfig::Kind::lamb;
  else sdk::fail(MLPH_UNIMPLEMENTED, "onednn-cpu backend: optimizer '" + name + "' is not implemented");
  if (known.empty()) known = {"beta1", "beta2", "eps", "weight_decay"};
  if (c.kind == OptimizerConfig::Kind::lamb) known.push_back("max_grad_norm");
  for (size_t a = 0; a < opt.n_attrs; ++a)
    if (std::find(known.begin(), known.end(), opt.attrs[a].key) == known.end())
      sdk::fail(MLPH_UNIMPLEMENTED, "onednn-cpu backend: optimizer " + name + ": attribute '" + opt.attrs[a].key +
                                        "' is not implemented");
  const sdk::Attrs attrs(opt.attrs, opt.n_attrs, "optimizer " + name);
  c.momentum = attrs.number("momentum", 0.0);
  c.beta1 = attrs.number("beta1", c.beta1), c.beta2 = attrs.number("beta2", c.beta2);
  c.eps = attrs.number("eps", c.eps), c.weight_decay = attrs.number("weight_decay", 0.0);
  c.max_grad_norm = attrs.number("max_grad_norm", c.max_grad_norm);
  if (!(c.momentum >= 0.0)) sdk::fail(MLPH_INVALID_ARGUMENT, "onednn-cpu backend: sgd_keras momentum must be >= 0");
  return c;
}

namespace {

double squares(int64_t n, const float* x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  return sum;
}
double norm(int64_t n, const float* x) { return std::sqrt(squares(n, x)); }

// 1 - beta^t in double, cast to float (docs/ops.md).
double bias_correction(double beta, uint64_t t) { return float(1.0 - std::pow(beta, double(t))); }

void sgd_keras(OptimizerSlot& s, double lr, double momentum) {
  const auto rate = float(lr), m = float(momentum);
  for (int64_t i = 0; i < s.n; ++i) {
    s.m[size_t(i)] = m * s.m[size_t(i)] - rate * s.g[i];
    s.w[i] += s.m[size_t(i)];
  }
}

void adam(OptimizerSlot& s, const OptimizerConfig& c, double lr, uint64_t t, bool decoupled) {
  const double decay = c.weight_decay * s.decay_multiplier;
  const auto b1 = float(c.beta1), b2 = float(c.beta2), eps = float(c.eps);
  const auto step_size = float(lr / bias_correction(c.beta1, t));
  const auto bc2_sqrt = float(std::sqrt(bias_correction(c.beta2, t)));
  const auto coupled = float(decoupled ? 0.0 : decay), shrink = float(decoupled ? 1.0 - lr * decay : 1.0);
  float *m = s.m.data(), *v = s.v.data();
  for (int64_t i = 0; i < s.n; ++i) {
    s.w[i] *= shrink;
    const float g = s.g[i] + coupled * s.w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    s.w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

void lamb(OptimizerSlot& s, const OptimizerConfig& c, double lr, uint64_t t, float clip, std::vector<float>& u) {
  const double decay = c.weight_decay * s.decay_multiplier;
  const auto b1 = float(c.beta1), b2 = float(c.beta2), eps = float(c.eps), wd = float(decay);
  const auto bc1 = float(bias_correction(c.beta1, t)), bc2 = float(bias_correction(c.beta2, t));
  u.resize(size_t(s.n));
  float *m = s.m.data(), *v = s.v.data();
  for (int64_t i = 0; i < s.n; ++i) {
    const float g = s.g[i] / clip;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    u[size_t(i)] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * s.w[i];
  }
  float ratio = 1.0f;
  if (decay != 0.0) {
    const auto p_norm = float(norm(s.n, s.w)), u_norm = float(norm(s.n, u.data()));
    if (p_norm != 0.0f && u_norm != 0.0f) ratio = p_norm / u_norm;
  }
  const float step = float(lr) * ratio;
  for (int64_t i = 0; i < s.n; ++i) s.w[i] -= step * u[size_t(i)];
}

}  // namespace

void apply_optimizer(const OptimizerConfig& c, std::vector<OptimizerSlot>& slots, double lr, uint64_t step,
                     std::vector<float>& scratch) {
  using Kind = OptimizerConfig::Kind;
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
