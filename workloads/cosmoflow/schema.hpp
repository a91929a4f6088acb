// CosmoFlow's configuration keys, defaults (the MLCommons reference, v1.0+) and closed rules.
#pragma once

#include <cstddef>

#include "mlph/workload.h"

namespace mlph::cosmoflow {

const MLPH_ParamSpec* param_specs(size_t* n);

}  // namespace mlph::cosmoflow
