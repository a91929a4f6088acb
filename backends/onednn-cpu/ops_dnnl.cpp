// Ops that run as oneDNN primitives, in whatever layout oneDNN prefers (format_tag::any), so that
// blocked layouts flow from layer to layer without reorders.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "channel_walk.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/util/error.hpp"
#include "ops.hpp"

namespace mlph::onednn {

using dnnl::algorithm;
using dnnl::prop_kind;
using dt = memory::data_type;

void unimplemented(const NodeView& n, const std::string& what) {
  sdk::fail(MLPH_UNIMPLEMENTED, "onednn-cpu backend: " + n.where() + ": " + what);
}
void require_param(Net& net, const NodeView& n, size_t input) {
  if (!net.at(n.in(input)).is_param)
    unimplemented(n, "input " + std::to_string(input) + " ('" + net.at(n.in(input)).name + "') must be a parameter");
}

namespace {

// Spatial geometry of a conv, conv_transpose or pooling node, in oneDNN's terms.
struct Window {
  Dims kernel, stride, dilate, pad_l, pad_r;  // dilate: oneDNN counts from 0 (d - 1)
};

// The validator's window for oneDNN. A deconvolution's output size has no output_padding term: it
// is taken off the padding after (0 for conv and pooling).
Window onednn_window(const sdk::Window& w) {
  Window g;
  for (size_t d = 0; d < w.in.size(); ++d) {
    g.kernel.push_back(w.kernel[d]);
    g.stride.push_back(w.stride[d]);
    g.dilate.push_back(w.dilation[d] - 1);
    g.pad_l.push_back(w.pad_before[d]);
    g.pad_r.push_back(w.pad_after[d] - w.output_padding[d]);
  }
  return g;
}

// [N, C, spatial...] for oneDNN from channels-last sizes.
Dims ncs(int64_t batch, int64_t channels, const std::vector<int64_t>& spatial) {
  Dims d{batch, channels};
  d.insert(d.end(), spatial.begin(), spatial.end());
  return d;
}
std::vector<int64_t> spatial_of(const Value& v) { return {v.shape.begin() + 1, v.shape.end() - 1}; }

// Strides of the kernel dims of a [K..., inner] row-major weight, `inner` elements per tap.
Dims kernel_strides(const Dims& kernel, int64_t inner) {
  Dims s(kernel.size());
  int64_t step = inner;
  for (size_t d = kernel.size(); d-- > 0;) s[d] = step, step *= kernel[d];
  return s;
}

memory::desc any(const Dims& dims) { return {dims, dt::f32, Tag::any}; }
memory::desc vec(int64_t n) { return {{n}, dt::f32, Tag::a}; }
// What a convolution reads (source, weights, output gradient) in the net's compute precision. It
// writes its output and its source's gradient in the types those values are stored in (bf16
// between bf16-capable ops, else fp32); Weighted reorders what is not yet in these descs (the fp32
// master weights, an fp32 source) before each use.
std::function<memory::desc(const memory::desc&)> conv_input(const Net& net) {
  const dt type = net.bf16_convolutions ? dt::bf16 : dt::f32;
  return [type](const memory::desc& d) { return retyped(d, type); };
}

// A conv's input channels zero-padded inside the op (Net::pad_input_channels): x and the weights
// are copied into the leading channels of zeroed buffers before the forward, and the leading
// parts of the padded gradients go to x and w. Outside the op, x and w keep the model's shapes;
// the padded weight rows stay zero, so the output is the unpadded conv's. With taps folded
// (make_conv), x's leading channels are its `taps` shifted copies (Net::embed).
struct ChannelPadding {
  memory::desc src;      // x padded: channels-last, in the conv's compute type
  memory::desc weights;  // the weights padded, strided like the graph layout (fp32)
  int64_t taps = 1;      // the last axis's taps folded into the channels, and that axis's padding
  int64_t tap_pad = 0;
};

// A dilated conv's backward passes over its phases (atrous convolution as space-to-batch). Along an
// axis of dilation d and stride 1, the outputs o = d a + r read only inputs of the same remainder r,
// one tap apart: where the axis's size and both paddings are multiples of d, remainder r's outputs
// are the undilated conv of the input's remainder r, padded by pad / d. Stacked on the batch axis,
// the phases make one undilated conv whose weight gradient is the dilated conv's (its batch sums over
// the phases) and whose input gradient is the dilated one's, put back. oneDNN 2.6 has no jit
// backward for dilated depthwise convs (DeepCAM's exit flow: a gemm per channel, 100x the forward's
// time); the undilated ones run on its depthwise kernels.
struct PhaseSplit {
  Dims dilation;  // per spatial axis (1: not split)
  Window window;  // the undilated conv over the stacked phases
  Dims x, y;      // the dilated conv's [N, C, S...]
  int64_t count() const { return std::accumulate(dilation.begin(), dilation.end(), int64_t{1}, std::multiplies<>()); }
  Dims stacked(const Dims& whole) const {  // [count N, C, S / d...]
    Dims d{whole[0] * count(), whole[1]};
    for (size_t a = 0; a < dilation.size(); ++a) d.push_back(whole[a + 2] / dilation[a]);
    return d;
  }
};

std::optional<PhaseSplit> phase_split(const Window& g, const Dims& x, const Dims& y) {
  PhaseSplit p{Dims(g.dilate.size(), 1), g, x, y};
  for (size_t a = 0; a < g.dilate.size(); ++a) {
    const int64_t d = g.dilate[a] + 1;
    if (d == 1) continue;
    if (g.stride[a] != 1 || x[a + 2] % d != 0 || g.pad_l[a] % d != 0 || g.pad_r[a] % d != 0) return std::nullopt;
    p.dilation[a] = d, p.window.dilate[a] = 0, p.window.pad_l[a] /= d, p.window.pad_r[a] /= d;  // y's size: a multiple of d too
  }
  if (p.count() == 1) return std::nullopt;
  return p;
}

// [N, C, S...] channels-last, by strides (any rank).
memory::desc channels_last(const Dims& ncs, dt type) {
  Dims strides(ncs.size());
  int64_t step = ncs[1];
  strides[1] = 1;
  for (size_t a = ncs.size(); a-- > 2;) strides[a] = step, step *= ncs[a];
  strides[0] = step;
  return {ncs, type, strides};
}

// The [N, C, S1/d1, d1, S2/d2, d2, ...] view of a channels-last [N, C, S...] tensor (`whole`), or of
// its phases stacked channels-last on the batch axis (phase (r1, r2, ...) is the block of N images at
// r1 d2 d3... + r2 d3... + ...): one reorder between the two views splits or merges the phases.
memory::desc phase_view(const PhaseSplit& p, const Dims& whole, dt type, bool stacked) {
  const size_t rank = whole.size() - 2;
  const Dims sizes = stacked ? p.stacked(whole) : whole;
  Dims step(rank), phase(rank);
  int64_t s = whole[1];
  for (size_t a = rank; a-- > 0;) step[a] = s, s *= sizes[a + 2];
  int64_t block = s * whole[0];  // the innermost axis's phases are blocks of N images
  for (size_t a = rank; a-- > 0;) phase[a] = block, block *= p.dilation[a];
  Dims dims{whole[0], whole[1]}, strides{s, 1};
  for (size_t a = 0; a < rank; ++a) {
    const int64_t d = p.dilation[a];
    dims.insert(dims.end(), {whole[a + 2] / d, d});
    if (stacked) strides.insert(strides.end(), {step[a], phase[a]});
    else strides.insert(strides.end(), {d * step[a], step[a]});
  }
  return {dims, type, strides};
}

// `m` (any layout, dims `whole`) as its phases stacked channels-last, refreshed by `steps`.
memory split_phases(Net& net, const PhaseSplit& p, const memory& m, const Dims& whole, std::vector<Step>& steps) {
  const dt type = type_of(m.get_desc());
  const memory cl = net.convert(m, channels_last(whole, type), steps);
  memory stacked(channels_last(p.stacked(whole), type), net.engine);
  steps.push_back(net.reorder(net.view(cl, phase_view(p, whole, type, false)),
                              net.view(stacked, phase_view(p, whole, type, true))));
  return stacked;
}

// Stacked phases (any layout) put back: a channels-last [N, C, S...] written by `steps`.
memory merge_phases(Net& net, const PhaseSplit& p, const memory& m, const Dims& whole, std::vector<Step>& steps) {
  const dt type = type_of(m.get_desc());
  const memory stacked = net.convert(m, channels_last(p.stacked(whole), type), steps);
  memory cl(channels_last(whole, type), net.engine);
  steps.push_back(net.reorder(net.view(stacked, phase_view(p, whole, type, true)),
                              net.view(cl, phase_view(p, whole, type, false))));
  return cl;
}

// conv, conv_transpose and dense: x with parameter weights (and bias) -> y, with backward-data
// and backward-weights primitives. Weights stay in the graph layout (they are small; the optimizer
// and read/write_parameter see them as they are) and are reordered to the primitives' layout.
template <class Fwd, class BwdData, class BwdWeights>
class Weighted final : public Op {
 public:
  using FwdPD = typename Fwd::primitive_desc;
  Weighted(Net& net, const NodeView& n, const Fusion& fusion, const memory::desc& weights_plain, const FwdPD& fwd,
           const std::function<typename BwdData::primitive_desc()>& make_data,
           const std::function<typename BwdWeights::primitive_desc()>& make_weights,
           const std::optional<ChannelPadding>& pad = std::nullopt,
           const std::optional<PhaseSplit>& phases = std::nullopt)
      : Op(n), net_(net) {
    const int32_t x = n.in(0), w = n.in(1), y = n.out();
    const bool has_bias = n.n_in() > 2;
    const memory x_in = pad ? net.embed(net.at(x).mem, pad->src, forward_, pad->taps, pad->tap_pad) : net.at(x).mem;
    const memory src = net.convert(x_in, fwd.src_desc(), forward_);
    const memory w_view = net.view(net.at(w).mem, weights_plain);
    const memory w_in = pad ? net.embed(w_view, pad->weights, forward_) : w_view;
    const memory weights = net.convert(w_in, fwd.weights_desc(), forward_);
    if (fusion.active) {  // the activation's output is this primitive's output; their gradients share memory
      net.define(fusion.activation_output, fwd.dst_desc());
      net.at(y).grad = net.at(fusion.activation_output).grad;
      net.define(y, fwd.dst_desc(), net.at(fusion.activation_output).mem);
    } else {
      net.define(y, fwd.dst_desc());
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, net.at(y).mem}};
    if (has_bias) args[DNNL_ARG_BIAS] = net.at(n.in(2)).mem;
    forward_.push_back(net.step<Fwd>(fwd, args));
    if (!net.needs_grad(y)) return;
    const memory dy = phases ? split_phases(net, *phases, net.at(y).grad, phases->y, backward_pre_) : net.at(y).grad;
    if (net.needs_grad(x)) {
      const auto pd = make_data();
      const memory data_dy = net.convert(dy, pd.diff_dst_desc(), data_pre_);
      const memory data_w = net.convert(weights, pd.weights_desc(), data_pre_);
      if (pad) {  // the padded gradient (channels-last: its leading channels are a strided view)
        dx_staged_ = memory(pd.diff_src_desc(), net.engine);
        const memory lead = net.part(dx_staged_, net.at(x).mem.get_desc().dims());
        dx_ = GradSink(net, x, lead.get_desc(), lead);
      } else if (phases) {
        dx_staged_ = memory(pd.diff_src_desc(), net.engine);
        const memory whole = merge_phases(net, *phases, dx_staged_, phases->x, data_post_);
        dx_ = GradSink(net, x, whole.get_desc(), whole);
      } else {
        dx_ = GradSink(net, x, pd.diff_src_desc());
      }
      data_ = net.step<BwdData>(pd, {{DNNL_ARG_DIFF_DST, data_dy}, {DNNL_ARG_WEIGHTS, data_w}});
    }
    if (net.needs_grad(w) || (has_bias && net.needs_grad(n.in(2)))) {
      const auto pd = make_weights();
      const memory x_in = phases ? split_phases(net, *phases, src, phases->x, weights_pre_) : src;
      const memory weights_src = net.convert(x_in, pd.src_desc(), weights_pre_);
      const memory weights_dy = net.convert(dy, pd.diff_dst_desc(), weights_pre_);
      const memory dw(pd.diff_weights_desc(), net.engine);
      if (net.needs_grad(w) && pad) {  // the model's rows of the padded gradient
        const memory lead = net.part(net.convert(dw, pad->weights, weights_post_), weights_plain.dims());
        dw_ = GradSink(net, w, lead.get_desc(), lead, weights_plain);
      } else if (net.needs_grad(w)) {
        dw_ = GradSink(net, w, pd.diff_weights_desc(), dw, weights_plain);
      }
      std::unordered_map<int, memory> wargs{
          {DNNL_ARG_SRC, weights_src}, {DNNL_ARG_DIFF_DST, weights_dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
      if (has_bias) {
        const memory db(pd.diff_bias_desc(), net.engine);
        wargs[DNNL_ARG_DIFF_BIAS] = db;
        if (net.needs_grad(n.in(2))) db_ = GradSink(net, n.in(2), pd.diff_bias_desc(), db);
      }
      weights_ = net.step<BwdWeights>(pd, wargs);
    }
  }

  void forward(const RunArgs&) override { net_.run(forward_); }
  void backward() override {
    net_.run(backward_pre_);
    if (data_) {
      net_.run(data_pre_);
      const memory target = dx_.target();
      data_->args[DNNL_ARG_DIFF_SRC] = dx_staged_ ? dx_staged_ : target;
      (*data_)(net_.stream);
      net_.run(data_post_);
      dx_.commit();
    }
    if (weights_) {
      net_.run(weights_pre_);
      (*weights_)(net_.stream);
      net_.run(weights_post_);
      if (dw_) dw_.commit();
      if (db_) db_.commit();
    }
  }

 private:
  Net& net_;
  std::vector<Step> forward_, backward_pre_, data_pre_, data_post_, weights_pre_, weights_post_;
  std::optional<Step> data_, weights_;
  memory dx_staged_;  // the data gradient where it is not x's: over the padded channels, or the phases
  GradSink dx_, dw_, db_;
};

// The first of `layouts` (source, output) for which `make` gets a kernel other than oneDNN's
// reference loops; the first one if none does.
template <class PD, class Make>
PD first_jit(const std::vector<std::pair<memory::desc, memory::desc>>& layouts, const Make& make) {
  for (const auto& [src, dst] : layouts) {
    PD pd = make(src, dst);
    if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) return pd;
  }
  return make(layouts.front().first, layouts.front().second);
}

// Whether oneDNN runs `pd` on a kernel written for its primitive (jit_*, brg*), not on its gemm path
// (x64:gemm:jit: an im2col per group) or its reference loops.
template <class PD>
bool direct_kernel(const PD& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("jit", 0) == 0 || impl.rfind("brg", 0) == 0;
}

// Keras-style weight [K..., I, O] as oneDNN's logical weights (grouped: [G, O/G, I, K...]).
memory::desc conv_weights_plain(const Dims& kernel, int64_t ci_per_group, int64_t co, int64_t groups) {
  const Dims ks = kernel_strides(kernel, ci_per_group * co);
  Dims dims, strides;
  if (groups > 1) dims = {groups, co / groups, ci_per_group}, strides = {co / groups, 1, co};
  else dims = {co, ci_per_group}, strides = {1, co};
  dims.insert(dims.end(), kernel.begin(), kernel.end());
  strides.insert(strides.end(), ks.begin(), ks.end());
  return {dims, dt::f32, strides};
}

// Few input channels (CosmoFlow's conv1: 4) may be zero-padded inside the op to
// Net::pad_input_channels. Where x needs no gradient and the conv steps one by one along its last
// axis, that axis's taps are folded into the channels first (4 channels x 3 taps = 12 of 16), so
// the padded conv does a third of the work: the Keras weight [K..., kw, Ci, Co] is, as it is, the
// weight of kernel [K..., 1] over kw * Ci channels, and x becomes its kw shifted copies side by side.
int64_t taps_to_fold(const Net& net, const NodeView& n, const Window& g, int64_t ci, int64_t groups) {
  const int64_t kw = g.kernel.back();
  const bool folds = groups == 1 && kw > 1 && ci * kw <= net.pad_input_channels && !net.needs_grad(n.in(0)) &&
                     g.stride.back() == 1 && g.dilate.back() == 0;
  return folds ? kw : 1;
}

}  // namespace

std::unique_ptr<Op> make_conv(Net& net, const NodeView& n, const Fusion& fusion) {
  const Value &x = net.at(n.in(0)), &w = net.at(n.in(1));
  require_param(net, n, 1);
  if (n.n_in() > 2) require_param(net, n, 2);
  const sdk::Window& window = n.node->window;
  const int64_t groups = window.groups, co = w.shape.back(), batch = x.shape[0];
  const std::vector<int64_t>& out_spatial = window.out;
  Window g = onednn_window(window);
  const int64_t taps = taps_to_fold(net, n, g, x.shape.back(), groups);
  const int64_t tap_pad = taps > 1 ? g.pad_l.back() : 0;  // the copies' shift, in place of the padding
  if (taps > 1) g.kernel.back() = 1, g.pad_l.back() = 0, g.pad_r.back() = 0;
  const int64_t ci = x.shape.back() * taps;  // the conv's input channels (folded taps included)
  const Dims& kernel = g.kernel;

  const memory::desc weights_plain = conv_weights_plain(kernel, ci / groups, co, groups);
  const bool padded = taps > 1 || (groups == 1 && net.pad_input_channels > ci);  // folded taps go through the padding
  const int64_t cp = padded ? std::max(net.pad_input_channels, ci) : ci;
  std::vector<int64_t> padded_shape = x.shape;
  padded_shape.back() = cp;
  if (taps > 1) padded_shape.end()[-2] = out_spatial.back();
  const memory::desc x_plain = padded ? plain_desc(padded_shape, MLPH_DTYPE_F32) : x.plain;
  const memory::desc weights_padded = conv_weights_plain(kernel, cp, co, 1);
  const Dims wdims = padded ? weights_padded.dims() : weights_plain.dims();
  // Few input channels (CosmoFlow's conv1: 4): with blocked layouts oneDNN falls back to a slow
  // gemm for the weight gradient; channels-last source and output take its jit and brgemm kernels,
  // several times faster (PERFORMANCE.md). The layers after it go blocked. (Padded, they stay
  // channels-last: AMX's brgconv kernels take channels-last.)
  const bool few_channels = x.shape.back() < 16;
  const auto in = conv_input(net);
  const memory::desc src =
      in(padded ? x_plain : few_channels ? x.mem.get_desc() : any(ncs(batch, ci, spatial_of(x))));
  const memory::desc dst = net.stored(n.out(), few_channels ? net.at(n.out()).plain : any(ncs(batch, co, out_spatial)));
  const memory::desc bias = n.n_in() > 2 ? vec(co) : memory::desc();
  dnnl::primitive_attr attr = net.attr();
  if (fusion.active) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, algorithm::eltwise_relu, fusion.alpha, 0.0f);
    attr.set_post_ops(ops);
  }
  using dnnl::convolution_forward;
  const convolution_forward::primitive_desc fwd(
      {prop_kind::forward_training, algorithm::convolution_direct, src, in(any(wdims)), bias, dst, g.stride,
       g.dilate, g.pad_l, g.pad_r},
      attr, net.engine);
  // The backward passes in the forward's layouts when oneDNN has a kernel for them; otherwise
  // (dilated depthwise convs in blocked layouts, 2^3 volumes) in layouts it picks or channels-last,
  // reordered to, rather than its reference loops (20x slower on DeepCAM's dilated depthwise convs).
  const Dims x_dims = fwd.src_desc().dims(), y_dims = fwd.dst_desc().dims();
  std::vector<std::pair<memory::desc, memory::desc>> layouts = {
      {fwd.src_desc(), fwd.dst_desc()}, {any(x_dims), any(y_dims)}, {x_plain, net.at(n.out()).plain}};
  if (padded) layouts.erase(layouts.begin() + 1);  // the padded input gradient must be channels-last
  const dt x_type = type_of(x.mem.get_desc());
  // Both passes of the geometry `w` over `layouts`, with `hint` (a forward of that geometry).
  auto data_pd = [&](const Window& w, auto layouts, const convolution_forward::primitive_desc& hint) {
    // The input gradient's layout is free (a sink reorders it), its type x's: no conversion after.
    layouts[0].first = retyped(padded ? x_plain : any(layouts[0].first.dims()), x_type);
    return first_jit<dnnl::convolution_backward_data::primitive_desc>(layouts, [&](const auto& s, const auto& d) {
      return dnnl::convolution_backward_data::primitive_desc(
          {algorithm::convolution_direct, s, in(any(wdims)), in(d), w.stride, w.dilate, w.pad_l, w.pad_r}, net.attr(),
          net.engine, hint);
    });
  };
  auto weights_pd = [&](const Window& w, const auto& layouts, const convolution_forward::primitive_desc& hint) {
    return first_jit<dnnl::convolution_backward_weights::primitive_desc>(layouts, [&](const auto& s, const auto& d) {
      return dnnl::convolution_backward_weights::primitive_desc(
          {algorithm::convolution_direct, in(s), any(wdims), bias, in(d), w.stride, w.dilate, w.pad_l, w.pad_r},
          net.attr(), net.engine, hint);
    });
  };
  // A dilated conv whose backward oneDNN would run on its gemm path or reference loops runs it over
  // its phases where their undilated conv has a direct kernel (PhaseSplit).
  std::optional<PhaseSplit> phases = padded ? std::nullopt : phase_split(g, x_dims, y_dims);
  std::optional<convolution_forward::primitive_desc> phase_fwd;
  std::vector<std::pair<memory::desc, memory::desc>> phase_layouts;
  if (phases) {
    const Dims xs = phases->stacked(x_dims), ys = phases->stacked(y_dims);
    const Window& w = phases->window;
    phase_fwd = convolution_forward::primitive_desc(
        {prop_kind::forward_training, algorithm::convolution_direct, in(any(xs)), in(any(wdims)), bias,
         retyped(any(ys), type_of(fwd.dst_desc())), w.stride, w.dilate, w.pad_l, w.pad_r},
        net.attr(), net.engine);
    phase_layouts = {{any(xs), any(ys)}, {channels_last(xs, dt::f32), channels_last(ys, dt::f32)}};
    if (direct_kernel(weights_pd(g, layouts, fwd)) || !direct_kernel(weights_pd(w, phase_layouts, *phase_fwd)))
      phases.reset();
  }
  auto make_data = [&] {
    return phases ? data_pd(phases->window, phase_layouts, *phase_fwd) : data_pd(g, layouts, fwd);
  };
  auto make_weights = [&] {
    return phases ? weights_pd(phases->window, phase_layouts, *phase_fwd) : weights_pd(g, layouts, fwd);
  };
  std::optional<ChannelPadding> pad;
  if (padded) {
    pad = ChannelPadding{fwd.src_desc(), weights_padded, taps, tap_pad};
    net.conv_rewrites.push_back(n.where() + ": input channels padded to " + std::to_string(cp) +
                                (taps > 1 ? ", " + std::to_string(taps) + " taps folded" : ""));
  }
  if (phases) net.conv_rewrites.push_back(n.where() + ": backward over " + std::to_string(phases->count()) + " phases");
  return std::make_unique<Weighted<convolution_forward, dnnl::convolution_backward_data,
                                   dnnl::convolution_backward_weights>>(net, n, fusion, weights_plain, fwd, make_data,
                                                                        make_weights, pad, phases);
}

