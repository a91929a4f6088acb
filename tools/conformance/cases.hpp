// The randomized one-op graphs that check a backend op by op against docs/ops.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mlph/sdk/graph/graph.hpp"
#include "tensor.hpp"

namespace mlph::conformance {

// One small graph around one op (or optimizer), with its inputs. The op's float inputs are
// trainable parameters, so read_gradient gives dL/dinput; ops that are not losses are followed by
// an mse against a random target. Evaluation-only ops (no gradient) are only evaluated.
struct OpCase {
  std::string op;           // a name from check_names()
  std::string description;  // shapes and attributes, for the table
  std::unique_ptr<sdk::GraphBuilder> graph = std::make_unique<sdk::GraphBuilder>();
  std::vector<HostTensor> inputs;      // one per graph input, fed at every step
  std::vector<double> learning_rates;  // one training step each; empty: evaluation only
  uint64_t first_step = 0;             // MLPH_StepArgs.step of the first training step
};

// Every op of docs/ops.md, then "l2" (regularization) and the optimizers, in table order.
const std::vector<std::string>& op_check_names();

// `count` cases of `name`, drawn from `seed`. A case depends only on (name, index, seed), so
// filtering with --ops never changes the others, and make_case makes one alone (--case). The first
// cases of each op cover its variants (2D and 3D, strides, groups, bias on and off...).
std::vector<OpCase> make_cases(const std::string& name, int count, uint64_t seed);
OpCase make_case(const std::string& name, int index, uint64_t seed);  // index from 0

}  // namespace mlph::conformance
