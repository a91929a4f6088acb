// CosmoFlow's epoch-wise learning rate (REFERENCE §1.3, utils/optimizers.py of the reference):
//   peak = base_lr * scale, scale = GBS/base_batch_size (linear) | its sqrt | 1
//   epoch < warmup:  base_lr + epoch * (peak - base_lr) / warmup
//   otherwise:       peak * factor of the largest boundary b with b < epoch (strict), 1 if none
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "settings.hpp"

namespace mlph::cosmoflow {

double lr_scale(const ScheduleSettings& s);
double learning_rate(const ScheduleSettings& s, uint32_t epoch);

// The hyperparameter lines the reference logs, in its order: key and JSON value.
std::vector<std::pair<std::string, std::string>> hyperparameter_log(const Settings& s);

}  // namespace mlph::cosmoflow