std::unique_ptr<Op> make_conv_transpose(Net& net, const NodeView& n) {
  const Value &x = net.at(n.in(0)), &w = net.at(n.in(1));
  require_param(net, n, 1);
  if (n.n_in() > 2) require_param(net, n, 2);
  const sdk::Window& window = n.node->window;
  const int64_t ci = x.shape.back(), co = w.shape[window.in.size()], batch = x.shape[0];
  const Window g = onednn_window(window);
  const Dims& kernel = g.kernel;
  const std::vector<int64_t>& out_spatial = window.out;
  // [K..., Co, Ci] as oneDNN's deconvolution weights [OC = Co, IC = Ci, K...].
  Dims wdims{co, ci}, wstrides{ci, 1};
  for (int64_t k : kernel) wdims.push_back(k);
  for (int64_t s : kernel_strides(kernel, co * ci)) wstrides.push_back(s);
  const memory::desc weights_plain(wdims, dt::f32, wstrides);
  const memory::desc bias = n.n_in() > 2 ? vec(co) : memory::desc();
  const auto in = conv_input(net);
  const memory::desc src = in(any(ncs(batch, ci, spatial_of(x))));
  const memory::desc dst = net.stored(n.out(), any(ncs(batch, co, out_spatial)));
  using dnnl::deconvolution_forward;
  const deconvolution_forward::primitive_desc fwd({prop_kind::forward_training, algorithm::deconvolution_direct, src,
                                                   in(any(wdims)), bias, dst, g.stride, g.dilate, g.pad_l, g.pad_r},
                                                  net.attr(), net.engine);
  // Few output channels (DeepCAM's last layer: 3) leave the backward passes in the forward's
  // blocked layouts to oneDNN's reference loops (8 of a 10 s training step at 96x144); other
  // layouts, reordered to, have jit kernels.
  const Dims x_dims = x.mem.get_desc().dims(), y_dims = fwd.dst_desc().dims();
  const std::vector<std::pair<memory::desc, memory::desc>> layouts = {
      {any(x_dims), fwd.dst_desc()}, {any(x_dims), any(y_dims)}, {x.plain, net.at(n.out()).plain}};
  const dt x_type = type_of(x.mem.get_desc());
  auto make_data = [&, fwd, layouts] {
    auto typed = layouts;
    typed[0].first = retyped(typed[0].first, x_type);  // the input gradient in x's type
    return first_jit<dnnl::deconvolution_backward_data::primitive_desc>(typed, [&](const auto& s, const auto& d) {
      return dnnl::deconvolution_backward_data::primitive_desc(
          {algorithm::deconvolution_direct, s, in(any(wdims)), in(d), g.stride, g.dilate, g.pad_l, g.pad_r},
          net.attr(), net.engine, fwd);
    });
  };
  auto make_weights = [&, fwd, layouts] {
    auto src_first = layouts;
    src_first[0].first = fwd.src_desc();
    return first_jit<dnnl::deconvolution_backward_weights::primitive_desc>(src_first, [&](const auto& s, const auto& d) {
      return dnnl::deconvolution_backward_weights::primitive_desc(
          {algorithm::deconvolution_direct, in(s), any(wdims), bias, in(d), g.stride, g.dilate, g.pad_l, g.pad_r},
          net.attr(), net.engine, fwd);
    });
  };
  return std::make_unique<Weighted<deconvolution_forward, dnnl::deconvolution_backward_data,
                                   dnnl::deconvolution_backward_weights>>(net, n, Fusion{}, weights_plain, fwd,
                                                                          make_data, make_weights);
}

