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
  const bool half_data = rule.math == MathMode::tensor_op;  // bf16, fp16: nothing to convert down
  return c.ok && c.workspace <= rule.workspace_cap && (!c.down_converts || half_data) &&
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

ConvKey conv_key(const ConvPlan& c, DType data, MathMode math, int pass) {
  ConvKey key;
  auto add = [&](auto... values) { (key.fields.push_back(static_cast<int64_t>(values)), ...); };
  auto add_tensor = [&](const TensorDesc& t) {
    add(t.rank);
    for (int d = 0; d < t.rank; ++d) add(t.dims[static_cast<size_t>(d)], t.strides[static_cast<size_t>(d)]);
  };
  add(pass, static_cast<int>(data), static_cast<int>(math), c.spatial, c.groups, c.explicit_padding);
  add_tensor(c.explicit_padding ? c.padded : c.in);
  add_tensor(c.out);
  add(c.filter.rank);
  for (int d = 0; d < c.filter.rank; ++d) add(c.filter.dims[static_cast<size_t>(d)]);
  for (int d = 0; d < c.spatial; ++d) {
    const auto i = static_cast<size_t>(d);
    add(c.pad[i], c.stride[i], c.dilation[i]);
  }
  return key;
}

}  // namespace mlph::cuda::plan
