#include "precision.hpp"

#include <cmath>

namespace mlph::cuda::plan {
namespace {

// The ops that compute in compute_dtype(precision) (the catalogue's reduced_precision ops).
constexpr OpKind kComputeOps[] = {OpKind::conv, OpKind::conv_transpose, OpKind::dense};
constexpr size_t kBiasSlot = 2;  // conv, conv_transpose, dense: a bias is fp32 in every precision

bool compute_op(OpKind op) {
  for (OpKind entry : kComputeOps)
    if (entry == op) return true;
  return false;
}

// The type a library writes in: cuDNN writes y and dx in x's type, cuBLASLt (dense, pointwise
// convs) writes D in fp32.
bool writes_half(Engine engine) { return engine == Engine::cudnn_conv || engine == Engine::cudnn_conv_transpose; }

}  // namespace

bool is_weight_slot(const Node& node, size_t slot) { return slot == 1 && compute_op(node.kind); }

PrecisionPlan plan_precision(const Program& p, Precision precision, const std::vector<NodeLowering>& lowering) {
  PrecisionPlan plan;
  plan.precision = precision;
  plan.loss_scaling = precision == Precision::fp16;
  for (const auto& v : p.values) plan.values.push_back(dtype_of(v.dtype));  // every value as declared
  const DType compute = compute_dtype(precision);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& node = p.nodes[k];
    NodePrecision n;
    n.math = math_of(precision);
    const bool op = compute_op(node.kind) && lowering[k].engine != Engine::depthwise;  // depthwise: fp32 kernel
    if (op) {
      n.data = compute;
      n.writes = writes_half(lowering[k].engine) ? compute : DType::f32;
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const DType stored = plan.values[static_cast<size_t>(node.inputs[i])];
      n.reads.push_back(op && i != kBiasSlot && stored == DType::f32 ? compute : stored);
    }
    plan.nodes.push_back(std::move(n));
  }
  return plan;
}

bool LossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    scale_ = static_cast<float>(scale_ * settings_.backoff);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ == settings_.interval) {
    const auto grown = static_cast<float>(scale_ * settings_.growth);
    if (std::isfinite(grown)) scale_ = grown;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace mlph::cuda::plan