std::unique_ptr<Op> make_dense(Net& net, const NodeView& n) {
  const Value &x = net.at(n.in(0)), &w = net.at(n.in(1));
  require_param(net, n, 1);
  if (n.n_in() > 2) require_param(net, n, 2);
  const int64_t batch = x.shape[0], in = x.shape[1], out = w.shape[1];
  const memory::desc weights_plain({out, in}, dt::f32, Dims{1, out});  // [in, out] row-major
  const memory::desc bias = n.n_in() > 2 ? vec(out) : memory::desc();
  using dnnl::inner_product_forward;
  const memory::desc x_desc = x.mem.get_desc();
  const inner_product_forward::primitive_desc fwd(
      {prop_kind::forward_training, x_desc, any({out, in}), bias, any({batch, out})}, net.attr(), net.engine);
  auto make_data = [&, fwd] {
    return dnnl::inner_product_backward_data::primitive_desc({x_desc, any({out, in}), fwd.dst_desc()}, net.attr(),
                                                             net.engine, fwd);
  };
  auto make_weights = [&, fwd] {
    return dnnl::inner_product_backward_weights::primitive_desc(
        {fwd.src_desc(), any({out, in}), bias, fwd.dst_desc()}, net.attr(), net.engine, fwd);
  };
  return std::make_unique<Weighted<inner_product_forward, dnnl::inner_product_backward_data,
                                   dnnl::inner_product_backward_weights>>(net, n, Fusion{}, weights_plain, fwd,
                                                                          make_data, make_weights);
}

