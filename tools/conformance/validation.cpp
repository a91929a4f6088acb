#include "validation.hpp"

#include <fmt/format.h>

#include "bad_graphs.hpp"
#include "mlph/core/host.hpp"
#include "mlph/sdk/validate.hpp"

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

// What the SDK's validator says about `graph`, for a backend that implements every op.
Outcome validator_says(const MLPH_Graph& graph) {
  try {
    sdk::validate_graph(graph, sdk::Implements::everything());
    return {};
  } catch (const sdk::Error& e) {
    return {e.code(), e.what()};
  }
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

std::vector<Row> check_validation(const LoadedBackend& candidate) {
  std::vector<Row> rows;
  for (const auto& bad : bad_graphs()) {
    Row& row = rows.emplace_back("validation", bad->rule, 0.0);
    const Outcome expected = validator_says(bad->graph), got = backend_says(candidate, bad->graph);
    if (expected.code == MLPH_OK) {
      row.verdict = Verdict::fail;
      row.reason = "the SDK's validator accepts this graph: bad_graphs.cpp no longer breaks the rule";
    } else if (got.code != expected.code || got.message != expected.message) {
      row.verdict = Verdict::fail;
      row.reason = fmt::format("{} says {}, the SDK's validator {}", candidate.name, text(got), text(expected));
    }
  }
  return rows;
}

}  // namespace mlph::conformance
