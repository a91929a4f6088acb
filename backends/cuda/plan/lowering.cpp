#include "lowering.hpp"

#include <algorithm>
#include <climits>

namespace mlph::cuda::plan {
namespace {

// cuDNN's legacy descriptors take int dims and strides: every tensor must index in 32 bits.
void check_32_bit(const Node& node, const char* what, const TensorDesc& t) {
  int64_t count = 1;
  for (int d = 0; d < t.rank; ++d) count *= t.dims[static_cast<size_t>(d)];
  if (count > INT_MAX)
    fail_node(node, std::string(what) + " has " + std::to_string(count) +
                        " elements, more than cuDNN indexes (2^31 - 1): use a smaller batch");
}

bool is_parameter(const Program& p, int32_t value) {
  return std::any_of(p.params.begin(), p.params.end(), [&](const auto& param) { return param.value == value; });
}

// The device keeps its own layout (and type) of conv and dense weights, made from the parameter.
void check_weights_are_parameters(const Program& p, const Node& node) {
  if (!is_parameter(p, node.inputs[1]))
    fail_node(node, "its weights '" + p.value(node.inputs[1]).name +
                        "' are computed by the graph; the cuda backend needs them to be a parameter");
}

// cuDNN pads both sides alike: symmetric padding `before` is exact when it yields the same output size.
bool symmetric_is_exact(const sdk::program::Window& w, size_t e) {
  const int64_t span = w.in[e] + 2 * w.pad_before[e] - w.dilation[e] * (w.kernel[e] - 1) - 1;
  return span >= 0 && span / w.stride[e] + 1 == w.out[e];
}

// How many nodes read value `v`, and whether the step's results need it (a loss, an eval output).
size_t readers_of(const Program& p, int32_t v) {
  size_t n = 0;
  for (const Node& node : p.nodes) n += static_cast<size_t>(std::count(node.inputs.begin(), node.inputs.end(), v));
  n += static_cast<size_t>(std::count(p.eval_outputs.begin(), p.eval_outputs.end(), v));
  return n + (p.loss == v ? 1 : 0);
}

// batch_norm (our kernels) or add -> relu, the producer's output read by that relu alone: one node.
void fuse_relus(const Program& p, std::vector<NodeLowering>& lowered) {
  for (size_t k = 0; k + 1 < p.nodes.size(); ++k) {
    const Node &producer = p.nodes[k], &relu = p.nodes[k + 1];
    const bool fusable = producer.kind == OpKind::batch_norm ||
                         (producer.kind == OpKind::add && !p.value(producer.output).shape.empty());  // [rows, C]
    if (!fusable || lowered[k].engine != Engine::kernel || relu.kind != OpKind::relu ||
        relu.inputs[0] != producer.output || readers_of(p, producer.output) != 1)
      continue;
    lowered[k].fused_relu = static_cast<int64_t>(k + 1);
    lowered[k + 1].engine = Engine::fused;
  }
}

// Whether a max-pool window tiles its input with at most 255 taps and no padding
// (kernels/pool_chain.hpp's pool_chain_takes, without its header).
bool pool_chain_window(const sdk::program::Window& w) {
  for (size_t d = 0; d < 3; ++d)
    if (w.kernel[d] != w.stride[d] || w.pad_before[d] != 0 || w.pad_after[d] != 0 || w.dilation[d] != 1 ||
        w.out[d] * w.kernel[d] > w.in[d])
      return false;
  return w.taps() <= 255;
}

// conv (cuDNN) -> leaky_relu -> max_pool, each output read by the next node alone: one pool chain.
void fuse_pool_chains(const Program& p, std::vector<NodeLowering>& lowered) {
  for (size_t k = 0; k + 2 < p.nodes.size(); ++k) {
    const Node &conv = p.nodes[k], &act = p.nodes[k + 1], &pool = p.nodes[k + 2];
    if (lowered[k].engine != Engine::cudnn_conv || act.kind != OpKind::leaky_relu || pool.kind != OpKind::max_pool ||
        act.inputs[0] != conv.output || pool.inputs[0] != act.output || readers_of(p, conv.output) != 1 ||
        readers_of(p, act.output) != 1 || lowered[k + 1].engine != Engine::kernel || !pool_chain_window(pool.window))
      continue;
    lowered[k].bias_in_chain = conv.has_bias();
    lowered[k + 1].engine = Engine::fused;
    lowered[k + 1].fused_into = static_cast<int64_t>(k + 2);
    lowered[k + 2].engine = Engine::pool_chain;
    lowered[k + 2].chain_conv = static_cast<int64_t>(k);
  }
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

sdk::Implements implemented() { return sdk::program::implements({OpKind::halo_exchange, OpKind::spatial_gather}); }

const char* name_of(Engine engine) {
  static const char* const names[] = {"cudnn_conv", "cudnn_conv_transpose", "cudnn_batch_norm",
                                      "cublaslt_dense", "kernel", "alias", "depthwise", "fused", "pool_chain"};
  return names[static_cast<size_t>(engine)];
}

TensorDesc channels_last(const std::vector<int64_t>& shape) {
  TensorDesc t;
  t.rank = static_cast<int>(shape.size());
  const size_t spatial = shape.size() - 2;
  t.dims[0] = shape[0], t.dims[1] = shape.back();
  for (size_t d = 0; d < spatial; ++d) t.dims[2 + d] = shape[1 + d];
  int64_t stride = shape.back();  // C is innermost, then the spatial dims from the last
  t.strides[1] = 1;
  for (size_t d = spatial; d-- > 0;) {
    t.strides[2 + d] = stride;
    stride *= shape[1 + d];
  }
  t.strides[0] = stride;
  return t;
}

ConvPlan plan_conv(const Program& p, const Node& node) {
  const sdk::program::Window& w = node.window;
  ConvPlan c;
  c.transpose = node.kind == OpKind::conv_transpose;
  c.spatial = static_cast<int>(p.value(node.inputs[0]).shape.size()) - 2;
  c.groups = w.groups;
  c.bias = node.has_bias();
  const size_t first = static_cast<size_t>(3 - c.spatial);  // the window's dims are right-aligned into 3
  std::vector<int64_t> in{w.batch}, out{w.batch}, padded{w.batch};
  bool exact = true;
  for (size_t e = first; e < 3; ++e) exact = exact && symmetric_is_exact(w, e);
  c.explicit_padding = !exact;
  c.filter.rank = c.spatial + 2;
  c.filter.dims[0] = w.out_channels, c.filter.dims[1] = w.in_channels / w.groups;
  c.filter.rows = w.taps() * (w.in_channels / w.groups), c.filter.cols = w.out_channels;
  for (size_t e = first; e < 3; ++e) {
    const size_t d = e - first;
    in.push_back(w.in[e]), out.push_back(w.out[e]);
    c.filter.dims[2 + d] = w.kernel[e];
    c.stride[d] = w.stride[e], c.dilation[d] = w.dilation[e];
    c.pad[d] = exact ? w.pad_before[e] : 0;
    const int64_t extent = (w.out[e] - 1) * w.stride[e] + w.dilation[e] * (w.kernel[e] - 1) + 1;
    padded.push_back(extent);
    c.offset[d] = w.pad_before[e];
    c.copied[d] = std::clamp<int64_t>(extent - w.pad_before[e], 0, w.in[e]);
  }
  in.push_back(w.in_channels), out.push_back(w.out_channels), padded.push_back(w.in_channels);
  c.in = channels_last(in), c.out = channels_last(out);
  check_32_bit(node, "its input", c.transpose ? c.out : c.in);
  check_32_bit(node, "its output", c.transpose ? c.in : c.out);
  if (c.explicit_padding) {
    c.padded = channels_last(padded);
    check_32_bit(node, "its padded input", c.padded);
  }
  return c;
}

bool pads_channels(const ConvPlan& c, bool half, bool input_needs_gradient) {
  const int64_t channels = c.in.dims[1];
  return half && c.groups == 1 && !c.explicit_padding && channels < kTensorCoreChannels &&
         (c.transpose || !input_needs_gradient);
}

void pad_channels(ConvPlan& c, bool fold_taps) {
  const auto last = static_cast<size_t>(c.spatial - 1);  // the last spatial axis, in the arrays
  const int64_t ci = c.in.dims[1], kw = c.filter.dims[2 + last];
  const bool folds = fold_taps && !c.transpose && c.stride[last] == 1 && c.dilation[last] == 1 &&
                     round_up(ci * kw, kTensorCoreChannels) < round_up(ci, kTensorCoreChannels) * kw;
  if (folds) {
    c.taps = kw, c.tap_pad = c.pad[last];
    c.filter.dims[2 + last] = 1, c.pad[last] = 0;
  }
  c.channels = ci * c.taps;
  c.padded_channels = round_up(c.channels, kTensorCoreChannels);
  std::vector<int64_t> shape{c.in.dims[0]};
  for (size_t d = 0; d < static_cast<size_t>(c.spatial); ++d) shape.push_back(c.in.dims[2 + d]);
  if (folds) shape.back() = c.out.dims[2 + last];  // the copies lie at the output's positions
  shape.push_back(c.padded_channels);
  c.in = channels_last(shape);
  c.filter.dims[1] = c.padded_channels;
  c.filter.rows = c.filter.rows / c.channels * c.padded_channels;
}

BatchNormPlan plan_batch_norm(const Program& p, const Node& node) {
  const int64_t c = node.rows.channels, n = p.value(node.inputs[0]).shape[0];
  return {channels_last({n, node.rows.rows / n, 1, c}), c, node.batch_norm.eps, node.batch_norm.momentum};
}

DensePlan plan_matmul(int64_t batch, int64_t in, int64_t out, bool bias, int64_t weight_chunks) {
  DensePlan d;
  d.bias = bias;
  d.weight_chunks = weight_chunks;
  d.forward = {false, false, out, batch, in, out, in, out};
  d.backward_data = {true, false, in, batch, out, out, out, in};
  const int64_t rows = batch / weight_chunks;  // a divisor (weight_chunks())
  d.backward_weights = {false, true, out, in, rows, out, in, out, weight_chunks, out * rows, in * rows, out * in};
  return d;
}

size_t DensePlan::partial_bytes() const {
  return weight_chunks > 1 ? static_cast<size_t>(weight_chunks * backward_weights.m * backward_weights.n) * sizeof(float) : 0;
}

int64_t weight_chunks(int64_t rows, int64_t in, int64_t out, bool deterministic, size_t workspace_cap) {
  if (!deterministic) return 1;
  const int64_t tiles = ((in + 127) / 128) * ((out + 127) / 128);
  const auto partial = static_cast<size_t>(in * out) * sizeof(float);
  const auto fit = static_cast<int64_t>(workspace_cap / 4 / partial);
  const int64_t most = std::min({(kChunkTiles + tiles - 1) / tiles, rows / kChunkRows, kMaxChunks, fit});
  for (int64_t chunks = most; chunks > 1; --chunks)
    if (rows % chunks == 0) return chunks;
  return 1;
}

DensePlan plan_dense(const Node& node) {
  return plan_matmul(node.dense.batch, node.dense.in, node.dense.out, node.has_bias());
}

bool is_pointwise(const Node& node) {
  if (node.kind != OpKind::conv || node.window.groups != 1) return false;
  const sdk::program::Window& w = node.window;
  for (size_t e = 0; e < 3; ++e)
    if (w.kernel[e] != 1 || w.stride[e] != 1 || w.pad_before[e] != 0 || w.pad_after[e] != 0) return false;
  return true;
}

DensePlan plan_pointwise(const Node& node) {
  const sdk::program::Window& w = node.window;
  return plan_matmul(w.out_positions(), w.in_channels, w.out_channels, node.has_bias());
}

bool is_depthwise(const Node& node) {
  const sdk::program::Window& w = node.window;
  return node.kind == OpKind::conv && w.groups > 1 && w.groups == w.in_channels && w.groups == w.out_channels;
}

std::vector<NodeLowering> lower_nodes(const Program& p, const LoweringOptions& options) {
  std::vector<NodeLowering> lowered;
  for (const Node& node : p.nodes) {
    NodeLowering l;
    switch (node.kind) {
      case OpKind::conv:
      case OpKind::conv_transpose:
        check_weights_are_parameters(p, node);
        if (options.own.depthwise && is_depthwise(node)) {  // the graph's [K..., 1, C] weights as they are
          l.engine = Engine::depthwise;
          break;
        }
        if (options.pointwise == Pointwise::gemm && is_pointwise(node)) {
          l.engine = Engine::cublaslt_dense;
          l.dense = plan_pointwise(node);
          break;
        }
        l.engine = node.kind == OpKind::conv ? Engine::cudnn_conv : Engine::cudnn_conv_transpose;
        l.conv = plan_conv(p, node);
        if (pads_channels(*l.conv, options.half, p.needs_gradient[static_cast<size_t>(node.inputs[0])]))
          pad_channels(*l.conv, options.fold_taps);
        break;
      case OpKind::dense:
        check_weights_are_parameters(p, node);
        l.engine = Engine::cublaslt_dense;
        l.dense = plan_dense(node);
        break;
      case OpKind::batch_norm:
        if (options.own.batch_norm || node.batch_norm.group_size > 1) break;  // our kernels
        l.engine = Engine::cudnn_batch_norm;
        l.batch_norm = plan_batch_norm(p, node);
        check_32_bit(node, "its input", l.batch_norm->x);
        break;
      case OpKind::reshape:
        l.engine = Engine::alias;
        break;
      case OpKind::halo_exchange:
      case OpKind::spatial_gather:
        fail_node(node, "spatial parallelism is not implemented by the cuda backend yet");
      default:
        break;
    }
    if (l.dense) {  // dw in fixed-order chunks when deterministic
      const Gemm& dw = l.dense->forward;  // m = out, n = batch, k = in
      const int64_t chunks = weight_chunks(dw.n, dw.k, dw.m, options.deterministic, options.workspace_cap);
      if (chunks > 1) l.dense = plan_matmul(dw.n, dw.k, dw.m, l.dense->bias, chunks);
    }
    lowered.push_back(std::move(l));
  }
  fuse_relus(p, lowered);
  if (options.own.pool_chain) fuse_pool_chains(p, lowered);
  return lowered;
}

}  // namespace mlph::cuda::plan