namespace {

// An op made of one forward primitive and, when its input needs a gradient, one backward primitive
// writing that gradient (DIFF_SRC); subclasses build both steps in their constructor.
class SingleInputOp : public Op {
 public:
  void forward(const RunArgs&) override {
    net_.run(pre_);
    forward_(net_.stream);
  }
  void backward() override {
    if (!backward_) return;
    backward_->args[DNNL_ARG_DIFF_SRC] = dx_.target();
    (*backward_)(net_.stream);
    dx_.commit();
  }

 protected:
  SingleInputOp(Net& net, const NodeView& n) : Op(n), net_(net) {}
  // The input in the type of the output (oneDNN's pooling and eltwise keep one type): x itself
  // unless the plan stores them differently, then a copy that pre_ refreshes.
  memory typed_input(int32_t x) { return net_.as_type(x, net_.stored_type(output()), pre_); }
  Net& net_;
  std::vector<Step> pre_;
  Step forward_;
  std::optional<Step> backward_;
  GradSink dx_;
};

// Pooling (max with its workspace, or average), forward and backward in the input's layout.
class Pool final : public SingleInputOp {
 public:
  Pool(Net& net, const NodeView& n, algorithm alg, const Dims& out_dims, const Dims& kernel, const Dims& stride)
      : SingleInputOp(net, n) {
    const int32_t x = n.in(0), y = n.out();
    const memory src = typed_input(x);
    const memory::desc x_desc = src.get_desc();
    const Dims pad(kernel.size(), 0);
    const dnnl::pooling_forward::primitive_desc fwd(
        {prop_kind::forward_training, alg, x_desc, net.stored(y, any(out_dims)), stride, kernel, pad, pad}, net.attr(),
        net.engine);
    net.define(y, fwd.dst_desc());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, net.at(y).mem}};
    memory workspace;
    if (fwd.workspace_desc().get_size() > 0) args[DNNL_ARG_WORKSPACE] = workspace = memory(fwd.workspace_desc(), net.engine);
    forward_ = net.step<dnnl::pooling_forward>(fwd, args);
    if (!net.needs_grad(y) || !net.needs_grad(x)) return;
    const dnnl::pooling_backward::primitive_desc bwd({alg, x_desc, fwd.dst_desc(), stride, kernel, pad, pad},
                                                     net.attr(), net.engine, fwd);
    dx_ = GradSink(net, x, bwd.diff_src_desc());
    std::unordered_map<int, memory> bargs{{DNNL_ARG_DIFF_DST, net.at(y).grad}};
    if (workspace) bargs[DNNL_ARG_WORKSPACE] = workspace;
    backward_ = net.step<dnnl::pooling_backward>(bwd, bargs);
  }
};

}  // namespace

