#include "compile.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "mlph/sdk/error.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::reference {
namespace {
using sdk::fail;

struct OpRule {
  OpKind kind;
  size_t min_inputs, max_inputs;
  std::vector<std::string> attrs;  // the attributes it understands
};

const std::map<std::string, OpRule, std::less<>>& op_rules() {
  static const std::map<std::string, OpRule, std::less<>> rules = {
      {"log1p", {OpKind::log1p, 1, 1, {}}},
      {"conv", {OpKind::conv, 2, 3, {"stride", "dilation", "padding", "groups"}}},
      {"leaky_relu", {OpKind::leaky_relu, 1, 1, {"alpha"}}},
      {"relu", {OpKind::relu, 1, 1, {}}},
      {"tanh", {OpKind::tanh, 1, 1, {}}},
      {"scale", {OpKind::scale, 1, 1, {"factor"}}},
      {"max_pool", {OpKind::max_pool, 1, 1, {"kernel", "stride"}}},
      {"reshape", {OpKind::reshape, 1, 1, {"shape"}}},
      {"dense", {OpKind::dense, 2, 3, {}}},
      {"dropout", {OpKind::dropout, 1, 1, {"rate"}}},
      {"mse", {OpKind::mse, 2, 2, {}}},
      {"abs_error_sum", {OpKind::abs_error_sum, 2, 2, {}}},
      {"conv_transpose", {OpKind::conv_transpose, 2, 3, {"stride", "dilation", "padding", "output_padding"}}},
      {"batch_norm", {OpKind::batch_norm, 5, 5, {"eps", "momentum", "group_size"}}},
      {"add", {OpKind::add, 2, 2, {}}},
      {"concat", {OpKind::concat, 1, std::numeric_limits<size_t>::max(), {}}},
      {"global_avg_pool", {OpKind::global_avg_pool, 1, 1, {}}},
      {"broadcast", {OpKind::broadcast, 1, 1, {"shape"}}},
      {"channel_affine", {OpKind::channel_affine, 3, 3, {}}},
      {"shift_scale", {OpKind::shift_scale, 3, 3, {}}},
      {"softmax_cross_entropy", {OpKind::softmax_cross_entropy, 2, 2, {"class_weights"}}},
      {"iou", {OpKind::iou, 2, 2, {}}},
  };
  return rules;
}

std::string shape_of(const ValueInfo& v) {
  return sdk::shape_string(v.shape.data(), static_cast<int32_t>(v.shape.size()));
}
std::string shape_of(const std::vector<int64_t>& s) {
  return sdk::shape_string(s.data(), static_cast<int32_t>(s.size()));
}

// Checks one node against its op's rules and fills in its compiled form.
class NodeChecker {
 public:
  NodeChecker(const MLPH_Node& node, const std::vector<ValueInfo>& values)
      : node_(node), values_(values), attrs_(node) {}

  [[noreturn]] void invalid(const std::string& what) const {
    fail(MLPH_INVALID_ARGUMENT,
         "reference backend: node '" + std::string(node_.name) + "' (" + node_.op + "): " + what);
  }
  [[noreturn]] void unimplemented(const std::string& what) const {
    fail(MLPH_UNIMPLEMENTED, "reference backend: node '" + std::string(node_.name) + "' (" + node_.op + "): " + what);
  }

