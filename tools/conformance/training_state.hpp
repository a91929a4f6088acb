// Training state (ABI 1.4, what checkpoints save): a model given another's parameters, optimizer
// state slots and open accumulation window must go on training bitwise as the other does.
#pragma once

#include <vector>

#include "check.hpp"

namespace mlph::conformance {

// One row per optimizer of the catalogue (sgd_keras, adam, adamw, lamb) on the small model in windows
// of 2 micro-batches: model A trains 2 updates and the first micro-batch of a third; a second
// model B of the same graph gets A's parameters, every state slot the catalogue names for the
// optimizer, and the pending gradient (read_state / write_state); then both train the rest of that
// window and one more update. B's parameters must equal A's bit for bit. A backend without
// read_state / write_state (ABI < 1.4, NULL, or MLPH_UNIMPLEMENTED) gets NOT IMPLEMENTED.
std::vector<Row> check_training_state(const LoadedBackend& backend, uint64_t seed);

}  // namespace mlph::conformance