std::unique_ptr<Op> make_max_pool(Net& net, const NodeView& n) {
  const Value& x = net.at(n.in(0));
  const Window g = onednn_window(n.node->window);
  return std::make_unique<Pool>(net, n, algorithm::pooling_max, ncs(x.shape[0], x.shape.back(), n.node->window.out),
                                g.kernel, g.stride);
}

std::unique_ptr<Op> make_global_avg_pool(Net& net, const NodeView& n) {
  const Value& x = net.at(n.in(0));
  const std::vector<int64_t> ones(x.shape.size() - 2, 1), kernel = spatial_of(x);
  return std::make_unique<Pool>(net, n, algorithm::pooling_avg_include_padding, ncs(x.shape[0], x.shape.back(), ones),
                                Dims(kernel.begin(), kernel.end()), Dims(kernel.begin(), kernel.end()));
}

namespace {

// An eltwise op in its input's layout. `use_dst`: the backward reads the forward output.
class Eltwise final : public SingleInputOp {
 public:
  Eltwise(Net& net, const NodeView& n, algorithm alg, float alpha, bool use_dst) : SingleInputOp(net, n) {
    const int32_t x = n.in(0), y = n.out();
    const memory src = typed_input(x);
    const memory::desc desc = src.get_desc();
    const dnnl::eltwise_forward::primitive_desc fwd({prop_kind::forward_training, alg, desc, alpha, 0.0f}, net.attr(),
                                                    net.engine);
    net.define(y, fwd.dst_desc());
    forward_ = net.step<dnnl::eltwise_forward>(fwd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, net.at(y).mem}});
    if (!net.needs_grad(y) || !net.needs_grad(x)) return;
    const dnnl::eltwise_backward::primitive_desc bwd({alg, desc, desc, alpha, 0.0f}, net.attr(), net.engine, fwd);
    dx_ = GradSink(net, x, bwd.diff_src_desc());
    backward_ = net.step<dnnl::eltwise_backward>(
        bwd, {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, use_dst ? net.at(y).mem : src},
              {DNNL_ARG_DIFF_DST, net.at(y).grad}});
  }
};