  CompiledNode check(const OpRule& rule, uint64_t index) {
    if (node_.n_outputs != 1) invalid("expects exactly one output, got " + std::to_string(node_.n_outputs));
    if (node_.n_inputs < rule.min_inputs || node_.n_inputs > rule.max_inputs) {
      std::string range = std::to_string(rule.min_inputs);
      if (rule.max_inputs == std::numeric_limits<size_t>::max())
        range += " or more";
      else if (rule.max_inputs > rule.min_inputs)
        range += " to " + std::to_string(rule.max_inputs);
      invalid("expects " + range + " inputs, got " + std::to_string(node_.n_inputs));
    }
    for (size_t a = 0; a < node_.n_attrs; ++a)
      if (std::find(rule.attrs.begin(), rule.attrs.end(), node_.attrs[a].key) == rule.attrs.end())
        unimplemented(std::string("attribute '") + node_.attrs[a].key + "' is not implemented");
    CompiledNode c;
    c.kind = rule.kind;
    c.name = node_.name;
    c.index = index;
    c.inputs.assign(node_.inputs, node_.inputs + node_.n_inputs);
    c.output = node_.outputs[0];
    check_dtypes(c);
    switch (c.kind) {
      case OpKind::conv:
        c.window = conv_window(c);
        break;
      case OpKind::max_pool:
        c.window = pool_window(c);
        break;
      case OpKind::dense:
        c.dense = dense_shape(c);
        break;
      case OpKind::reshape:
        check_reshape(c);
        break;
      case OpKind::mse:
      case OpKind::abs_error_sum:
        check_loss(c);
        break;
      case OpKind::conv_transpose:
        c.window = conv_transpose_window(c);
        break;
      case OpKind::batch_norm:
      case OpKind::channel_affine:
      case OpKind::shift_scale:
        check_per_channel(c);
        break;
      case OpKind::add:
        if (in(c, 1).shape != in(c, 0).shape)
          invalid("inputs " + shape_of(in(c, 0)) + " and " + shape_of(in(c, 1)) + " differ in shape");
        expect_output(c, in(c, 0).shape, "input " + shape_of(in(c, 0)));
        break;
      case OpKind::concat:
        check_concat(c);
        break;
      case OpKind::global_avg_pool:
        check_global_avg_pool(c);
        break;
      case OpKind::broadcast:
        check_broadcast(c);
        break;
      case OpKind::softmax_cross_entropy:
      case OpKind::iou:
        check_segmentation(c);
        break;
      default:
        expect_output(c, in(c, 0).shape, "input " + shape_of(in(c, 0)));
    }
    if (c.kind == OpKind::leaky_relu) c.attr = attrs_.number("alpha");
    if (c.kind == OpKind::scale) c.attr = attrs_.number("factor");
    if (c.kind == OpKind::batch_norm) {
      c.batch_norm = {attrs_.number("eps", 1e-5), attrs_.number("momentum", 0.1),
                      static_cast<int64_t>(attrs_.number("group_size", 1))};
      if (!(c.batch_norm.eps > 0) || !(c.batch_norm.momentum >= 0 && c.batch_norm.momentum <= 1))
        invalid("eps must be > 0 and momentum in [0, 1]");
      if (c.batch_norm.group_size < 1) invalid("group_size must be >= 1");
      if (c.rows.rows * c.batch_norm.group_size < 2)
        invalid("training needs more than 1 value per channel, input is " + shape_of(in(c, 0)));
    }
    if (c.kind == OpKind::dropout) {
      c.attr = attrs_.number("rate");
      if (!(c.attr >= 0.0 && c.attr < 1.0)) invalid("rate " + std::to_string(c.attr) + " is not in [0, 1)");
    }
    return c;
  }

 private:
  const ValueInfo& in(const CompiledNode& c, size_t i) const { return values_[static_cast<size_t>(c.inputs[i])]; }
  const ValueInfo& out(const CompiledNode& c) const { return values_[static_cast<size_t>(c.output)]; }

  // Everything is float32 except log1p's int16 counts and the int32 labels of the segmentation losses.
  void check_dtypes(const CompiledNode& c) const {
    if (out(c).dtype != MLPH_DTYPE_F32) unimplemented("output '" + out(c).name + "' must be float32");
    const bool labels = c.kind == OpKind::softmax_cross_entropy || c.kind == OpKind::iou;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const MLPH_DType t = in(c, i).dtype;
      if (labels && i == 1) {
        if (t != MLPH_DTYPE_I32) unimplemented("labels '" + in(c, i).name + "' must be int32");
      } else if (t != MLPH_DTYPE_F32 && !(c.kind == OpKind::log1p && t == MLPH_DTYPE_I16)) {
        unimplemented("input '" + in(c, i).name + "' must be float32" + (c.kind == OpKind::log1p ? " or int16" : ""));
      }
    }
  }

