// Graphs that break docs/ops.md, one per rule of the SDK's validator (sdk/graph/validate.hpp): the
// conformance suite compiles each on a backend and expects the validator's own code and line, and
// tests/sdk pins what that line says. Depends on the SDK only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mlph/sdk/graph/graph.hpp"

namespace mlph::conformance {

struct BadGraph {
  std::string rule;  // the rule it breaks, e.g. "attribute range"
  sdk::GraphBuilder builder;
  MLPH_Graph graph{};               // the builder's graph, with the edits the builder cannot make
  std::vector<MLPH_Node> nodes;     // graph.nodes points here
};

// One graph per rule, in the validator's order. Each owns everything its graph points to.
std::vector<std::unique_ptr<BadGraph>> bad_graphs();

}  // namespace mlph::conformance