// The activation fused into the conv before it: nothing to do forward; backward in place on the
// shared gradient memory, from the output.
class FusedActivation final : public Op {
 public:
  FusedActivation(Net& net, const NodeView& n, int32_t conv_output, float alpha)
      : Op(n), net_(net), conv_output_(conv_output) {
    const int32_t y = n.out();
    if (!net.needs_grad(y) || !net.needs_grad(conv_output)) return;
    const memory::desc desc = net.at(y).mem.get_desc();
    const dnnl::eltwise_forward::primitive_desc hint(
        {prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, desc, alpha, 0.0f}, net.attr(),
        net.engine);
    const dnnl::eltwise_backward::primitive_desc bwd({algorithm::eltwise_relu_use_dst_for_bwd, desc, desc, alpha, 0.0f},
                                                     net.attr(), net.engine, hint);
    backward_ = net.step<dnnl::eltwise_backward>(bwd, {{DNNL_ARG_DST, net.at(y).mem},
                                                       {DNNL_ARG_DIFF_DST, net.at(y).grad},
                                                       {DNNL_ARG_DIFF_SRC, net.at(conv_output).grad}});
  }
  void forward(const RunArgs&) override {}
  void backward() override {
    if (!backward_) return;
    (*backward_)(net_.stream);
    net_.at(conv_output_).grad_written = true;
  }

 private:
  Net& net_;
  int32_t conv_output_;
  std::optional<Step> backward_;
};

}  // namespace

std::unique_ptr<Op> make_eltwise(Net& net, const NodeView& n) {
  const std::string& op = n.node->op;
  if (op == "relu") return std::make_unique<Eltwise>(net, n, algorithm::eltwise_relu, 0.0f, false);
  if (op == "leaky_relu")
    return std::make_unique<Eltwise>(net, n, algorithm::eltwise_relu, float(n.attrs().number("alpha")), false);
  if (op == "tanh") return std::make_unique<Eltwise>(net, n, algorithm::eltwise_tanh_use_dst_for_bwd, 0.0f, true);
  return std::make_unique<Eltwise>(net, n, algorithm::eltwise_linear, float(n.attrs().number("factor")), false);  // scale
}

std::unique_ptr<Op> make_fused_activation(Net& net, const NodeView& n, int32_t conv_output, float alpha) {
  return std::make_unique<FusedActivation>(net, n, conv_output, alpha);
}

namespace {

// The relu that the batch norm before it runs (fuse_norm_relu), both ways: its output gradient is
// the batch norm's, complete once this node's consumers have written it.
class NormFusedRelu final : public Op {
 public:
  NormFusedRelu(Net& net, const NodeView& n, int32_t norm_output) : Op(n), net_(net), norm_output_(norm_output) {}
  void forward(const RunArgs&) override {}
  void backward() override { net_.at(norm_output_).grad_written = true; }

 private:
  Net& net_;
  int32_t norm_output_;
};

}  // namespace

std::unique_ptr<Op> make_norm_fused_relu(Net& net, const NodeView& n, int32_t norm_output) {
  return std::make_unique<NormFusedRelu>(net, n, norm_output);
}