  // x [N, ..., C] as [rows, C].
  static RowsByChannels rows_of(const ValueInfo& x) { return {x.numel() / x.shape.back(), x.shape.back()}; }

  // x [N, ..., C] and [C] vectors (gamma, beta, running stats; weights and bias; shift and scale).
  void check_per_channel(CompiledNode& c) const {
    const ValueInfo& x = in(c, 0);
    if (x.shape.size() < 2) invalid("input '" + x.name + "' " + shape_of(x) + " must be [N, ..., C]");
    c.rows = rows_of(x);
    for (size_t i = 1; i < c.inputs.size(); ++i)
      if (in(c, i).shape != std::vector<int64_t>{c.rows.channels})
        invalid("input '" + in(c, i).name + "' " + shape_of(in(c, i)) + " must be [" + std::to_string(c.rows.channels) +
                "], one per channel of " + shape_of(x));
    expect_output(c, x.shape, "input " + shape_of(x));
  }

  void check_concat(CompiledNode& c) const {
    std::vector<int64_t> shape = in(c, 0).shape;
    if (shape.size() < 2) invalid("input '" + in(c, 0).name + "' " + shape_of(in(c, 0)) + " must be [N, ..., C]");
    shape.back() = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const ValueInfo& x = in(c, i);
      if (x.shape.size() != shape.size() || !std::equal(shape.begin(), shape.end() - 1, x.shape.begin()))
        invalid("input '" + x.name + "' " + shape_of(x) + " differs from " + shape_of(in(c, 0)) +
                " in more than the channels");
      c.widths.push_back(x.shape.back());
      shape.back() += x.shape.back();
    }
    c.rows = {rows_of(in(c, 0)).rows, shape.back()};
    expect_output(c, shape, "concatenating the inputs");
  }

  void check_global_avg_pool(CompiledNode& c) const {
    const ValueInfo& x = in(c, 0);
    if (x.shape.size() < 3) invalid("input '" + x.name + "' " + shape_of(x) + " must be [N, spatial..., C]");
    std::vector<int64_t> shape(x.shape.size(), 1);
    shape.front() = x.shape.front(), shape.back() = x.shape.back();
    c.rows = rows_of(x);
    c.batch = x.shape.front();
    expect_output(c, shape, "input " + shape_of(x));
  }

  void check_broadcast(CompiledNode& c) const {
    const ValueInfo &x = in(c, 0), &y = out(c);
    if (attrs_.has("shape") && ints("shape", y.shape.size(), 0, 1) != y.shape)
      invalid("attribute 'shape' disagrees with output '" + y.name + "' " + shape_of(y));
    bool fits = x.shape.size() == y.shape.size() && x.shape.size() >= 2 && x.shape.front() == y.shape.front() &&
                x.shape.back() == y.shape.back();
    for (size_t d = 1; fits && d + 1 < x.shape.size(); ++d) fits = x.shape[d] == 1 || x.shape[d] == y.shape[d];
    if (!fits)
      invalid("input " + shape_of(x) + " cannot be broadcast to " + shape_of(y) +
              " (only size-1 spatial dims are repeated)");
    c.in_shape = x.shape, c.out_shape = y.shape;
  }

  // logits [N, S..., C] float32 and labels [N, S...] int32.
  void check_segmentation(CompiledNode& c) const {
    const ValueInfo &logits = in(c, 0), &labels = in(c, 1);
    if (logits.shape.size() < 2 || labels.shape != std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1))
      invalid("logits " + shape_of(logits) + " and labels " + shape_of(labels) + " must be [N, S..., C] and [N, S...]");
    c.rows = rows_of(logits);
    c.batch = logits.shape.front();
    if (c.kind == OpKind::iou) return expect_output(c, {c.batch}, "logits " + shape_of(logits));
    expect_output(c, {}, "logits " + shape_of(logits));
    if (!attrs_.has("class_weights")) {
      c.class_weights.assign(static_cast<size_t>(c.rows.channels), 1.0f);
      return;
    }
    for (double w : attrs_.numbers("class_weights")) c.class_weights.push_back(static_cast<float>(w));
    if (c.class_weights.size() != static_cast<size_t>(c.rows.channels))
      invalid("attribute 'class_weights' has " + std::to_string(c.class_weights.size()) + " values for " +
              std::to_string(c.rows.channels) + " classes");
  }

  // The conv whose adjoint this is: it maps the output [N, O..., Co] back to the input [N, S..., Ci] with the
  // weights [K..., Co, Ci] as its own [K..., Cin, Cout]. Its padding after is shortened by output_padding so
  // that its windows end exactly at the output's last position.
  Window conv_transpose_window(const CompiledNode& c) const {
    const ValueInfo &x = in(c, 0), &w = in(c, 1);
    const Window input = spatial_window(x);
    const size_t spatial = x.shape.size() - 2;
    if (w.shape.size() != x.shape.size() || w.shape.back() != input.in_channels)
      invalid("weights '" + w.name + "' " + shape_of(w) + " must be [kernel..., Co, " +
              std::to_string(input.in_channels) + "] for input " + shape_of(x));
    const std::vector<int64_t> stride = ints("stride", spatial, 1, 1), dilation = ints("dilation", spatial, 1, 1),
                               padding = ints("padding", spatial, 0, 0, 2 * spatial),
                               output_padding = ints("output_padding", spatial, 0, 0);
    Window g;
    g.batch = input.batch;
    g.in_channels = w.shape[spatial], g.out_channels = input.in_channels;
    std::vector<int64_t> shape{g.batch};
    for (size_t d = 0; d < spatial; ++d) {
      const size_t e = 3 - spatial + d;
      g.kernel[e] = w.shape[d], g.stride[e] = stride[d], g.dilation[e] = dilation[d];
      g.pad_before[e] = padding[d];
      const int64_t pad_after = padding[padding.size() == spatial ? d : spatial + d];
      g.out[e] = input.in[e];
      g.in[e] = (g.out[e] - 1) * g.stride[e] - g.pad_before[e] - pad_after + g.dilation[e] * (g.kernel[e] - 1) +
                output_padding[d] + 1;
      g.pad_after[e] = pad_after - output_padding[d];
      if (g.in[e] < 1) invalid("the output along spatial dim " + std::to_string(d) + " would be empty");
      shape.push_back(g.in[e]);
    }
    shape.push_back(g.in_channels);
    if (c.has_bias() && in(c, 2).shape != std::vector<int64_t>{g.in_channels})
      invalid("bias '" + in(c, 2).name + "' " + shape_of(in(c, 2)) + " must be [" + std::to_string(g.in_channels) +
              "]");
    expect_output(c, shape, "input " + shape_of(x) + " with weights " + shape_of(w));
    return g;
  }

  // The declared output must be `expected`, which follows from `from` (a description of the inputs).
  void expect_output(const CompiledNode& c, const std::vector<int64_t>& expected, const std::string& from) const {
    if (out(c).shape != expected)
      invalid(from + " gives output " + shape_of(expected) + ", but '" + out(c).name + "' is declared " +
              shape_of(out(c)));
  }

  // An integer list attribute with one entry per spatial dim (or `alt_count`), every entry >= `min`.
  std::vector<int64_t> ints(const char* key, size_t count, int64_t fallback, int64_t min, size_t alt_count = 0) const {
    if (!attrs_.has(key)) return std::vector<int64_t>(count, fallback);
    std::vector<int64_t> out;
    for (double v : attrs_.numbers(key)) {
      if (v != std::floor(v) || v < static_cast<double>(min) || v > 1e15)
        invalid(std::string("attribute '") + key + "' must hold integers >= " + std::to_string(min));
      out.push_back(static_cast<int64_t>(v));
    }
    if (out.size() != count && (alt_count == 0 || out.size() != alt_count))
      invalid(std::string("attribute '") + key + "' needs " + std::to_string(count) + " entries, got " +
              std::to_string(out.size()));
    return out;
  }

  // Batch and channels of x [N, spatial..., C] with 2 or 3 spatial dims into a Window.
  Window spatial_window(const ValueInfo& x) const {
    if (x.shape.size() != 4 && x.shape.size() != 5)
      invalid("input '" + x.name + "' " + shape_of(x) + " must be [N, spatial..., C] with 2 or 3 spatial dims");
    const size_t spatial = x.shape.size() - 2;
    Window g;
    g.batch = x.shape[0];
    g.in_channels = x.shape.back();
    for (size_t d = 0; d < spatial; ++d) g.in[3 - spatial + d] = x.shape[1 + d];  // 2-D runs as depth 1
    return g;
  }

  // Fills the per-dim geometry (dims right-aligned into 3) and returns the implied output shape.
  std::vector<int64_t> finish_window(Window& g, size_t spatial, const std::vector<int64_t>& kernel,
                                     const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                                     const std::vector<int64_t>& padding) const {
    std::vector<int64_t> shape{g.batch};
    for (size_t d = 0; d < spatial; ++d) {
      const size_t e = 3 - spatial + d;
      g.kernel[e] = kernel[d], g.stride[e] = stride[d], g.dilation[e] = dilation[d];
      g.pad_before[e] = padding[d];
      g.pad_after[e] = padding[padding.size() == spatial ? d : spatial + d];
      g.out[e] = g.expected_out(static_cast<int>(e));
      if (g.in[e] + g.pad_before[e] + g.pad_after[e] < g.dilation[e] * (g.kernel[e] - 1) + 1)
        invalid("the window along spatial dim " + std::to_string(d) + " is larger than the padded input");
      shape.push_back(g.out[e]);
    }
    shape.push_back(g.out_channels);
    return shape;
  }

  Window conv_window(const CompiledNode& c) const {
    const ValueInfo &x = in(c, 0), &w = in(c, 1);
    Window g = spatial_window(x);
    const size_t spatial = x.shape.size() - 2;
    g.groups = ints("groups", 1, 1, 1)[0];
    if (w.shape.size() != x.shape.size())
      invalid("weights '" + w.name + "' " + shape_of(w) + " must be [kernel..., Ci/groups, Co] for input " +
              shape_of(x));
    g.out_channels = w.shape.back();
    if (g.in_channels % g.groups || g.out_channels % g.groups || w.shape[spatial] != g.in_channels / g.groups)
      invalid("weights " + shape_of(w) + " do not fit input " + shape_of(x) + " in " + std::to_string(g.groups) +
              " groups (expected [kernel..., " + std::to_string(g.in_channels / g.groups) +
              ", Co], Co divisible by groups)");
    const std::vector<int64_t> kernel(w.shape.begin(), w.shape.begin() + static_cast<long>(spatial));
    if (std::any_of(kernel.begin(), kernel.end(), [](int64_t k) { return k < 1; }))
      invalid("weights " + shape_of(w) + " have an empty kernel");
    const auto shape = finish_window(g, spatial, kernel, ints("stride", spatial, 1, 1), ints("dilation", spatial, 1, 1),
                                     ints("padding", spatial, 0, 0, 2 * spatial));
    if (c.has_bias() && in(c, 2).shape != std::vector<int64_t>{g.out_channels})
      invalid("bias '" + in(c, 2).name + "' " + shape_of(in(c, 2)) + " must be [" + std::to_string(g.out_channels) +
              "]");
    expect_output(c, shape, "input " + shape_of(x) + " with weights " + shape_of(w));
    return g;
  }

  Window pool_window(const CompiledNode& c) const {
    const ValueInfo& x = in(c, 0);
    Window g = spatial_window(x);
    const size_t spatial = x.shape.size() - 2;
    g.out_channels = g.in_channels;
    if (!attrs_.has("kernel")) invalid("missing attribute 'kernel'");
    const std::vector<int64_t> kernel = ints("kernel", spatial, 1, 1);
    // Keras MaxPooling: the stride defaults to the pool size.
    const std::vector<int64_t> stride = attrs_.has("stride") ? ints("stride", spatial, 1, 1) : kernel;
    const auto shape =
        finish_window(g, spatial, kernel, stride, std::vector<int64_t>(spatial, 1), std::vector<int64_t>(spatial, 0));
    expect_output(c, shape, "input " + shape_of(x));
    return g;
  }

  DenseShape dense_shape(const CompiledNode& c) const {
    const ValueInfo &x = in(c, 0), &w = in(c, 1);
    if (x.shape.size() != 2 || w.shape.size() != 2 || w.shape[0] != x.shape[1])
      invalid("input " + shape_of(x) + " and weights " + shape_of(w) + " must be [N, in] and [in, out]");
    const DenseShape s{x.shape[0], x.shape[1], w.shape[1]};
    if (c.has_bias() && in(c, 2).shape != std::vector<int64_t>{s.out})
      invalid("bias '" + in(c, 2).name + "' " + shape_of(in(c, 2)) + " must be [" + std::to_string(s.out) + "]");
    expect_output(c, {s.batch, s.out}, "input " + shape_of(x) + " with weights " + shape_of(w));
    return s;
  }

  void check_reshape(const CompiledNode& c) const {
    if (in(c, 0).numel() != out(c).numel())
      invalid("cannot reshape input " + shape_of(in(c, 0)) + " to output " + shape_of(out(c)));
    if (attrs_.has("shape") && ints("shape", out(c).shape.size(), 0, 0) != out(c).shape)
      invalid("attribute 'shape' disagrees with output '" + out(c).name + "' " + shape_of(out(c)));
  }

  void check_loss(const CompiledNode& c) const {
    if (in(c, 0).shape != in(c, 1).shape)
      invalid("prediction " + shape_of(in(c, 0)) + " and target " + shape_of(in(c, 1)) + " differ in shape");
    expect_output(c, {}, "prediction " + shape_of(in(c, 0)));
  }

  const MLPH_Node& node_;
  const std::vector<ValueInfo>& values_;
  sdk::Attrs attrs_;
};

