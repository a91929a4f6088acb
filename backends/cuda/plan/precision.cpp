#include "precision.hpp"

#include <cmath>

namespace mlph::cuda::plan {
namespace {

enum class Class { compute, fp32, follow };

// An op's class and its inputs read in fp32 whatever the precision (per-channel parameters, biases),
// as a bit set of input slots. Ops not listed follow their data inputs.
struct OpPrecision {
  OpKind op;
  Class cls;
  unsigned fp32_slots;
};
constexpr OpPrecision kOps[] = {
    {OpKind::conv, Class::compute, 1u << 2},
    {OpKind::conv_transpose, Class::compute, 1u << 2},
    {OpKind::dense, Class::compute, 1u << 2},
    {OpKind::log1p, Class::fp32, 0},
    {OpKind::shift_scale, Class::fp32, 0},
    {OpKind::mse, Class::fp32, 0},
    {OpKind::abs_error_sum, Class::fp32, 0},
    {OpKind::softmax_cross_entropy, Class::fp32, 0},
    {OpKind::iou, Class::fp32, 0},
    {OpKind::batch_norm, Class::follow, 0b11110},
    {OpKind::channel_affine, Class::follow, 0b110},
};

OpPrecision precision_of(OpKind op) {
  for (const OpPrecision& entry : kOps)
    if (entry.op == op) return entry;
  return {op, Class::follow, 0};
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

}  // namespace

bool is_weight_slot(const Node& node, size_t slot) {
  return slot == 1 && precision_of(node.kind).cls == Class::compute;
}

PrecisionPlan plan_precision(const Program& p, Precision precision) {
  PrecisionPlan plan;
  plan.precision = precision;
  plan.loss_scaling = precision == Precision::fp16;
  for (const auto& v : p.values) plan.values.push_back(dtype_of(v.dtype));  // inputs, parameters: as declared
  const DType half = compute_dtype(precision);
  for (const Node& node : p.nodes) {
    const OpPrecision op = precision_of(node.kind);
    NodePrecision n;
    n.math = math_of(precision);
    auto fixed = [&](size_t slot) { return (op.fp32_slots >> slot & 1u) != 0; };
    if (op.cls == Class::compute) {
      n.data = half;
    } else if (op.cls == Class::fp32) {
      n.data = DType::f32;
    } else {  // follow: half only when every float data input is half (and there is one)
      bool all_half = false;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const DType stored = plan.values[static_cast<size_t>(node.inputs[i])];
        if (fixed(i) || !is_float(stored)) continue;
        if (stored == DType::f32) {
          all_half = false;
          break;
        }
        all_half = true;
      }
      n.data = all_half ? half : DType::f32;
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const DType stored = plan.values[static_cast<size_t>(node.inputs[i])];
      n.reads.push_back(!is_float(stored) ? stored : fixed(i) ? DType::f32 : n.data);
    }
    plan.values[static_cast<size_t>(node.output)] = n.data;
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
