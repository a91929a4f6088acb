// The graph rules of docs/ops.md: every backend must check graphs with the SDK's validator, so that a
// bad graph gets the same code and one-line error from every backend.
#pragma once

#include <vector>

#include "check.hpp"

namespace mlph::conformance {

// One row per rule of the validator (bad_graphs.hpp): the candidate compiles a graph that breaks it
// and must return exactly the validator's code and message. A backend with checks of its own
// fails these rows even when it refuses the same graphs. `only` (1-based, 0: all) keeps one rule's row.
std::vector<Row> check_validation(const LoadedBackend& candidate, int only);

}  // namespace mlph::conformance
