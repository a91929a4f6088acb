#include "schedule.hpp"

#include <algorithm>
#include <cmath>

#include "mlph/sdk/util/json.hpp"

namespace mlph::cosmoflow {

double lr_scale(const ScheduleSettings& s) {
  const double ratio = static_cast<double>(s.global_batch_size) / s.base_batch_size;
  if (s.scaling == "linear") return ratio;
  if (s.scaling == "sqrt") return std::sqrt(ratio);
  return 1.0;
}

double learning_rate(const ScheduleSettings& s, uint32_t epoch) {
  const double peak = s.base_lr * lr_scale(s);
  if (int64_t{epoch} < s.warmup_epochs) return s.base_lr + epoch * (peak - s.base_lr) / s.warmup_epochs;
  double factor = 1.0;
  int largest = -1;
  for (size_t i = 0; i < s.decay_boundaries.size(); ++i)
    if (s.decay_boundaries[i] < int64_t{epoch} && s.decay_boundaries[i] > largest)
      largest = s.decay_boundaries[i], factor = s.decay_factors[i];
  return peak * factor;
}

std::vector<std::pair<std::string, std::string>> hyperparameter_log(const Settings& s) {
  const ScheduleSettings& sc = s.schedule;
  std::string boundaries = "[";
  std::vector<int> sorted = sc.decay_boundaries;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) boundaries += (i ? ", " : "") + std::to_string(sorted[i]);
  boundaries += "]";
  const double max_factor =
      sc.decay_factors.empty() ? 1.0 : *std::max_element(sc.decay_factors.begin(), sc.decay_factors.end());
  return {
      {"opt_weight_decay", sdk::json_number(s.model.weight_decay)},
      {"dropout", sdk::json_number(s.model.dropout)},
      {"opt_name", "\"sgd\""},
      {"opt_base_learning_rate", sdk::json_number(sc.base_lr * lr_scale(sc))},
      {"opt_learning_rate_warmup_epochs", std::to_string(sc.warmup_epochs)},
      {"opt_learning_rate_warmup_factor", sdk::json_number(lr_scale(sc))},
      {"opt_learning_rate_decay_boundary_epochs", boundaries},
      {"opt_learning_rate_decay_factor", sdk::json_number(max_factor)},
  };
}

}  // namespace mlph::cosmoflow