// Tracks which values exist so far: graph inputs and parameters first, then node outputs in order.
class Definitions {
 public:
  explicit Definitions(const std::vector<ValueInfo>& values) : values_(values), defined_(values.size(), false) {}

  void check_index(int32_t v, const std::string& where) const {
    if (v < 0 || static_cast<size_t>(v) >= values_.size())
      fail(MLPH_INVALID_ARGUMENT, "reference backend: " + where + " refers to value " + std::to_string(v) + " of " +
                                      std::to_string(values_.size()));
  }
  void define(int32_t v, const std::string& where) {
    check_index(v, where);
    if (defined_[static_cast<size_t>(v)])
      fail(MLPH_INVALID_ARGUMENT, "reference backend: " + where + " defines value '" +
                                      values_[static_cast<size_t>(v)].name + "', which is already defined");
    defined_[static_cast<size_t>(v)] = true;
  }
  void require(int32_t v, const std::string& where) const {
    check_index(v, where);
    if (!defined_[static_cast<size_t>(v)])
      fail(MLPH_INVALID_ARGUMENT, "reference backend: " + where + " uses value '" +
                                      values_[static_cast<size_t>(v)].name +
                                      "' before it is defined (nodes must be in topological order)");
  }

 private:
  const std::vector<ValueInfo>& values_;
  std::vector<bool> defined_;
};