namespace {

// Batch normalization with oneDNN's primitive; the running statistics are ours to update (PyTorch's
// rule, unbiased variance), since oneDNN only computes the batch statistics. With `relu` active it
// also applies the relu after it (its output is the relu's; the backward reads the relu's output
// gradient and the workspace that records where the relu passed).
//
// Over a group of ranks (SyncBatchNorm) the statistics are ours too: per-channel sums over this
// rank's values in their layout (ChannelWalk), summed over the group, feed the primitive as global
// statistics. Its backward then gives dx = gamma/std * dy and this rank's sums of dy and dy*xhat
// (beta's and gamma's gradients, which stay local); dx gets the group's mean terms added by hand.
class BatchNorm final : public Op {
 public:
  BatchNorm(Net& net, const NodeView& n, const Fusion& relu, const sdk::GroupSum* group)
      : Op(n), net_(net), group_(group) {
    const int32_t x = n.in(0), y = n.out();
    const auto eps = float(n.attrs().number("eps"));
    eps_ = eps;
    momentum_ = n.attrs().number("momentum");
    const Value& xv = net.at(x);
    channels_ = xv.shape.back();
    count_ = xv.numel() / channels_;  // > 1 over the group (the validator checks)
    memory src = xv.mem;
    if (group_) {  // a layout the hand-written loops cannot walk is reordered to channels-last first
      walk_ = ChannelWalk::of(src.get_desc());
      if (!walk_) src = net.convert(src, xv.plain, convert_), walk_ = ChannelWalk::of(xv.plain);
      if (!walk_) unimplemented(n, "group_size > 1 needs x of rank 4 or 5, or [N,C]");
    } else if (type_of(src.get_desc()) != net.stored_type(y)) {  // one desc for x and y: x in y's type
      src = net.as_type(x, net.stored_type(y), convert_);
    }
    src_ = src;
    const memory::desc desc = src.get_desc();
    using dnnl::normalization_flags;
    auto flags = normalization_flags::use_scale | normalization_flags::use_shift;
    if (relu.active) flags |= normalization_flags::fuse_norm_relu;
    const auto train_flags = group_ ? flags | normalization_flags::use_global_stats : flags;
    using Fwd = dnnl::batch_normalization_forward;
    const Fwd::primitive_desc train({prop_kind::forward_training, desc, eps, train_flags}, net.attr(), net.engine);
    const Fwd::primitive_desc infer({prop_kind::forward_inference, desc, eps, flags | normalization_flags::use_global_stats},
                                    net.attr(), net.engine);
    if (relu.active) {  // as for a conv's fused activation: one output memory, one gradient memory
      net.define(relu.activation_output, train.dst_desc());
      net.at(y).grad = net.at(relu.activation_output).grad;
      net.define(y, train.dst_desc(), net.at(relu.activation_output).mem);
    } else {
      net.define(y, train.dst_desc());
    }
    std::unordered_map<int, memory> workspace;
    if (relu.active) workspace[DNNL_ARG_WORKSPACE] = memory(train.workspace_desc(), net.engine);
    mean_ = memory(train.mean_desc(), net.engine);
    variance_ = memory(train.variance_desc(), net.engine);
    const memory scale = net.at(n.in(1)).mem, shift = net.at(n.in(2)).mem;
    running_mean_ = net.at(n.in(3)).mem, running_var_ = net.at(n.in(4)).mem;
    train_ = net.step<Fwd>(train, {{DNNL_ARG_SRC, src}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift},
                                   {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, variance_}, {DNNL_ARG_DST, net.at(y).mem}});
    train_.args.insert(workspace.begin(), workspace.end());
    infer_ = net.step<Fwd>(infer, {{DNNL_ARG_SRC, src}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift},
                                   {DNNL_ARG_MEAN, running_mean_}, {DNNL_ARG_VARIANCE, running_var_},
                                   {DNNL_ARG_DST, net.at(y).mem}});
    if (!net.needs_grad(y)) return;
    const dnnl::batch_normalization_backward::primitive_desc bwd({prop_kind::backward, desc, desc, eps, train_flags},
                                                                 net.attr(), net.engine, train);
    dscale_ = memory(vec(channels_), net.engine), dshift_ = memory(vec(channels_), net.engine);
    if (net.needs_grad(x)) dx_ = GradSink(net, x, bwd.diff_src_desc());
    else dx_spare_ = memory(bwd.diff_src_desc(), net.engine);
    if (net.needs_grad(n.in(1))) dgamma_ = GradSink(net, n.in(1), vec(channels_), dscale_);
    if (net.needs_grad(n.in(2))) dbeta_ = GradSink(net, n.in(2), vec(channels_), dshift_);
    gamma_ = scale;
    // oneDNN 2.6 checks that the backward pass gets the shift too, though it does not read it.
    backward_ = net.step<dnnl::batch_normalization_backward>(
        bwd, {{DNNL_ARG_SRC, src}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, variance_},
              {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}, {DNNL_ARG_DIFF_DST, net.at(y).grad},
              {DNNL_ARG_DIFF_SCALE, dscale_}, {DNNL_ARG_DIFF_SHIFT, dshift_}});
    backward_->args.insert(workspace.begin(), workspace.end());
  }

  void forward(const RunArgs& args) override {
    net_.run(convert_);
    if (!args.training) return infer_(net_.stream);
    const double total = group_ ? group_statistics() : double(count_);
    train_(net_.stream);
    net_.stream.wait();
    const auto* mean = static_cast<const float*>(mean_.get_data_handle());
    const auto* var = static_cast<const float*>(variance_.get_data_handle());
    auto* rm = static_cast<float*>(running_mean_.get_data_handle());
    auto* rv = static_cast<float*>(running_var_.get_data_handle());
    const auto m = float(momentum_), keep = float(1.0 - momentum_);
    const auto unbias = float(total / (total - 1));
    for (int64_t c = 0; c < channels_; ++c) {
      rm[c] = keep * rm[c] + m * mean[c];
      rv[c] = keep * rv[c] + m * var[c] * unbias;
    }
  }
  void backward() override {
    if (!backward_) return;
    backward_->args[DNNL_ARG_DIFF_SRC] = dx_ ? dx_.target() : dx_spare_;
    (*backward_)(net_.stream);
    if (dx_) {
      if (group_) add_group_terms(dx_.target());
      dx_.commit();
    }
    if (dgamma_) dgamma_.commit();
    if (dbeta_) dbeta_.commit();
  }

 private:
  // The group's mean and biased variance into mean_ and variance_, two passes in double (as the
  // reference backend); returns the group's value count M.
  double group_statistics() {
    net_.stream.wait();
    const auto* x = static_cast<const float*>(src_.get_data_handle());
    std::vector<double> sums = walk_->channel_sums(x, [](float v, int64_t) { return double(v); });
    sums.push_back(double(count_));
    (*group_)(sums);
    group_count_ = sums.back();
    sums.pop_back();
    std::vector<float> mean(sums.size());
    for (size_t c = 0; c < sums.size(); ++c) mean[c] = float(sums[c] / group_count_);
    std::vector<double> squares = walk_->channel_sums(x, [&mean](float v, int64_t c) {
      const double d = double(v) - mean[size_t(c)];  // the float mean: what the primitive subtracts
      return d * d;
    });
    (*group_)(squares);
    auto* mean_out = static_cast<float*>(mean_.get_data_handle());
    auto* var_out = static_cast<float*>(variance_.get_data_handle());
    for (size_t c = 0; c < mean.size(); ++c) mean_out[c] = mean[c], var_out[c] = float(squares[c] / group_count_);
    return group_count_;
  }

  // dx += -gamma/std * (sum dy + xhat * sum dy*xhat) / M with the group's sums: the terms the
  // primitive leaves out with global statistics (xhat = (x - mean)/std).
  void add_group_terms(const memory& dx) {
    net_.stream.wait();
    const auto* dshift = static_cast<const float*>(dshift_.get_data_handle());
    const auto* dscale = static_cast<const float*>(dscale_.get_data_handle());
    std::vector<double> sums(dshift, dshift + channels_);
    sums.insert(sums.end(), dscale, dscale + channels_);
    (*group_)(sums);
    const auto* gamma = static_cast<const float*>(gamma_.get_data_handle());
    const auto* mean = static_cast<const float*>(mean_.get_data_handle());
    const auto* var = static_cast<const float*>(variance_.get_data_handle());
    const auto channels = static_cast<size_t>(channels_);
    std::vector<float> mean_term(channels), slope(channels);
    for (size_t c = 0; c < mean_term.size(); ++c) {
      const double inverse_std = 1.0 / std::sqrt(double(var[c]) + eps_);
      const double factor = -gamma[c] * inverse_std / group_count_;
      mean_term[c] = float(factor * sums[c]);
      slope[c] = float(factor * sums[channels + c] * inverse_std);
    }
    walk_->accumulate(static_cast<const float*>(src_.get_data_handle()), static_cast<float*>(dx.get_data_handle()),
                      [&](float v, int64_t c) { return mean_term[size_t(c)] + slope[size_t(c)] * (v - mean[c]); });
  }

  Net& net_;
  const sdk::GroupSum* group_;
  double momentum_ = 0.1, eps_ = 1e-5, group_count_ = 1;
  int64_t channels_ = 1, count_ = 1;
  std::optional<ChannelWalk> walk_;
  std::vector<Step> convert_;  // x into a walkable layout, when grouped and it is not
  memory src_, mean_, variance_, running_mean_, running_var_, gamma_, dscale_, dshift_, dx_spare_;
  Step train_, infer_;
  std::optional<Step> backward_;
  GradSink dx_, dgamma_, dbeta_;
};

