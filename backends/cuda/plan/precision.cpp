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

// bf16 activations end to end (issue 33 item 4), where the writer and every reader take the half type
// as stored (half_values below): a cuDNN conv (no explicit padding, no padded input side, its bias
// left to a pool chain or none: cuDNN writes y and dx and reads x and dy in the half type) and a pool
// chain (its Bf16 body: z, y, dy and dz in bf16; the fused leaky ReLU reads z for it).
// (A padded conv's input side is a padded cast of its own: it writes its output as stored, reads a cast.)
bool conv_takes_half(const NodeLowering& l) {
  return l.engine == Engine::cudnn_conv && l.conv && !l.conv->explicit_padding;
}
bool writes_half_value(const Node& node, const NodeLowering& l) {
  if (l.engine == Engine::pool_chain) return true;
  return conv_takes_half(l) && (!node.has_bias() || l.bias_in_chain);
}
bool reads_half_value(const NodeLowering& l, size_t slot) {
  return slot == 0 && ((conv_takes_half(l) && l.conv->channels == 0) || l.fused_into >= 0);
}

// Per value: stored in bf16? Graph inputs, parameters, the loss and eval outputs stay as declared; a
// pool chain's z and y are both half or both not (its body takes one type).
std::vector<bool> half_values(const Program& p, const std::vector<NodeLowering>& lowering) {
  const size_t n = p.values.size();
  std::vector<bool> half(n, false), read(n, false), pinned(n, false);
  for (int32_t v : p.inputs) pinned[static_cast<size_t>(v)] = true;
  for (const auto& param : p.params) pinned[static_cast<size_t>(param.value)] = true;
  for (int32_t v : p.eval_outputs) pinned[static_cast<size_t>(v)] = true;
  if (p.loss >= 0) pinned[static_cast<size_t>(p.loss)] = true;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& node = p.nodes[k];
    const auto out = static_cast<size_t>(node.output);
    half[out] = p.values[out].dtype == MLPH_DTYPE_F32 && writes_half_value(node, lowering[k]);
  }
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& node = p.nodes[k];
    if (lowering[k].engine == Engine::pool_chain) continue;  // reads the unstored activation (its z: the leaky ReLU)
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const auto v = static_cast<size_t>(node.inputs[i]);
      read[v] = true;
      if (!reads_half_value(lowering[k], i)) half[v] = false;
    }
  }
  for (size_t v = 0; v < n; ++v) half[v] = half[v] && read[v] && !pinned[v];
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (lowering[k].engine != Engine::pool_chain) continue;
    const auto z = static_cast<size_t>(p.nodes[static_cast<size_t>(lowering[k].chain_conv)].output);
    const auto y = static_cast<size_t>(p.nodes[k].output);
    half[z] = half[y] = half[z] && half[y];
  }
  return half;
}

}  // namespace

bool is_weight_slot(const Node& node, size_t slot) { return slot == 1 && compute_op(node.kind); }

PrecisionPlan plan_precision(const Program& p, Precision precision, const std::vector<NodeLowering>& lowering) {
  PrecisionPlan plan;
  plan.precision = precision;
  plan.loss_scaling = precision == Precision::fp16;
  for (const auto& v : p.values) plan.values.push_back(dtype_of(v.dtype));  // every value as declared
  const DType compute = compute_dtype(precision);
  if (compute == DType::bf16) {  // activations in bf16 where every end takes it (half_values)
    const std::vector<bool> half = half_values(p, lowering);
    for (size_t v = 0; v < half.size(); ++v)
      if (half[v]) plan.values[v] = DType::bf16;
  }
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