std::vector<ValueInfo> copy_values(const MLPH_Graph& graph) {
  std::vector<ValueInfo> values;
  for (size_t i = 0; i < graph.n_values; ++i) {
    const MLPH_Value& v = graph.values[i];
    if (v.ndim < 0 || v.ndim > MLPH_MAX_DIMS || std::any_of(v.shape, v.shape + v.ndim, [](int64_t d) { return d < 1; }))
      fail(MLPH_INVALID_ARGUMENT, "reference backend: value " + std::to_string(i) + " has an invalid shape");
    std::string name = v.name ? v.name : "value ";
    if (!v.name) name += std::to_string(i);  // appended: GCC 12 warns falsely (-Wrestrict) on "..." + string
    values.push_back({std::move(name), v.dtype, {v.shape, v.shape + v.ndim}});
  }
  return values;
}

void copy_params(const MLPH_Graph& graph, Program& p, Definitions& defs) {
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Parameter& param = graph.params[i];
    const std::string where = "parameter " + std::to_string(i);
    defs.define(param.value, where);
    const ValueInfo& v = p.values[static_cast<size_t>(param.value)];
    if (v.dtype != MLPH_DTYPE_F32 || !param.init)
      fail(MLPH_INVALID_ARGUMENT,
           "reference backend: parameter '" + v.name + "' must be float32 with initial contents");
    if (!(param.l2 >= 0.0)) fail(MLPH_INVALID_ARGUMENT, "reference backend: parameter '" + v.name + "' has l2 < 0");
    if (!(param.weight_decay >= 0.0))
      fail(MLPH_INVALID_ARGUMENT, "reference backend: parameter '" + v.name + "' has weight_decay < 0");
    p.params.push_back({param.value,
                        {param.init, param.init + v.numel()},
                        param.l2,
                        param.weight_decay,
                        (param.flags & MLPH_PARAM_TRAINABLE) != 0});
  }
}