// An op whose backward only hands dy (or a slice of it) to each input that needs a gradient:
// one forward step, then one sink per such input.
class RoutingOp : public Op {
 public:
  void forward(const RunArgs&) override { forward_(net_.stream); }
  void backward() override {
    for (GradSink& s : sinks_) s.commit();
  }

 protected:
  RoutingOp(Net& net, const NodeView& n) : Op(n), net_(net) {}
  Net& net_;
  Step forward_;
  std::vector<GradSink> sinks_;
};

// y = a + b (binary primitive, in a's layout, in y's stored type); both gradients are dy.
class Add final : public RoutingOp {
 public:
  Add(Net& net, const NodeView& n) : RoutingOp(net, n) {
    const int32_t a = n.in(0), b = n.in(1), y = n.out();
    const memory::desc desc = net.at(a).mem.get_desc();
    const dnnl::binary::primitive_desc pd(
        {algorithm::binary_add, desc, net.at(b).mem.get_desc(), net.stored(y, desc)}, net.attr(), net.engine);
    net.define(y, pd.dst_desc());
    forward_ = net.step<dnnl::binary>(
        pd, {{DNNL_ARG_SRC_0, net.at(a).mem}, {DNNL_ARG_SRC_1, net.at(b).mem}, {DNNL_ARG_DST, net.at(y).mem}});
    for (int32_t v : {a, b})
      if (net.needs_grad(y) && net.needs_grad(v)) sinks_.emplace_back(net, v, pd.dst_desc(), net.at(y).grad);
  }
};

// Along channels, into the graph layout (so that backward can take each input's slice). Channels
// are oneDNN's logical dim 1 for [N, S, S(, S), C] (plain_desc's channels-last view), and the last
// dim of any other rank, which plain_desc keeps row-major over its own shape.
class Concat final : public RoutingOp {
 public:
  Concat(Net& net, const NodeView& n) : RoutingOp(net, n) {
    const int32_t y = n.out();
    const size_t rank = net.at(y).shape.size();
    const int axis = rank == 4 || rank == 5 ? 1 : int(rank) - 1;
    std::vector<memory::desc> srcs;
    std::unordered_map<int, memory> args;
    for (size_t i = 0; i < n.n_in(); ++i) {
      srcs.push_back(net.at(n.in(i)).mem.get_desc());
      args[DNNL_ARG_MULTIPLE_SRC + int(i)] = net.at(n.in(i)).mem;
    }
    const dnnl::concat::primitive_desc pd(net.at(y).plain, axis, srcs, net.engine, net.attr());
    net.define(y, net.at(y).plain);
    args[DNNL_ARG_DST] = net.at(y).mem;
    forward_ = net.step<dnnl::concat>(pd, args);
    if (!net.needs_grad(y)) return;
    const memory::desc dy = net.at(y).grad.get_desc();
    int64_t offset = 0;
    for (size_t i = 0; i < n.n_in(); ++i) {
      Dims dims = srcs[i].dims(), offsets(dims.size(), 0);
      offsets[size_t(axis)] = offset;
      offset += dims[size_t(axis)];
      if (!net.needs_grad(n.in(i))) continue;
      const memory::desc slice = dy.submemory_desc(dims, offsets);
      sinks_.emplace_back(net, n.in(i), slice, net.view(net.at(y).grad, slice));
    }
  }
};

}  // namespace

std::unique_ptr<Op> make_batch_norm(Net& net, const NodeView& n, const Fusion& relu, const sdk::GroupSum* group) {
  for (size_t i = 1; i < 5; ++i) require_param(net, n, i);
  return std::make_unique<BatchNorm>(net, n, relu, group);
}

std::unique_ptr<Op> make_add(Net& net, const NodeView& n) { return std::make_unique<Add>(net, n); }

std::unique_ptr<Op> make_concat(Net& net, const NodeView& n) { return std::make_unique<Concat>(net, n); }

}  // namespace mlph::onednn
