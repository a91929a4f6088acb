// How another CosmoFlow run's logged hyperparameters become this workload's config keys.
#pragma once

#include <span>

#include "mlph/sdk/workload/hparams.hpp"

namespace mlph::cosmoflow {

std::span<const sdk::HparamRule> hparam_rules();

}  // namespace mlph::cosmoflow