void copy_optimizer(const MLPH_Optimizer& opt, Program& p) {
  static const std::map<std::string, std::pair<OptimizerKind, std::vector<std::string>>, std::less<>> known = {
      {"sgd_keras", {OptimizerKind::sgd_keras, {"momentum"}}},
      {"adam", {OptimizerKind::adam, {"beta1", "beta2", "eps", "weight_decay"}}},
      {"adamw", {OptimizerKind::adamw, {"beta1", "beta2", "eps", "weight_decay"}}},
      {"lamb", {OptimizerKind::lamb, {"beta1", "beta2", "eps", "weight_decay", "max_grad_norm"}}},
  };
  const std::string name = opt.name ? opt.name : "";
  auto it = known.find(name);
  if (it == known.end()) fail(MLPH_UNIMPLEMENTED, "reference backend: optimizer '" + name + "' is not implemented");
  const std::vector<std::string>& keys = it->second.second;
  for (size_t a = 0; a < opt.n_attrs; ++a)
    if (std::find(keys.begin(), keys.end(), opt.attrs[a].key) == keys.end())
      fail(MLPH_UNIMPLEMENTED,
           "reference backend: optimizer " + name + ": attribute '" + opt.attrs[a].key + "' is not implemented");
  const sdk::Attrs attrs(opt.attrs, opt.n_attrs, "optimizer " + name);
  OptimizerSpec& spec = p.optimizer;
  spec.kind = it->second.first;
  if (spec.kind == OptimizerKind::sgd_keras) {
    spec.momentum = attrs.number("momentum", 0.0);
    if (!(spec.momentum >= 0.0)) fail(MLPH_INVALID_ARGUMENT, "reference backend: sgd_keras momentum must be >= 0");
    return;
  }
  // Every Adam-family hyperparameter is required: their defaults differ between PyTorch, apex and Keras.
  spec.adam.beta1 = attrs.number("beta1"), spec.adam.beta2 = attrs.number("beta2");
  spec.adam.eps = attrs.number("eps"), spec.adam.weight_decay = attrs.number("weight_decay");
  if (spec.kind == OptimizerKind::lamb) spec.adam.max_grad_norm = attrs.number("max_grad_norm");
  const AdamAttrs& a = spec.adam;
  if (!(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1 && a.eps > 0 && a.weight_decay >= 0 &&
        a.max_grad_norm > 0))
    fail(MLPH_INVALID_ARGUMENT, "reference backend: optimizer " + name +
                                    ": needs beta1, beta2 in [0, 1), eps > 0, weight_decay >= 0, max_grad_norm > 0");
}

