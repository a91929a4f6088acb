#include "compile.hpp"

#include <algorithm>
#include <cmath>
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
    if (node_.n_inputs < rule.min_inputs || node_.n_inputs > rule.max_inputs)
      invalid("expects " + std::to_string(rule.min_inputs) +
              (rule.max_inputs > rule.min_inputs ? " to " + std::to_string(rule.max_inputs) : "") + " inputs, got " +
              std::to_string(node_.n_inputs));
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
      default:
        expect_output(c, in(c, 0).shape, "input " + shape_of(in(c, 0)));
    }
    if (c.kind == OpKind::leaky_relu) c.attr = attrs_.number("alpha");
    if (c.kind == OpKind::scale) c.attr = attrs_.number("factor");
    if (c.kind == OpKind::dropout) {
      c.attr = attrs_.number("rate");
      if (!(c.attr >= 0.0 && c.attr < 1.0)) invalid("rate " + std::to_string(c.attr) + " is not in [0, 1)");
    }
    return c;
  }

 private:
  const ValueInfo& in(const CompiledNode& c, size_t i) const { return values_[static_cast<size_t>(c.inputs[i])]; }
  const ValueInfo& out(const CompiledNode& c) const { return values_[static_cast<size_t>(c.output)]; }

  void check_dtypes(const CompiledNode& c) const {
    if (out(c).dtype != MLPH_DTYPE_F32) unimplemented("output '" + out(c).name + "' must be float32");
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const MLPH_DType t = in(c, i).dtype;
      if (t != MLPH_DTYPE_F32 && !(c.kind == OpKind::log1p && t == MLPH_DTYPE_I16))
        unimplemented("input '" + in(c, i).name + "' must be float32" + (c.kind == OpKind::log1p ? " or int16" : ""));
    }
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
    p.params.push_back(
        {param.value, {param.init, param.init + v.numel()}, param.l2, (param.flags & MLPH_PARAM_TRAINABLE) != 0});
  }
}

void copy_optimizer(const MLPH_Optimizer& opt, Program& p) {
  const std::string name = opt.name ? opt.name : "";
  if (name != "sgd_keras") fail(MLPH_UNIMPLEMENTED, "reference backend: optimizer '" + name + "' is not implemented");
  for (size_t a = 0; a < opt.n_attrs; ++a)
    if (std::string(opt.attrs[a].key) != "momentum")
      fail(MLPH_UNIMPLEMENTED, std::string("reference backend: optimizer sgd_keras: attribute '") + opt.attrs[a].key +
                                   "' is not implemented");
  p.momentum = sdk::Attrs(opt.attrs, opt.n_attrs, "optimizer sgd_keras").number("momentum", 0.0);
  if (!(p.momentum >= 0.0)) fail(MLPH_INVALID_ARGUMENT, "reference backend: sgd_keras momentum must be >= 0");
}

}  // namespace

bool has_gradient(OpKind kind) { return kind != OpKind::log1p && kind != OpKind::abs_error_sum; }

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
    if (t != MLPH_DTYPE_F32 && t != MLPH_DTYPE_I16)
      fail(MLPH_UNIMPLEMENTED,
           "reference backend: graph input '" + p.values[static_cast<size_t>(v)].name + "' must be float32 or int16");
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
    if (p.values[static_cast<size_t>(v)].dtype != MLPH_DTYPE_F32)
      fail(MLPH_UNIMPLEMENTED,
           "reference backend: eval output '" + p.values[static_cast<size_t>(v)].name + "' must be float32");
    p.eval_outputs.push_back(v);
  }
  copy_optimizer(graph.optimizer, p);
  return p;
}

}  // namespace mlph::reference
