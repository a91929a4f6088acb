#include "schedule.hpp"

#include <cmath>
#include <map>
#include <numbers>

#include "mlph/sdk/util/json.hpp"

namespace mlph::deepcam {
namespace {

// PyTorch's MultiStepLR arithmetic: at each milestone hit, lr *= decay ** (times it is listed).
double decayed(double lr, const ScheduleSettings& s, int64_t t, int64_t shift, int64_t first) {
  std::map<int64_t, int> hits;
  for (int64_t m : s.milestones) ++hits[m + shift];
  for (const auto& [at, count] : hits)
    if (at >= first && at <= t) lr *= std::pow(s.decay_rate, count);
  return lr;
}

// The reference's warm-up value at scheduler time t < W (same operation order, in double).
double warmup(const ScheduleSettings& s, int64_t t) {
  const double slope = 1.0 / static_cast<double>(s.warmup_steps);
  if (s.warmup_factor == 1.0) return s.start_lr * (static_cast<double>(t) * slope);
  return s.start_lr * ((s.warmup_factor - 1.0) * static_cast<double>(t) * slope + 1.0);
}

double cosine(double eta, double from, int64_t e, int64_t t_max) {
  return eta + (from - eta) * (1.0 + std::cos(std::numbers::pi * static_cast<double>(e) / static_cast<double>(t_max))) / 2.0;
}

std::string int_list(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(values[i]);
  }
  return out + "]";
}

// JSON text built by appending: GCC 12 warns falsely (-Wrestrict) on `"literal" + std::string`.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  out += text;
  return out += '"';
}

std::string json_pair(double a, double b) {
  std::string out = "[";
  out += sdk::json_number(a);
  out += ", ";
  out += sdk::json_number(b);
  return out += ']';
}

}  // namespace

double learning_rate(const ScheduleSettings& s, uint64_t step) {
  const auto k = static_cast<int64_t>(step);
  const int64_t w = s.warmup_steps;
  const bool multistep = s.type == "multistep";
  if (w == 0) {
    if (multistep) return decayed(s.start_lr, s, k + 1, 0, 1);
    return cosine(s.eta_min, s.start_lr, k, s.t_max);
  }
  const int64_t t = k + 1;
  if (t < w) return warmup(s, t);
  const double plateau = w >= 2 ? warmup(s, w - 1) : s.start_lr;
  if (multistep) return decayed(plateau, s, t, w + 1, w);
  const int64_t e = t - w;
  return cosine(s.eta_min, e <= s.t_max ? plateau : s.start_lr, e, s.t_max);
}

std::vector<std::pair<std::string, std::string>> hyperparameter_log(const Settings& s) {
  const OptimizerSettings& o = s.optimizer;
  const ScheduleSettings& sc = s.schedule;
  using sdk::json_number;
  std::vector<std::pair<std::string, std::string>> log{
      {"batchnorm_group_size", std::to_string(s.training.batchnorm_group_size)},
      {"gradient_accumulation_frequency", std::to_string(s.training.gradient_accumulation_frequency)},
      {"checkpoint", "null"},
      {"opt_name", json_string(o.name)},
      {"opt_lr", json_number(o.lr)},
  };
  // The param-group keys of the optimizer, as the reference logs them (opt_<key>).
  const std::string betas = json_pair(o.beta1, o.beta2);
  if (o.name == "LAMB") {
    log.insert(log.end(), {{"opt_bias_correction", "true"},
                           {"opt_betas", betas},
                           {"opt_eps", json_number(o.eps)},
                           {"opt_weight_decay", json_number(o.weight_decay)},
                           {"opt_grad_averaging", "true"},
                           {"opt_max_grad_norm", json_number(o.max_grad_norm)}});
  } else {
    log.insert(log.end(), {{"opt_betas", betas},
                           {"opt_eps", json_number(o.eps)},
                           {"opt_weight_decay", json_number(o.weight_decay)},
                           {"opt_amsgrad", "false"}});
  }
  log.emplace_back("scheduler_type", json_string(sc.type));
  if (sc.type == "multistep") {
    log.emplace_back("scheduler_milestones", int_list(sc.milestones));
    log.emplace_back("scheduler_decay_rate", json_number(sc.decay_rate));
  } else {
    log.emplace_back("scheduler_t_max", std::to_string(sc.t_max));
    log.emplace_back("scheduler_eta_min", json_number(sc.eta_min));
  }
  log.emplace_back("scheduler_lr_warmup_steps", std::to_string(sc.warmup_steps));
  log.emplace_back("scheduler_lr_warmup_factor", json_number(sc.warmup_factor));
  return log;
}

}  // namespace mlph::deepcam