// batch_norm writes its running statistics during training: they must be state, parameters outside the optimizer.
void check_running_statistics(const Program& p) {
  for (const CompiledNode& node : p.nodes) {
    if (node.kind != OpKind::batch_norm) continue;
    for (size_t i : {3u, 4u}) {
      const int32_t v = node.inputs[i];
      const bool state = std::any_of(p.params.begin(), p.params.end(),
                                     [&](const CompiledParam& param) { return param.value == v && !param.trainable; });
      if (!state)
        fail(MLPH_INVALID_ARGUMENT, "reference backend: node '" + node.name + "' (batch_norm): running statistic '" +
                                        p.values[static_cast<size_t>(v)].name +
                                        "' must be a parameter without MLPH_PARAM_TRAINABLE");
    }
  }
}

}  // namespace

bool has_gradient(OpKind kind) {
  return kind != OpKind::log1p && kind != OpKind::abs_error_sum && kind != OpKind::shift_scale && kind != OpKind::iou;
}

int64_t ValueInfo::numel() const { return sdk::numel(shape.data(), static_cast<int32_t>(shape.size())); }

MLPH_Value ValueInfo::as_value() const {
  MLPH_Value v{};
  v.name = name.c_str();
  v.dtype = dtype;
  v.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape);
  return v;
}

