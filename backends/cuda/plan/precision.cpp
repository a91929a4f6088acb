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

// The type a library writes in: cuDNN writes y and dx in x's type; cuBLASLt (dense, pointwise convs)
// writes D in fp32 unless its output is stored in half (takes_half below: D set to the half type).
bool writes_half(Engine engine) { return engine == Engine::cudnn_conv || engine == Engine::cudnn_conv_transpose; }

// Half activations end to end (issue 33 item 4): under bf16 or fp16 a value is stored in that type where
// the node writing it and every node reading it take the half type as stored (half_values below); the
// rule is the same for both (every body below is templated on the stored type, cuDNN and cuBLASLt take
// either), so "bf16" below reads "the compute type". Per engine, "takes
// stored half":
//   cuDNN conv and conv_transpose   no explicit padding, no padded channels on that side: x, y, dy and
//                                   dx in the half type (a bias added to y in place, bias_forward on T)
//   cuBLASLt (dense, pointwise conv) A = x read as stored, D = y (and dx) written in bf16 (a bias
//                                   added to y in place, bias_forward on T: no epilogue)
//   depthwise (our kernel)          x, y, dy, dx as T (depthwise.hpp; weights and dw fp32)
//   our kernels: batch_norm, relu, leaky_relu, tanh, scale, dropout, add, concat, global_avg_pool,
//                                   broadcast, channel_affine (bodies on
//                                   the stored type); a relu fused into its batch norm or add; a pool
//                                   chain and the leaky ReLU inside it
//   shift_scale (the input's normalization) y only: x fp32 (a graph input), y as T
//   reshape (an alias)              its input's bytes: x and y in one type
// Everything else (the losses, metrics...) reads
// and writes fp32: a value one of them reads stays fp32. Our kernels take ONE stored type for their
// activations (ties below): a batch norm's x and y, an add's or concat's inputs and output, a fused
// relu's output and its producer's inputs, a pool chain's z and y, a global pooling's or a broadcast's
// x and y, a channel affine's x and y, a reshape's x and y. (cuDNN and cuBLASLt take x and y in
// either type: they cut the ties, so that one fp32 reader does not make a whole network fp32.
// cuBLASLt's dx is D of its own gemm, in the gradient's stored type.)
bool conv_takes_half(const NodeLowering& l) {
  return (l.engine == Engine::cudnn_conv || l.engine == Engine::cudnn_conv_transpose) && l.conv &&
         !l.conv->explicit_padding;
}
// Our kernels whose inputs past the first are fp32 parameters (gamma and beta, w and b).
bool has_parameters(const Node& node) {
  return node.kind == OpKind::batch_norm || node.kind == OpKind::channel_affine;
}
bool kernel_takes_half(const Node& node) {
  switch (node.kind) {
    case OpKind::batch_norm:
    case OpKind::relu:
    case OpKind::add:
    case OpKind::concat:
    case OpKind::global_avg_pool:
    case OpKind::broadcast:
    case OpKind::channel_affine:  // x and y; w and b fp32
    case OpKind::leaky_relu:
    case OpKind::tanh:
    case OpKind::scale:
    case OpKind::dropout:
    case OpKind::max_pool:  // outside a pool chain (pool_chain=off)
      return true;
    default:
      return false;
  }
}
// Does node take its data input `slot` as stored in bf16?
bool reads_half_value(const Node& node, const NodeLowering& l, size_t slot) {
  switch (l.engine) {
    case Engine::cudnn_conv:
    case Engine::cudnn_conv_transpose:  // the adjoint's channels are padded on the output side only
      return slot == 0 && conv_takes_half(l) && (l.conv->transpose || l.conv->channels == 0);
    case Engine::cublaslt_dense:
    case Engine::depthwise:
      return slot == 0;
    case Engine::fused:
    case Engine::alias:  // a reshape: its input's bytes, whatever their type (tied)
      return true;
    case Engine::kernel:
      return kernel_takes_half(node) && (!has_parameters(node) || slot == 0);
    default:
      return false;
  }
}
// Does node write its output as stored in bf16?
bool writes_half_value(const Node& node, const NodeLowering& l) {
  switch (l.engine) {
    case Engine::cudnn_conv:
    case Engine::cudnn_conv_transpose:
      return conv_takes_half(l) && (!l.conv->transpose || l.conv->channels == 0);  // a bias added to y as stored
    case Engine::cublaslt_dense:  // a bias by our kernel on y as stored (the epilogue only on an fp32 D)
    case Engine::depthwise:
    case Engine::fused:
    case Engine::pool_chain:
    case Engine::alias:
      return true;
    case Engine::kernel:  // shift_scale: y only (its x is fp32: reads_half_value), so no tie
      return kernel_takes_half(node) || node.kind == OpKind::shift_scale;
    default:
      return false;
  }
}

