// Gradient accumulation (ABI 1.2): a backend must give, after a window of micro-batches whose loss
// is divided by the window's length, exactly what one batch of all of them gives.
#pragma once

#include "check.hpp"

namespace mlph::conformance {

// Trains a small graph (dense, tanh, dense, mse, l2 on the first kernel, SGD with momentum) on
// `backend` twice: 2 updates on a batch of 4, and 2 updates of 2 micro-batches of 2 each. Compares
// the losses (the window's micro-losses summed), the gradients of the first update and the final
// parameters within `precision`'s tolerance per op (tolerance_for), and fails a backend whose
// parameters move on a deferred micro-batch.
Row check_accumulation(const LoadedBackend& backend, const Tolerance& precision, uint64_t seed);

}  // namespace mlph::conformance
