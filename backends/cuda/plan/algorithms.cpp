#include "algorithms.hpp"

#include <algorithm>

namespace mlph::cuda::plan {

AlgorithmRule algorithm_rule(Precision precision, bool deterministic, size_t configured, size_t free_bytes) {
  AlgorithmRule rule;
  rule.deterministic = deterministic;
  rule.math = math_of(precision);
  rule.workspace_cap = deterministic ? configured : std::min(configured, free_bytes / 10 * 9);
  rule.selection = deterministic ? Selection::first_listed : Selection::fastest;
  rule.cublaslt_split_k = !deterministic;
  return rule;
}

bool allowed(const AlgorithmRule& rule, const Candidate& c) {
  return c.ok && c.workspace <= rule.workspace_cap && !c.down_converts &&
         (!c.tensor_cores || rule.math != MathMode::fma) && (c.deterministic || !rule.deterministic);
}

int choose(const AlgorithmRule& rule, const std::vector<Candidate>& candidates) {
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!allowed(rule, candidates[i])) continue;
    if (rule.selection == Selection::first_listed) return static_cast<int>(i);
    if (best < 0 || candidates[i].time_ms < candidates[static_cast<size_t>(best)].time_ms) best = static_cast<int>(i);
  }
  return best;
}

}  // namespace mlph::cuda::plan