// The values that one of our kernels reads and writes in one type (see above): groups of value indices.
std::vector<std::vector<size_t>> tied_values(const Program& p, const std::vector<NodeLowering>& lowering) {
  std::vector<std::vector<size_t>> ties;
  auto v = [](int32_t value) { return static_cast<size_t>(value); };
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& node = p.nodes[k];
    const NodeLowering& l = lowering[k];
    std::vector<size_t> tie;
    if (l.engine == Engine::pool_chain) {
      tie = {v(p.nodes[static_cast<size_t>(l.chain_conv)].output), v(node.output)};
    } else if (l.engine == Engine::depthwise || l.engine == Engine::alias) {
      tie = {v(node.inputs[0]), v(node.output)};
    } else if (l.engine == Engine::kernel && kernel_takes_half(node)) {
      const size_t data = has_parameters(node) ? 1 : node.inputs.size();
      for (size_t i = 0; i < data; ++i) tie.push_back(v(node.inputs[i]));
      // A fused relu's output is what this node writes (its own output is never stored).
      tie.push_back(v(l.fused_relu >= 0 ? p.nodes[static_cast<size_t>(l.fused_relu)].output : node.output));
    }
    if (!tie.empty()) ties.push_back(std::move(tie));
  }
  return ties;
}

// Per value: stored in bf16? Graph inputs, parameters, the loss and eval outputs stay as declared.
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
      if (!reads_half_value(node, lowering[k], i) && !is_weight_slot(node, i)) half[v] = false;
    }
  }
  for (size_t v = 0; v < n; ++v) half[v] = half[v] && read[v] && !pinned[v];
  const std::vector<std::vector<size_t>> ties = tied_values(p, lowering);
  for (bool changed = true; changed;) {  // one fp32 value makes its whole tie fp32, until nothing changes
    changed = false;
    for (const auto& tie : ties) {
      bool all = true;
      for (size_t v : tie) all = all && half[v];
      if (all) continue;
      for (size_t v : tie) changed = changed || half[v], half[v] = false;
    }
  }
  for (size_t k = 0; k < p.nodes.size(); ++k)  // an unstored value: its writer's type, for the record
    if (lowering[k].fused_relu >= 0)
      half[static_cast<size_t>(p.nodes[k].output)] = half[static_cast<size_t>(p.nodes[static_cast<size_t>(lowering[k].fused_relu)].output)];
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
  const bool half_storage = compute == DType::bf16 || compute == DType::f16;
  if (half_storage) {  // activations in the half type where every end takes it (half_values), bf16 or fp16 alike
    const std::vector<bool> half = half_values(p, lowering);
    for (size_t v = 0; v < half.size(); ++v)
      if (half[v]) plan.values[v] = compute;
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
    const int64_t relu = lowering[k].fused_relu;  // what the node writes: a fused relu's output
    const DType out = plan.values[static_cast<size_t>(relu >= 0 ? p.nodes[static_cast<size_t>(relu)].output : node.output)];
    const bool half_out = half_storage && out == compute;
    if (op && half_out) n.writes = compute;  // cuBLASLt's D in the half type (writes_half_value)
    if (!op && half_out) n.data = n.writes = compute;  // our kernels' T: the stored type
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
