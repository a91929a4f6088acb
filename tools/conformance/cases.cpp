#include "cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::conformance {
namespace {

using Shape = std::vector<int64_t>;

// SplitMix64 over a key: the same cases on every platform and compiler (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t key) : key_(key) {}
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t integer(int64_t lo, int64_t hi) {  // in [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t next() { return mlph_mix64(key_ ^ mlph_mix64(counter_++)); }
  uint64_t key_, counter_ = 0;
};

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string dims(const Shape& s) { return sdk::shape_string(s.data(), static_cast<int32_t>(s.size())); }
std::vector<double> numbers(const Shape& s) { return {s.begin(), s.end()}; }
Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Builds one case's graph: values, parameters with random contents, inputs with random contents.
class CaseBuilder {
 public:
  CaseBuilder(OpCase& c, Rng& rng) : case_(c), g_(*c.graph), rng_(rng) {}

  // A float parameter uniform in [lo, hi); trainable unless `flags` says otherwise.
  int32_t param(const std::string& name, const Shape& shape, double lo = -1, double hi = 1,
                uint32_t flags = MLPH_PARAM_TRAINABLE, double l2 = 0, double weight_decay = 1) {
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, shape);
    std::vector<float> init(static_cast<size_t>(sdk::numel(shape.data(), static_cast<int32_t>(shape.size()))));
    for (float& x : init) x = static_cast<float>(rng_.uniform(lo, hi));
    g_.parameter(v, std::move(init), l2, weight_decay, flags);
    return v;
  }
  // A parameter outside the optimizer (batch norm's running statistics, constants).
  int32_t state(const std::string& name, const Shape& shape, double lo, double hi) {
    return param(name, shape, lo, hi, 0);
  }
  // A graph input, fed the same contents at every step: floats in [lo, hi), integers in [lo, hi].
  int32_t input(const std::string& name, MLPH_DType dtype, const Shape& shape, double lo, double hi) {
    const int32_t v = g_.value(name, dtype, shape);
    HostTensor t = HostTensor::zeros(name, dtype, shape);
    for (size_t i = 0; i < t.numel(); ++i) {
      if (dtype == MLPH_DTYPE_F32)
        t.as<float>()[i] = static_cast<float>(rng_.uniform(lo, hi));
      else if (dtype == MLPH_DTYPE_I16)
        t.as<int16_t>()[i] = static_cast<int16_t>(rng_.integer(static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
      else
        t.as<int32_t>()[i] = static_cast<int32_t>(rng_.integer(static_cast<int64_t>(lo), static_cast<int64_t>(hi)));
    }
    inputs_.push_back(v);
    case_.inputs.push_back(std::move(t));
    return v;
  }
  HostTensor& last_input() { return case_.inputs.back(); }

  // The node under test, named after its op; returns its output.
  int32_t op(const std::string& op, std::vector<int32_t> inputs, const Shape& out, std::vector<sdk::AttrInit> attrs = {},
             std::string name = "") {
    if (name.empty()) name = op;
    const int32_t y = g_.value(name + ".out", MLPH_DTYPE_F32, out);
    g_.node(op, name, std::move(inputs), {y}, std::move(attrs));
    return y;
  }
  Shape shape(int32_t v) const {
    const MLPH_Value& info = g_.value_info(v);
    return {info.shape, info.shape + info.ndim};
  }

  void describe(std::string text) { case_.description = std::move(text); }

  // Loss = mse(y, random target); evaluation returns y; one SGD step.
  void train_against_target(int32_t y, const std::string& optimizer = "sgd_keras",
                            std::vector<sdk::AttrInit> attrs = {{"momentum", 0.0}}, std::vector<double> lrs = {0.1}) {
    const int32_t target = input("target", MLPH_DTYPE_F32, shape(y), -1, 1);
    finish(mse(y, target), {y}, optimizer, std::move(attrs), std::move(lrs));
  }
  // The op is the loss: evaluation returns it; one SGD step.
  void train_as_loss(int32_t loss) { finish(loss, {loss}, "sgd_keras", {{"momentum", 0.0}}, {0.1}); }
  // An op without gradient: only evaluated. The graph still needs a loss, which leaves the op alone.
  void evaluate_only(int32_t y) {
    const int32_t anchor = param("anchor", {1});
    finish(mse(anchor, input("anchor_target", MLPH_DTYPE_F32, {1}, -1, 1)), {y}, "sgd_keras", {{"momentum", 0.0}}, {});
  }

 private:
  int32_t mse(int32_t prediction, int32_t target) {
    const int32_t loss = g_.value("loss", MLPH_DTYPE_F32, {});
    g_.node("mse", "loss", {prediction, target}, {loss});
    return loss;
  }
  void finish(int32_t loss, std::vector<int32_t> eval, const std::string& optimizer, std::vector<sdk::AttrInit> attrs,
              std::vector<double> lrs) {
    g_.inputs(inputs_);
    g_.loss(loss);
    g_.eval_outputs(std::move(eval));
    g_.optimizer(optimizer, std::move(attrs));
    g_.seed(static_cast<uint64_t>(rng_.integer(1, 1 << 30)));
    case_.learning_rates = std::move(lrs);
    // Early steps: Adam's bias corrections still matter there; any step draws a new dropout mask.
    case_.first_step = static_cast<uint64_t>(rng_.integer(0, 20));
  }

  OpCase& case_;
  sdk::GraphBuilder& g_;
  Rng& rng_;
  std::vector<int32_t> inputs_;
};

// [2, spatial..., channels] with 0 to 3 random spatial dims.
Shape activation_shape(Rng& r) {
  Shape s{2};
  for (int64_t d = r.integer(0, 3); d > 0; --d) s.push_back(r.integer(1, 5));
  s.push_back(r.integer(1, 4));
  return s;
}

// Cases per op. `v` is the case index: the first few select the variants, the rest repeat them
// with other random sizes.

void conv(CaseBuilder& b, Rng& r, int v) {
  v %= 6;
  const int spatial = v % 2 ? 3 : 2;
  const bool depthwise = v == 3, grouped = v == 2 || v == 5;
  const bool strided = v == 0 || v == 3 || v == 4, dilated = v == 1 || v == 4, asymmetric = v == 0 || v == 4 || v == 5;
  const bool bias = v != 1 && v != 4;
  int64_t groups = grouped ? 2 : 1, ci = groups * r.integer(1, 3), co = groups * r.integer(1, 3);
  if (depthwise) ci = groups = r.integer(2, 4), co = ci * r.integer(1, 2);
  Shape x{2}, y{2}, kernel, stride, dilation, before, after;
  for (int d = 0; d < spatial; ++d) {
    const int64_t k = r.integer(1, 3), s = strided ? r.integer(2, 3) : 1, dl = dilated ? 2 : 1;
    const int64_t pb = r.integer(0, 2), pa = asymmetric ? r.integer(0, 2) : pb;
    const int64_t span = dl * (k - 1) + 1;
    const int64_t in = std::max(r.integer(spatial == 2 ? 4 : 3, spatial == 2 ? 8 : 5), span);
    kernel.push_back(k), stride.push_back(s), dilation.push_back(dl), before.push_back(pb), after.push_back(pa);
    x.push_back(in), y.push_back((in + pb + pa - span) / s + 1);
  }
  x.push_back(ci), y.push_back(co);
  const Shape padding = asymmetric ? concat(before, after) : before;
  std::vector<int32_t> inputs = {b.param("x", x), b.param("w", concat(kernel, {ci / groups, co}))};
  if (bias) inputs.push_back(b.param("b", {co}));
  const int32_t out = b.op("conv", inputs, y,
                           {{"stride", numbers(stride)}, {"dilation", numbers(dilation)}, {"padding", numbers(padding)},
                            {"groups", static_cast<double>(groups)}});
  b.describe(fmt::format("{}D x{} k{} stride{} dil{} pad{} groups {}{}", spatial, dims(x), dims(kernel), dims(stride),
                         dims(dilation), dims(padding), groups, bias ? " +bias" : ""));
  b.train_against_target(out);
}

void conv_transpose(CaseBuilder& b, Rng& r, int v) {
  v %= 4;
  const int spatial = v % 2 ? 3 : 2;
  const bool bias = v != 1;
  const int64_t ci = r.integer(1, 4), co = r.integer(1, 4);
  Shape x{2}, y{2}, kernel, stride, dilation, before, after, output_padding;
  for (int d = 0; d < spatial; ++d) {
    // v 0 is DeepCAM's decoder (k3 s2 p1 output_padding 1); the others draw their geometry.
    const int64_t k = v == 0 ? 3 : r.integer(1, 3), s = v == 1 ? r.integer(1, 2) : 2, dl = v == 2 ? 2 : 1;
    const int64_t reach = dl * (k - 1);
    int64_t pb = v == 0 ? 1 : r.integer(0, reach), pa = v == 1 ? r.integer(0, reach) : pb;
    const int64_t op = v == 0 ? 1 : r.integer(0, s - 1), in = r.integer(2, 4);
    if ((in - 1) * s - pb - pa + reach + op + 1 < 1) pa = 0;
    kernel.push_back(k), stride.push_back(s), dilation.push_back(dl), before.push_back(pb), after.push_back(pa);
    output_padding.push_back(op);
    x.push_back(in), y.push_back((in - 1) * s - pb - pa + reach + op + 1);
  }
  x.push_back(ci), y.push_back(co);
  const Shape padding = v == 1 ? concat(before, after) : before;
  std::vector<int32_t> inputs = {b.param("x", x), b.param("w", concat(kernel, {co, ci}))};
  if (bias) inputs.push_back(b.param("b", {co}));
  const int32_t out = b.op("conv_transpose", inputs, y,
                           {{"stride", numbers(stride)}, {"dilation", numbers(dilation)}, {"padding", numbers(padding)},
                            {"output_padding", numbers(output_padding)}});
  b.describe(fmt::format("{}D x{} k{} stride{} dil{} pad{} out_pad{}{}", spatial, dims(x), dims(kernel), dims(stride),
                         dims(dilation), dims(padding), dims(output_padding), bias ? " +bias" : ""));
  b.train_against_target(out);
}

void max_pool(CaseBuilder& b, Rng& r, int v) {
  v %= 4;
  const int spatial = v % 2 ? 3 : 2;
  const bool overlapping = v >= 2;  // stride < kernel: an element can be the maximum of two windows
  Shape x{2}, y{2}, kernel, stride;
  for (int d = 0; d < spatial; ++d) {
    const int64_t k = overlapping ? r.integer(2, 3) : 2, s = overlapping ? r.integer(1, k - 1) : k;
    const int64_t in = r.integer(k, k + (spatial == 2 ? 5 : 3));
    kernel.push_back(k), stride.push_back(s), x.push_back(in), y.push_back((in - k) / s + 1);
  }
  const int64_t channels = r.integer(1, 4);
  x.push_back(channels), y.push_back(channels);
  std::vector<sdk::AttrInit> attrs = {{"kernel", numbers(kernel)}};
  if (v != 0) attrs.emplace_back("stride", numbers(stride));  // v 0: the default stride, the kernel
  const int32_t out = b.op("max_pool", {b.param("x", x)}, y, std::move(attrs));
  b.describe(fmt::format("{}D x{} kernel{} stride{}{}", spatial, dims(x), dims(kernel), dims(stride),
                         v == 0 ? " (default)" : ""));
  b.train_against_target(out);
}

void unary(CaseBuilder& b, Rng& r, const std::string& op, std::vector<sdk::AttrInit> attrs, std::string what) {
  const Shape s = activation_shape(r);
  const int32_t out = b.op(op, {b.param("x", s)}, s, std::move(attrs));
  b.describe(fmt::format("x{}{}", dims(s), what));
  b.train_against_target(out);
}

void leaky_relu(CaseBuilder& b, Rng& r, int) {
  const double alpha = r.uniform(0.01, 0.5);
  unary(b, r, "leaky_relu", {{"alpha", alpha}}, fmt::format(" alpha {:.3f}", alpha));
}
void relu(CaseBuilder& b, Rng& r, int) { unary(b, r, "relu", {}, ""); }
void tanh_op(CaseBuilder& b, Rng& r, int) { unary(b, r, "tanh", {}, ""); }
void scale(CaseBuilder& b, Rng& r, int) {
  const double factor = r.uniform(-2, 2);
  unary(b, r, "scale", {{"factor", factor}}, fmt::format(" factor {:.3f}", factor));
}

void dropout(CaseBuilder& b, Rng& r, int) {
  const double rate = r.uniform(0.1, 0.7);
  const Shape s{2, r.integer(4, 9), r.integer(3, 8)};
  const int32_t out = b.op("dropout", {b.param("x", s)}, s, {{"rate", rate}});
  b.train_against_target(out);
  b.describe(fmt::format("x{} rate {:.3f}: training mask at the step, identity in evaluation", dims(s), rate));
}

void reshape(CaseBuilder& b, Rng& r, int v) {
  const int64_t d1 = r.integer(1, 4), d2 = r.integer(1, 4), d3 = r.integer(1, 4);
  const Shape x{2, d1, d2, d3}, y = v % 2 ? Shape{2, d2, d1 * d3} : Shape{2, d1 * d2 * d3};
  const int32_t out = b.op("reshape", {b.param("x", x)}, y, {{"shape", numbers(y)}});
  b.describe(fmt::format("x{} -> {}", dims(x), dims(y)));
  b.train_against_target(out);
}

void dense(CaseBuilder& b, Rng& r, int v) {
  const int64_t n = r.integer(1, 4), in = r.integer(1, 17), units = r.integer(1, 9);
  const bool bias = v % 2 == 0;
  std::vector<int32_t> inputs = {b.param("x", {n, in}), b.param("w", {in, units})};
  if (bias) inputs.push_back(b.param("b", {units}));
  const int32_t out = b.op("dense", inputs, {n, units});
  b.describe(fmt::format("x{} w{}{}", dims({n, in}), dims({in, units}), bias ? " +bias" : ""));
  b.train_against_target(out);
}

void mse(CaseBuilder& b, Rng& r, int) {
  const Shape s = activation_shape(r);
  b.train_as_loss(b.op("mse", {b.param("p", s), b.param("t", s)}, {}));
  b.describe(fmt::format("p{} t{}", dims(s), dims(s)));
}

void abs_error_sum(CaseBuilder& b, Rng& r, int) {
  const Shape s = activation_shape(r);
  const int32_t p = b.input("p", MLPH_DTYPE_F32, s, -1, 1), t = b.input("t", MLPH_DTYPE_F32, s, -1, 1);
  b.evaluate_only(b.op("abs_error_sum", {p, t}, {}));
  b.describe(fmt::format("p{} t{} (evaluation only)", dims(s), dims(s)));
}

void log1p(CaseBuilder& b, Rng& r, int v) {
  const bool counts = v % 2 == 0;  // int16 counts (CosmoFlow's data), or float32
  const Shape s = counts ? Shape{2, r.integer(2, 4), r.integer(2, 4), r.integer(2, 4), 4} : activation_shape(r);
  const int32_t x = counts ? b.input("x", MLPH_DTYPE_I16, s, 0, 2000) : b.input("x", MLPH_DTYPE_F32, s, 0, 50);
  b.evaluate_only(b.op("log1p", {x}, s));
  b.describe(fmt::format("{} x{} (evaluation only)", counts ? "int16" : "f32", dims(s)));
}

void batch_norm(CaseBuilder& b, Rng& r, int v) {
  v %= 3;
  const int64_t c = r.integer(1, 4);
  const Shape x = v == 0 ? Shape{2, r.integer(2, 5), r.integer(2, 5), c}
                  : v == 1 ? Shape{2, r.integer(2, 3), r.integer(2, 3), r.integer(2, 3), c}
                           : Shape{r.integer(3, 8), c};
  const double eps = v == 1 ? 1e-3 : 1e-5, momentum = r.uniform(0.05, 0.5);
  const std::vector<int32_t> inputs = {b.param("x", x, -2, 2), b.param("gamma", {c}, 0.5, 1.5),
                                       b.param("beta", {c}, -0.5, 0.5), b.state("running_mean", {c}, -0.5, 0.5),
                                       b.state("running_var", {c}, 0.5, 2.0)};
  const int32_t out = b.op("batch_norm", inputs, x, {{"eps", eps}, {"momentum", momentum}});
  b.describe(fmt::format("x{} eps {:g} momentum {:.3f}: evaluation, training, running stats", dims(x), eps, momentum));
  b.train_against_target(out);
}

void add(CaseBuilder& b, Rng& r, int) {
  const Shape s = activation_shape(r);
  const int32_t out = b.op("add", {b.param("a", s), b.param("b", s)}, s);
  b.describe(fmt::format("a{} b{}", dims(s), dims(s)));
  b.train_against_target(out);
}

void concat_op(CaseBuilder& b, Rng& r, int v) {
  const int n = 2 + v % 2;
  Shape base = activation_shape(r), y = base;
  y.back() = 0;
  std::vector<int32_t> inputs;
  std::string text;
  for (int i = 0; i < n; ++i) {
    base.back() = r.integer(1, 4);
    y.back() += base.back();
    inputs.push_back(b.param(fmt::format("x{}", i + 1), base));
    text += fmt::format("{}{}", i ? " + " : "", dims(base));
  }
  const int32_t out = b.op("concat", inputs, y);
  b.describe(fmt::format("{} -> {}", text, dims(y)));
  b.train_against_target(out);
}

void global_avg_pool(CaseBuilder& b, Rng& r, int v) {
  const int spatial = v % 2 ? 3 : 2;
  Shape x{2}, y{2};
  for (int d = 0; d < spatial; ++d) x.push_back(r.integer(1, 5)), y.push_back(1);
  x.push_back(r.integer(1, 4)), y.push_back(x.back());
  const int32_t out = b.op("global_avg_pool", {b.param("x", x)}, y);
  b.describe(fmt::format("{}D x{}", spatial, dims(x)));
  b.train_against_target(out);
}

void broadcast(CaseBuilder& b, Rng& r, int v) {
  const int64_t c = r.integer(1, 4);
  // v 0: ASPP's pooled branch [N,1,1,C] -> [N,H,W,C]; v 1: 3D with one dim already full.
  const int64_t d = r.integer(2, 4);
  const Shape x = v % 2 ? Shape{2, 1, d, 1, c} : Shape{2, 1, 1, c};
  const Shape y = v % 2 ? Shape{2, r.integer(2, 4), d, r.integer(2, 4), c} : Shape{2, r.integer(2, 6), r.integer(2, 6), c};
  const int32_t out = b.op("broadcast", {b.param("x", x)}, y, {{"shape", numbers(y)}});
  b.describe(fmt::format("x{} -> {}", dims(x), dims(y)));
  b.train_against_target(out);
}

void channel_affine(CaseBuilder& b, Rng& r, int) {
  const Shape x = activation_shape(r);
  const int64_t c = x.back();
  const int32_t out = b.op("channel_affine", {b.param("x", x), b.param("w", {c}), b.param("b", {c})}, x);
  b.describe(fmt::format("x{} w[{}] b[{}]", dims(x), c, c));
  b.train_against_target(out);
}

void shift_scale(CaseBuilder& b, Rng& r, int) {
  const Shape x = activation_shape(r);
  const int64_t c = x.back();
  const int32_t in = b.input("x", MLPH_DTYPE_F32, x, -5, 20);
  const int32_t out = b.op("shift_scale", {in, b.state("shift", {c}, -5, 0), b.state("scale", {c}, 0.04, 0.2)}, x);
  b.describe(fmt::format("x{} shift[{}] scale[{}] (evaluation only)", dims(x), c, c));
  b.evaluate_only(out);
}

void softmax_cross_entropy(CaseBuilder& b, Rng& r, int v) {
  v %= 3;
  const int64_t c = r.integer(2, 5);
  const Shape labels = v == 0   ? Shape{r.integer(2, 6)}
                       : v == 1 ? Shape{2, r.integer(2, 5), r.integer(2, 5)}
                                : Shape{2, r.integer(2, 3), r.integer(2, 3), r.integer(2, 3)};
  std::vector<double> weights;
  for (int64_t i = 0; i < c; ++i) weights.push_back(r.uniform(0.2, 3.0));
  const int32_t logits = b.param("logits", concat(labels, {c}), -3, 3);
  const int32_t label = b.input("labels", MLPH_DTYPE_I32, labels, 0, static_cast<double>(c - 1));
  b.train_as_loss(b.op("softmax_cross_entropy", {logits, label}, {}, {{"class_weights", weights}}));
  b.describe(fmt::format("logits{} int32 labels, {} class weights", dims(concat(labels, {c})), c));
}

void iou(CaseBuilder& b, Rng& r, int v) {
  const bool absent = v % 2 == 1;  // a class neither predicted nor labelled: it scores 1/C
  const int64_t c = r.integer(3, 5);
  const Shape labels{2, r.integer(2, 6), r.integer(2, 6)};
  const int32_t logits = b.input("logits", MLPH_DTYPE_F32, concat(labels, {c}), -3, 3);
  if (absent) {
    HostTensor& t = b.last_input();
    for (size_t i = static_cast<size_t>(c - 1); i < t.numel(); i += static_cast<size_t>(c)) t.as<float>()[i] = -10;
  }
  const int32_t label = b.input("labels", MLPH_DTYPE_I32, labels, 0, static_cast<double>(c - (absent ? 2 : 1)));
  b.evaluate_only(b.op("iou", {logits, label}, {2}));
  b.describe(fmt::format("logits{} int32 labels{} (evaluation only)", dims(concat(labels, {c})),
                         absent ? fmt::format(", class {} absent", c - 1) : ""));
}

// The spatial ops on one rank: a grid of all 1, the degenerate split, where halo_exchange pads with
// zeros and spatial_gather is the identity. Their exchanges between ranks are checked under mpirun
// (tests/comms/mpi: spatial_equivalence).
void halo_exchange(CaseBuilder& b, Rng& r, int v) {
  const int spatial = v % 2 ? 3 : 2;
  const bool asymmetric = v % 4 >= 2;  // Keras 'same' with an even kernel: the odd cell after
  Shape x{2}, y{2}, grid, before, after;
  for (int d = 0; d < spatial; ++d) {
    const int64_t in = r.integer(1, 4), pb = r.integer(0, 2), pa = asymmetric ? r.integer(0, 2) : pb;
    x.push_back(in), y.push_back(in + pb + pa), grid.push_back(1), before.push_back(pb), after.push_back(pa);
  }
  const int64_t channels = r.integer(1, 4);
  x.push_back(channels), y.push_back(channels);
  const Shape halo = asymmetric ? concat(before, after) : before;
  const int32_t out =
      b.op("halo_exchange", {b.param("x", x)}, y, {{"grid", numbers(grid)}, {"halo", numbers(halo)}});
  b.describe(fmt::format("{}D x{} grid{} halo{} (one rank: zero padding)", spatial, dims(x), dims(grid), dims(halo)));
  b.train_against_target(out);
}

void spatial_gather(CaseBuilder& b, Rng& r, int v) {
  const int spatial = v % 2 ? 3 : 2;
  Shape x{2}, grid;
  for (int d = 0; d < spatial; ++d) x.push_back(r.integer(1, 4)), grid.push_back(1);
  x.push_back(r.integer(1, 4));
  const int32_t out = b.op("spatial_gather", {b.param("x", x)}, x, {{"grid", numbers(grid)}});
  b.describe(fmt::format("{}D x{} grid{} (one rank: the identity)", spatial, dims(x), dims(grid)));
  b.train_against_target(out);
}

// Regularization: a parameter with l2 > 0 adds l2 * sum(w^2) to the loss and 2 * l2 * w to its gradient.
void l2(CaseBuilder& b, Rng& r, int v) {
  const double factor = r.uniform(0.01, 0.1);
  if (v % 2 == 0) {
    const int64_t in = r.integer(2, 8), units = r.integer(2, 6);
    const int32_t w = b.param("w", {in, units}, -1, 1, MLPH_PARAM_TRAINABLE, factor);
    const int32_t out = b.op("dense", {b.param("x", {2, in}), w}, {2, units});
    b.describe(fmt::format("l2 {:.3f} on dense w{}", factor, dims({in, units})));
    return b.train_against_target(out);
  }
  const Shape x{2, r.integer(3, 5), r.integer(3, 5), 2};
  const int32_t w = b.param("w", {3, 3, 2, 3}, -1, 1, MLPH_PARAM_TRAINABLE, factor);
  const int32_t out = b.op("conv", {b.param("x", x), w}, {2, x[1] - 2, x[2] - 2, 3});
  b.describe(fmt::format("l2 {:.3f} on conv w[3,3,2,3], x{}", factor, dims(x)));
  b.train_against_target(out);
}

// A two-layer net trained 3 steps, with weight-decay masks (biases 0, the second kernel 0.5).
void optimizer(CaseBuilder& b, Rng& r, int v, const std::string& name) {
  const bool variant = v % 2 == 1;
  std::vector<sdk::AttrInit> attrs;
  std::string text;
  if (name == "sgd_keras") {
    const double momentum = r.uniform(0.5, 0.95);
    attrs = {{"momentum", momentum}};
    text = fmt::format("momentum {:.3f}{}", momentum, variant ? ", l2 0.05 on w1" : "");
  } else {
    const double beta1 = r.uniform(0.8, 0.95), beta2 = r.uniform(0.99, 0.999), wd = r.uniform(0.01, 0.1);
    attrs = {{"beta1", beta1}, {"beta2", beta2}, {"eps", 1e-6}, {"weight_decay", wd}};
    text = fmt::format("betas {:.3f},{:.4f} eps 1e-6 wd {:.3f}", beta1, beta2, wd);
    if (name == "lamb") {
      // The gradients' global norm is ~0.1-1 here: 1e-3 always clips, 1e3 never does.
      attrs.emplace_back("max_grad_norm", variant ? 1e3 : 1e-3);
      text += variant ? ", no clipping" : ", clipping active";
    }
  }
  const int32_t x = b.input("x", MLPH_DTYPE_F32, {4, 6}, -1, 1);
  const int32_t w1 = b.param("w1", {6, 5}, -1, 1, MLPH_PARAM_TRAINABLE, name == "sgd_keras" && variant ? 0.05 : 0.0);
  const int32_t b1 = b.param("b1", {5}, -1, 1, MLPH_PARAM_TRAINABLE, 0, 0);
  const int32_t w2 = b.param("w2", {5, 3}, -1, 1, MLPH_PARAM_TRAINABLE, 0, 0.5);
  const int32_t b2 = b.param("b2", {3}, -1, 1, MLPH_PARAM_TRAINABLE, 0, 0);
  const int32_t h = b.op("tanh", {b.op("dense", {x, w1, b1}, {4, 5}, {}, "dense1")}, {4, 5});
  const int32_t y = b.op("dense", {h, w2, b2}, {4, 3}, {}, "dense2");
  std::vector<double> lrs;
  for (int step = 0; step < 3; ++step) lrs.push_back(r.uniform(0.01, 0.1));
  b.describe(fmt::format("3 steps, dense-tanh-dense, wd masks 1/0/0.5/0, {}", text));
  b.train_against_target(y, name, std::move(attrs), std::move(lrs));
}

// A few ops chained as in DeepCAM, with 16 to 32 channels: enough for a backend to pick blocked
// layouts (oneDNN: nChw8c/16c) and hand them from op to op, which the one-op cases (1 to 4
// channels, graph-layout inputs) never exercise. Every conv is followed by batch norm or another
// op, never by the mse alone, so that a layout handed on is also read back. A ReLU always sits
// between two batch norms: with only linear ops between them, the first one's beta gradient is 0
// in exact arithmetic (the second removes its mean), and its computed value pure roundoff.
class Layers {
 public:
  Layers(CaseBuilder& b, Rng& r) : b_(b), r_(r) {}
  int32_t conv(int32_t x, int64_t co, int64_t k, int64_t stride = 1, int64_t dilation = 1, int64_t groups = 1,
               bool bias = false) {
    const Shape in = b_.shape(x);
    const int64_t pad = dilation * (k - 1) / 2, ci = in.back();
    const std::string name = fmt::format("conv{}", ++convs_);
    std::vector<int32_t> inputs = {x, b_.param(name + ".w", {k, k, ci / groups, co}, -0.3, 0.3)};
    if (bias) inputs.push_back(b_.param(name + ".b", {co}));
    const auto out = [&](int64_t s) { return (s + 2 * pad - dilation * (k - 1) - 1) / stride + 1; };
    const double st = double(stride), d = double(dilation), p = double(pad);
    return b_.op("conv", inputs, {in[0], out(in[1]), out(in[2]), co},
                 {{"stride", {st, st}}, {"dilation", {d, d}}, {"padding", {p, p}}, {"groups", double(groups)}}, name);
  }
  // DeepCAM's upsampler: k3 s2 p1 output_padding 1.
  int32_t upsample(int32_t x, int64_t co) {
    const Shape in = b_.shape(x);
    const std::string name = fmt::format("deconv{}", ++convs_);
    return b_.op("conv_transpose", {x, b_.param(name + ".w", {3, 3, co, in.back()}, -0.3, 0.3)},
                 {in[0], 2 * in[1], 2 * in[2], co},
                 {{"stride", {2, 2}}, {"dilation", {1, 1}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}}, name);
  }
  int32_t bn(int32_t x) {
    const int64_t c = b_.shape(x).back();
    const std::string name = fmt::format("bn{}", ++bns_);
    return b_.op("batch_norm",
                 {x, b_.param(name + ".gamma", {c}, 0.5, 1.5), b_.param(name + ".beta", {c}, -0.5, 0.5),
                  b_.state(name + ".mean", {c}, -0.5, 0.5), b_.state(name + ".var", {c}, 0.5, 2.0)},
                 b_.shape(x), {{"eps", 1e-5}, {"momentum", 0.1}}, name);
  }
  int32_t unary(const std::string& op, int32_t x) { return b_.op(op, {x}, b_.shape(x), {}, fmt::format("{}{}", op, ++others_)); }
  int32_t binary(const std::string& op, int32_t a, int32_t b, Shape out) {
    return b_.op(op, {a, b}, std::move(out), {}, fmt::format("{}{}", op, ++others_));
  }
  int32_t add(int32_t a, int32_t b) { return binary("add", a, b, b_.shape(a)); }
  int32_t concat(int32_t a, int32_t b) {
    Shape out = b_.shape(a);
    out.back() += b_.shape(b).back();
    return binary("concat", a, b, out);
  }
  int64_t channels() { return 8 * r_.integer(2, 4); }

 private:
  CaseBuilder& b_;
  Rng& r_;
  int convs_ = 0, bns_ = 0, others_ = 0;
};

void layers(CaseBuilder& b, Rng& r, int v) {
  v %= 6;
  Layers l(b, r);
  const int64_t c = l.channels(), side = 2 * r.integer(2, 4);
  const int32_t x = b.param("x", {2, side, side, c});
  int32_t y = -1;
  if (v == 0) {  // the decoder's tail: biased 1x1 conv, upsample, BN, ReLU, upsample to 3 classes
    y = l.upsample(l.unary("relu", l.bn(l.upsample(l.conv(x, c, 1, 1, 1, 1, true), c))), 3);
    b.describe(fmt::format("x[2,{0},{0},{1}] conv1x1+bias, upsample, bn, relu, upsample to 3", side, c));
  } else if (v == 1) {  // an Xception rep: dilated depthwise, pointwise, BN, ReLU (fused into nothing), + identity
    y = l.unary("relu", l.add(l.bn(l.conv(l.conv(x, c, 3, 1, 2, c), c, 1)), x));
    b.describe(fmt::format("x[2,{0},{0},{1}] depthwise k3 dil2, pointwise, bn, + x, relu", side, c));
  } else if (v == 2) {  // a strided block: sep conv stride 2 + (1x1 stride-2 skip, BN)
    const int64_t co = 2 * c;
    const int32_t main = l.conv(l.conv(l.unary("relu", l.bn(l.conv(x, co, 1))), co, 3, 2, 1, co), co, 1);
    y = l.unary("relu", l.add(main, l.bn(l.conv(x, co, 1, 2))));
    b.describe(fmt::format("x[2,{0},{0},{1}] conv1x1, bn, relu, depthwise k3 s2, pointwise + (conv1x1 s2, bn), relu", side, c));
  } else if (v == 3) {  // the decoder's concat: upsampled features and low-level features, then a 3x3 conv
    const int32_t low = l.unary("relu", l.bn(l.conv(x, 48, 1)));
    const int32_t up = l.unary("relu", l.bn(l.upsample(l.conv(l.unary("relu", x), c, 3, 2, 1, 1), c)));
    y = l.bn(l.conv(l.concat(up, low), c, 3));
    b.describe(fmt::format("x[2,{0},{0},{1}] concat(conv s2, upsample, bn, relu | conv1x1 to 48, bn, relu), conv3x3, bn", side, c));
  } else if (v == 4) {  // one value, two consumers: the ReLU'd low-level features feed the next block and the decoder
    const int32_t h = l.unary("relu", l.conv(x, c, 3));  // conv + relu: fused
    y = l.add(l.bn(l.conv(h, c, 3)), l.bn(l.conv(h, c, 1)));
    b.describe(fmt::format("x[2,{0},{0},{1}] conv3x3+relu (fused) feeding conv3x3, bn and conv1x1, bn; add", side, c));
  } else {  // ASPP: dilated 3x3 and 1x1 branches and the pooled branch broadcast, concatenated
    const Shape in = b.shape(x);
    const int32_t pooled = b.op("global_avg_pool", {x}, {2, 1, 1, c}, {}, "pool");
    const int32_t projected = l.unary("relu", l.conv(pooled, c, 1));
    const int32_t wide = b.op("broadcast", {projected}, in, {{"shape", numbers(in)}}, "broadcast");
    const int32_t branches = l.concat(l.concat(l.unary("relu", l.bn(l.conv(x, c, 3, 1, 2))), l.unary("relu", l.bn(l.conv(x, c, 1)))), wide);
    y = l.bn(l.conv(branches, c, 1));
    b.describe(fmt::format("x[2,{0},{0},{1}] ASPP: concat(conv k3 dil2, conv1x1, pool-conv-broadcast), conv1x1, bn", side, c));
  }
  // The mse's gradients are ~1/numel(y): a learning rate of numel(y) / 10 gives updates as large as
  // the one-op cases', well above the roundoff of the weights they change.
  b.train_against_target(y, "sgd_keras", {{"momentum", 0.0}}, {0.1 * double(sdk::numel(b.shape(y).data(), int32_t(b.shape(y).size())))});
}

using CaseMaker = std::function<void(CaseBuilder&, Rng&, int)>;

// The checks in table order: docs/ops.md's ops, regularization, the optimizers.
const std::vector<std::pair<std::string, CaseMaker>>& makers() {
  const auto optimizer_of = [](std::string name) {
    return [name](CaseBuilder& b, Rng& r, int v) { optimizer(b, r, v, name); };
  };
  static const std::vector<std::pair<std::string, CaseMaker>> table = {
      {"log1p", log1p},
      {"conv", conv},
      {"leaky_relu", leaky_relu},
      {"relu", relu},
      {"tanh", tanh_op},
      {"scale", scale},
      {"max_pool", max_pool},
      {"reshape", reshape},
      {"dense", dense},
      {"dropout", dropout},
      {"mse", mse},
      {"abs_error_sum", abs_error_sum},
      {"conv_transpose", conv_transpose},
      {"batch_norm", batch_norm},
      {"add", add},
      {"concat", concat_op},
      {"global_avg_pool", global_avg_pool},
      {"broadcast", broadcast},
      {"channel_affine", channel_affine},
      {"shift_scale", shift_scale},
      {"softmax_cross_entropy", softmax_cross_entropy},
      {"iou", iou},
      {"halo_exchange", halo_exchange},
      {"spatial_gather", spatial_gather},
      {"l2", l2},
      {"sgd_keras", optimizer_of("sgd_keras")},
      {"adam", optimizer_of("adam")},
      {"adamw", optimizer_of("adamw")},
      {"lamb", optimizer_of("lamb")},
      {"layers", layers},
  };
  return table;
}

}  // namespace

const std::vector<std::string>& op_check_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, maker] : makers()) out.push_back(name);
    return out;
  }();
  return names;
}

OpCase make_case(const std::string& name, int index, uint64_t seed) {
  const auto it = std::find_if(makers().begin(), makers().end(), [&](const auto& m) { return m.first == name; });
  if (it == makers().end()) throw std::invalid_argument("no op check named '" + name + "'");
  OpCase c;
  c.op = name;
  Rng rng(mlph_mix64(seed ^ fnv1a(name)) ^ static_cast<uint64_t>(index));
  CaseBuilder builder(c, rng);
  it->second(builder, rng, index);
  return c;
}

std::vector<OpCase> make_cases(const std::string& name, int count, uint64_t seed) {
  std::vector<OpCase> cases;
  for (int i = 0; i < count; ++i) cases.push_back(make_case(name, i, seed));
  return cases;
}

}  // namespace mlph::conformance
