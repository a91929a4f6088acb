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
// window and one more update. B's parameters must equal A's bit for bit, so `backend` is the
// candidate created with backend.deterministic=1 (ABI 1.6; an older one as it is), or null when that
// could not be: every row then says `why` (a FAIL, or NOT IMPLEMENTED when `unimplemented`). A
// backend without read_state / write_state (ABI < 1.4, NULL, or MLPH_UNIMPLEMENTED) gets NOT
// IMPLEMENTED. `only` (1-based, 0: all) keeps one optimizer's row.
struct Bitwise {
  const LoadedBackend* backend = nullptr;
  std::string why;  // when there is no backend
  bool unimplemented = false;
  std::string note;  // how the backend was created, for the rows' description
};
std::vector<Row> check_training_state(const Bitwise& candidate, uint64_t seed, int only);

}  // namespace mlph::conformance
