// DeepCAM's configuration keys, defaults (the MLCommons reference run, REFERENCE §2.4) and the
// closed-division rules (REFERENCE §4.2).
#pragma once

#include <cstddef>

#include "mlph/workload.h"

namespace mlph::deepcam {

const MLPH_ParamSpec* param_specs(size_t* n);

}  // namespace mlph::deepcam
