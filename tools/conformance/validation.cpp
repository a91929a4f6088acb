#include "validation.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "bad_graphs.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/graph/validate.hpp"

namespace mlph::conformance {
namespace {

struct Outcome {
  MLPH_Code code = MLPH_OK;
  std::string message;
};

std::string code_name(MLPH_Code code) {
  switch (code) {
    case MLPH_OK: return "OK";
    case MLPH_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case MLPH_UNIMPLEMENTED: return "UNIMPLEMENTED";
    default: return "code " + std::to_string(static_cast<int>(code));
  }
}

std::string text(const Outcome& o) { return code_name(o.code) + (o.message.empty() ? "" : " '" + o.message + "'"); }

// What the SDK's validator says about `graph` to a backend that implements `ops` (every op by default).
Outcome validator_says(const MLPH_Graph& graph, const sdk::Implements& ops = sdk::Implements::everything()) {
  try {
    sdk::validate_graph(graph, ops);
    return {};
  } catch (const sdk::Error& e) {
    return {e.code(), e.what()};
  }
}

template <class List>
List without(List names, const std::string& name) {
  names.erase(std::remove(names.begin(), names.end(), name), names.end());
  return names;
}

// Whether `got` is the validator's own refusal of an op or optimizer of `graph` that the candidate does
// not implement: such a row is NOT IMPLEMENTED, as elsewhere in the suite (a subset backend conforms).
bool validator_refuses_as_unimplemented(const MLPH_Graph& graph, const Outcome& got) {
  if (got.code != MLPH_UNIMPLEMENTED) return false;
  const sdk::Implements all = sdk::Implements::everything();
  const auto same = [&](const Outcome& o) { return o.code == got.code && o.message == got.message; };
  for (size_t i = 0; graph.nodes && i < graph.n_nodes; ++i)
    if (graph.nodes[i].op && same(validator_says(graph, {without(all.ops, graph.nodes[i].op), all.optimizers})))
      return true;
  return graph.optimizer.name && same(validator_says(graph, {all.ops, without(all.optimizers, graph.optimizer.name)}));
}

// What the candidate's compile says, through the C ABI.
Outcome backend_says(const LoadedBackend& backend, const MLPH_Graph& graph) {
  MLPH_Model* model = nullptr;
  MLPH_Error* error = backend.api()->compile(backend.backend.get(), &graph, nullptr, &model);
  if (!error) {
    backend.api()->model_destroy(model);
    return {};
  }
  Outcome o{core::error_code(error), core::error_message(error)};
  core::error_free(error);
  return o;
}

}  // namespace

std::vector<Row> check_validation(const LoadedBackend& candidate, int only) {
  std::vector<Row> rows;
  const auto& graphs = bad_graphs();
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (only != 0 && static_cast<size_t>(only) != i + 1) continue;
    const auto& bad = graphs[i];
    Row& row = rows.emplace_back("validation", bad->rule, 0.0);
    row.rerun = fmt::format("--ops validation --case {}", i + 1);
    const Outcome expected = validator_says(bad->graph), got = backend_says(candidate, bad->graph);
    if (expected.code == MLPH_OK) {
      row.verdict = Verdict::fail;
      row.reason = "the SDK's validator accepts this graph: bad_graphs.cpp no longer breaks the rule";
    } else if (got.code == expected.code && got.message == expected.message) {
      continue;  // PASS
    } else if (validator_refuses_as_unimplemented(bad->graph, got)) {
      row.verdict = Verdict::not_implemented;
      row.reason = got.message;
    } else {
      row.verdict = Verdict::fail;
      row.reason = fmt::format("{} says {}, the SDK's validator {}", candidate.name, text(got), text(expected));
    }
  }
  return rows;
}

}  // namespace mlph::conformance