Program compile_graph(const MLPH_Graph& graph) {
  if (graph.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, seed))
    fail(MLPH_INVALID_ARGUMENT, "reference backend: MLPH_Graph is too small (an older ABI?)");
  Program p;
  p.values = copy_values(graph);
  p.seed = graph.seed;
  Definitions defs(p.values);
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const int32_t v = graph.inputs[i];
    defs.define(v, "graph input " + std::to_string(i));
    const MLPH_DType t = p.values[static_cast<size_t>(v)].dtype;
    if (t != MLPH_DTYPE_F32 && t != MLPH_DTYPE_I16 && t != MLPH_DTYPE_I32)
      fail(MLPH_UNIMPLEMENTED, "reference backend: graph input '" + p.values[static_cast<size_t>(v)].name +
                                   "' must be float32, int16 or int32");
    p.inputs.push_back(v);
  }
  copy_params(graph, p, defs);

  for (size_t i = 0; i < graph.n_nodes; ++i) {
    const MLPH_Node& node = graph.nodes[i];
    if (!node.op || !node.name || (node.n_inputs && !node.inputs) || (node.n_outputs && !node.outputs) ||
        (node.n_attrs && !node.attrs))
      fail(MLPH_INVALID_ARGUMENT,
           "reference backend: node " + std::to_string(i) + " is incomplete (null op, name or array)");
    const std::string where = std::string("node '") + node.name + "'";
    auto rule = op_rules().find(std::string_view(node.op));
    if (rule == op_rules().end())
      fail(MLPH_UNIMPLEMENTED, "reference backend: " + where + " uses op '" + node.op + "', which is not implemented");
    for (size_t k = 0; k < node.n_inputs; ++k) defs.require(node.inputs[k], where);
    if (node.n_outputs == 1) defs.define(node.outputs[0], where);
    p.nodes.push_back(NodeChecker(node, p.values).check(rule->second, i));
  }

  defs.require(graph.loss, "the loss");
  const ValueInfo& loss = p.values[static_cast<size_t>(graph.loss)];
  if (!loss.shape.empty() || loss.dtype != MLPH_DTYPE_F32)
    fail(MLPH_INVALID_ARGUMENT,
         "reference backend: the loss '" + loss.name + "' must be a float32 scalar, got " + shape_of(loss));
  p.loss = graph.loss;
  for (size_t i = 0; i < graph.n_eval_outputs; ++i) {
    const int32_t v = graph.eval_outputs[i];
    defs.require(v, "eval output " + std::to_string(i));
    const MLPH_DType t = p.values[static_cast<size_t>(v)].dtype;
    if (t != MLPH_DTYPE_F32 && t != MLPH_DTYPE_I32)
      fail(MLPH_UNIMPLEMENTED,
           "reference backend: eval output '" + p.values[static_cast<size_t>(v)].name + "' must be float32 or int32");
    p.eval_outputs.push_back(v);
  }
  copy_optimizer(graph.optimizer, p);
  check_running_statistics(p);
  return p;
}

}  // namespace mlph::reference
