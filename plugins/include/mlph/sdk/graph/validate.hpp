// The one graph validator: every backend calls validate_graph at compile, so a graph breaking
// docs/ops.md (the catalogue in sdk/graph/op_schema.hpp) gets the same one-line error from every backend.
// It returns a self-contained, checked copy that backends consume instead of re-parsing the graph:
// typed attributes with their defaults filled in, convolution and pooling windows worked out, the
// optimizer's hyperparameters. A backend says only which ops and optimizers it implements.
//
//   const sdk::ValidGraph g = sdk::validate_graph(graph, sdk::Implements{my_ops, my_optimizers});
//
// Errors (sdk::Error, never naming the backend): MLPH_UNIMPLEMENTED for what the catalogue or the
// backend lacks (an op, attribute, optimizer, dtype or op-set), MLPH_INVALID_ARGUMENT for a graph
// that breaks the catalogue's rules (naming the node, value or parameter, and the shapes involved).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

// The spatial geometry of a conv, conv_transpose or max_pool node, one entry per spatial dim.
struct Window {
  std::vector<int64_t> in, out;  // spatial sizes of the input x and the output
  std::vector<int64_t> kernel, stride, dilation, pad_before, pad_after;
  std::vector<int64_t> output_padding;  // conv_transpose; zeros otherwise
  int64_t groups = 1;
};

// Numeric attributes (every one of the op's, defaults filled in) by name.
class AttrValues {
 public:
  void set(std::string key, std::vector<double> values) { values_[std::move(key)] = std::move(values); }
  const std::vector<double>& numbers(std::string_view key) const {
    const auto found = values_.find(key);
    if (found == values_.end()) fail(MLPH_INTERNAL, "no attribute '" + std::string(key) + "' in the validated graph");
    return found->second;
  }
  double number(std::string_view key) const { return numbers(key).at(0); }
  int64_t integer(std::string_view key) const { return static_cast<int64_t>(number(key)); }
  std::vector<int64_t> ints(std::string_view key) const {
    const std::vector<double>& v = numbers(key);
    return {v.begin(), v.end()};
  }

 private:
  std::map<std::string, std::vector<double>, std::less<>> values_;
};

struct ValidNode {
  const schema::Op* spec = nullptr;  // the catalogue entry
  std::string op, name;
  size_t index = 0;  // position in graph.nodes (dropout's random stream)
  std::vector<int32_t> inputs;
  int32_t output = -1;
  AttrValues attrs;
  Window window;  // conv, conv_transpose, max_pool

  bool gradient() const { return spec->gradient; }
  std::string where() const { return "node '" + name + "' (" + op + ")"; }
};

struct ValidParam {
  int32_t value = -1;
  const float* init = nullptr;  // borrowed from the caller's graph: copy it during compile
  double l2 = 0, weight_decay = 1;
  bool trainable = true;
};

struct ValidOptimizer {
  std::string name;
  AttrValues attrs;
};

struct ValidGraph {
  uint32_t opset = 1;
  std::vector<GraphValue> values;
  std::vector<ValidNode> nodes;  // topological order
  std::vector<ValidParam> params;
  std::vector<int32_t> inputs, eval_outputs;
  int32_t loss = -1;
  ValidOptimizer optimizer;
  uint64_t seed = 0;

  const GraphValue& value(int32_t v) const { return values[static_cast<size_t>(v)]; }
};

// Values a gradient flows into: computed (through ops that pass gradients) from a trainable
// parameter, and feeding the loss. Every backend's backward pass starts from this.
inline std::vector<bool> values_needing_gradients(const ValidGraph& g) {
  std::vector<bool> from_param(g.values.size(), false), to_loss(g.values.size(), false);
  for (const ValidParam& param : g.params) from_param[static_cast<size_t>(param.value)] = param.trainable;
  for (const ValidNode& node : g.nodes)
    for (int32_t in : node.inputs)
      if (node.gradient() && from_param[static_cast<size_t>(in)]) from_param[static_cast<size_t>(node.output)] = true;
  to_loss[static_cast<size_t>(g.loss)] = true;
  for (auto node = g.nodes.rbegin(); node != g.nodes.rend(); ++node)
    if (node->gradient() && to_loss[static_cast<size_t>(node->output)])
      for (int32_t in : node->inputs) to_loss[static_cast<size_t>(in)] = true;
  std::vector<bool> needed(g.values.size());
  for (size_t v = 0; v < needed.size(); ++v) needed[v] = from_param[v] && to_loss[v];
  return needed;
}

namespace detail {

// The op-set a graph is written against: a graph too short for the member predates ABI 1.3, op-set 1.
inline uint32_t graph_opset(const MLPH_Graph& graph) {
  return graph.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, opset) ? 1 : graph.opset;
}

inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// Parses and checks the attributes of one node or optimizer against its catalogue entry.
class AttributeReader {
 public:
  AttributeReader(const std::vector<schema::Attribute>& specs, uint32_t opset, std::string owner, std::string kind)
      : specs_(specs), opset_(opset), owner_(std::move(owner)), kind_(std::move(kind)) {}

  [[noreturn]] void invalid(const std::string& what) const { fail(MLPH_INVALID_ARGUMENT, owner_ + ": " + what); }

  // Known keys, given once, of the right type, with integer values in range; required ones present.
  void read(const MLPH_Attr* attrs, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const MLPH_Attr& a = attrs[i];
      if (!a.key) invalid("attribute " + std::to_string(i) + " has no key");
      const schema::Attribute* spec = find(a.key);
      if (!spec) {
        std::vector<std::string> known;
        for (const schema::Attribute& s : specs_)
          if (s.since <= opset_) known.push_back(s.name);
        fail(MLPH_UNIMPLEMENTED, owner_ + ": attribute '" + a.key + "' is not in op-set " + std::to_string(opset_) +
                                     " (" + kind_ + " takes " + join_names(known) + ")");
      }
      if (given_.count(a.key)) invalid("attribute '" + std::string(a.key) + "' is given twice");
      given_[a.key] = check_values(*spec, a);
    }
    for (const schema::Attribute& s : specs_)
      if (s.since <= opset_ && s.absent.kind == schema::Default::Kind::required && !given_.count(s.name))
        invalid("missing required attribute '" + std::string(s.name) + "'");
  }

  // The values of every attribute, counted against the node's shapes, defaults filled in.
  // `count_of(Count)` is how many values that count rule means here.
  template <class CountOf>
  AttrValues resolve(const CountOf& count_of, const std::vector<int64_t>& output_shape) const {
    AttrValues out;
    for (const schema::Attribute& s : specs_) {
      if (s.since > opset_) continue;
      const size_t count = count_of(s.count);
      std::vector<double> values;
      if (const auto given = given_.find(s.name); given != given_.end()) {
        values = given->second;
        const bool twice = s.count == schema::Count::spatial_or_twice && values.size() == 2 * count;
        if (values.size() != count && !twice) invalid(count_text(s, count, values.size()));
      } else if (s.absent.kind == schema::Default::Kind::value) {
        values.assign(count, s.absent.value);
      } else if (s.absent.kind == schema::Default::Kind::attribute) {
        values = out.numbers(s.absent.attribute);  // an earlier attribute of the entry
      } else {  // output_shape
        values.assign(output_shape.begin(), output_shape.end());
      }
      out.set(s.name, std::move(values));
    }
    return out;
  }

 private:
  const schema::Attribute* find(std::string_view key) const {
    for (const schema::Attribute& s : specs_)
      if (key == s.name && s.since <= opset_) return &s;
    return nullptr;
  }

  std::vector<double> check_values(const schema::Attribute& s, const MLPH_Attr& a) const {
    const std::string name = "attribute '" + std::string(s.name) + "'";
    if (!a.values && a.text) invalid(name + " must be numeric, got text");
    if (!a.values && a.n_values) invalid(name + " holds " + std::to_string(a.n_values) + " values at a null pointer");
    const bool scalar = s.count == schema::Count::one;
    if (scalar && a.n_values != 1)
      invalid(name + " must be a single " + (s.type == schema::AttrType::integer ? "integer" : "number") + ", got " +
              std::to_string(a.n_values) + " values");
    const bool integers = s.type == schema::AttrType::integer || s.type == schema::AttrType::integers;
    for (size_t i = 0; i < a.n_values; ++i) {
      const double v = a.values[i];
      const std::string entry = scalar ? name + " must be " : name + " entries must be ";
      if (integers && (v != std::floor(v) || std::fabs(v) > 9007199254740992.0))  // exact in a double: 2^53
        invalid(entry + (scalar ? "an integer" : "integers") + ", got " + schema::number_text(v));
      if (!s.range.contains(v)) invalid(entry + s.range.text() + ", got " + schema::number_text(v));
    }
    return {a.values, a.values + a.n_values};
  }

  static std::string count_text(const schema::Attribute& s, size_t count, size_t got) {
    static const char* const rules[] = {"", "one per spatial dim", "one or two per spatial dim",
                                        "one per output dim", "one per channel"};
    std::string expected = std::to_string(count);
    if (s.count == schema::Count::spatial_or_twice) expected += " or " + std::to_string(2 * count);
    return "attribute '" + std::string(s.name) + "' needs " + expected + " values (" +
           rules[static_cast<int>(s.count)] + "), got " + std::to_string(got);
  }

  const std::vector<schema::Attribute>& specs_;
  uint32_t opset_;
  std::string owner_, kind_;
  std::map<std::string, std::vector<double>, std::less<>> given_;
};

// Checks a whole graph in order: values, graph inputs, parameters, nodes, loss, eval outputs, optimizer.
class GraphValidator {
 public:
  GraphValidator(const MLPH_Graph& graph, const Implements& backend) : g_(graph), backend_(backend) {}

  ValidGraph run() {
    if (g_.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, seed))
      fail(MLPH_INVALID_ARGUMENT, "graph: MLPH_Graph is too small (an older ABI?)");
    check_opset();
    check_arrays();
    out_.seed = g_.seed;
    copy_values();
    defined_.assign(out_.values.size(), false);
    check_inputs();
    check_params();
    for (size_t i = 0; i < g_.n_nodes; ++i) out_.nodes.push_back(check_node(i));
    check_outputs();
    check_optimizer();
    return std::move(out_);
  }

 private:
  using Kind = schema::ShapeRule;

  void check_opset() {
    out_.opset = graph_opset(g_);
    if (out_.opset == 0)
      fail(MLPH_INVALID_ARGUMENT,
           "graph: op-set 0 does not exist (set MLPH_Graph.opset to MLPH_OPSET, as sdk::GraphBuilder does)");
    if (out_.opset > MLPH_OPSET)
      fail(MLPH_UNIMPLEMENTED, "graph: op-set " + std::to_string(out_.opset) + " is newer than this backend's SDK (op-set " +
                                   std::to_string(MLPH_OPSET) + "); rebuild the backend against a newer SDK");
  }

  void check_arrays() const {
    const std::pair<const char*, std::pair<const void*, size_t>> arrays[] = {
        {"values", {g_.values, g_.n_values}},          {"nodes", {g_.nodes, g_.n_nodes}},
        {"params", {g_.params, g_.n_params}},          {"inputs", {g_.inputs, g_.n_inputs}},
        {"eval_outputs", {g_.eval_outputs, g_.n_eval_outputs}}, {"optimizer.attrs", {g_.optimizer.attrs, g_.optimizer.n_attrs}}};
    for (const auto& [name, array] : arrays)
      if (!array.first && array.second)
        fail(MLPH_INVALID_ARGUMENT, "graph: " + std::string(name) + " is null but holds " + std::to_string(array.second) +
                                        (array.second == 1 ? " entry" : " entries"));
  }

  void copy_values() {
    for (size_t i = 0; i < g_.n_values; ++i) {
      const MLPH_Value& v = g_.values[i];
      std::string name = v.name ? v.name : "value ";
      if (!v.name) name += std::to_string(i);  // appended: GCC 12 warns falsely (-Wrestrict) on "..." + string
      if (v.ndim < 0 || v.ndim > MLPH_MAX_DIMS || std::any_of(v.shape, v.shape + v.ndim, [](int64_t d) { return d < 1; }))
        fail(MLPH_INVALID_ARGUMENT, "graph: value '" + name + "' has an invalid shape (ndim " + std::to_string(v.ndim) +
                                        ", every dim >= 1)");
      out_.values.push_back({std::move(name), v.dtype, {v.shape, v.shape + v.ndim}});
    }
  }

  const GraphValue& value(int32_t v) const { return out_.values[static_cast<size_t>(v)]; }

  void check_index(int32_t v, const std::string& where) const {
    if (v < 0 || static_cast<size_t>(v) >= out_.values.size())
      fail(MLPH_INVALID_ARGUMENT, where + ": value index " + std::to_string(v) + " is out of range (the graph has " +
                                      std::to_string(out_.values.size()) + " values)");
  }
  void define(int32_t v, const std::string& where) {
    check_index(v, where);
    if (defined_[static_cast<size_t>(v)])
      fail(MLPH_INVALID_ARGUMENT, where + ": defines value '" + value(v).name + "', which is already defined");
    defined_[static_cast<size_t>(v)] = true;
  }
  void require(int32_t v, const std::string& where) const {
    check_index(v, where);
    if (!defined_[static_cast<size_t>(v)])
      fail(MLPH_INVALID_ARGUMENT, where + ": uses value '" + value(v).name +
                                      "' before it is defined (nodes must be in topological order)");
  }

  void check_inputs() {
    for (size_t i = 0; i < g_.n_inputs; ++i) {
      const int32_t v = g_.inputs[i];
      const std::string where = "graph: input " + std::to_string(i);
      define(v, where);
      if (!(schema::dtype_bit(value(v).dtype) & (schema::kF32 | schema::kI16 | schema::kI32)))
        fail(MLPH_UNIMPLEMENTED, where + " '" + value(v).name + "' is " + schema::dtype_name(value(v).dtype) +
                                     ", expected float32, int16 or int32");
      out_.inputs.push_back(v);
    }
  }

  void check_params() {
    for (size_t i = 0; i < g_.n_params; ++i) {
      const MLPH_Parameter& p = g_.params[i];
      define(p.value, "graph: parameter " + std::to_string(i));
      const std::string where = "graph: parameter '" + value(p.value).name + "'";
      if (value(p.value).dtype != MLPH_DTYPE_F32 || !p.init)
        fail(MLPH_INVALID_ARGUMENT, where + " must be float32 with initial contents");
      if (!(p.l2 >= 0.0)) fail(MLPH_INVALID_ARGUMENT, where + ": l2 must be >= 0, got " + schema::number_text(p.l2));
      if (!(p.weight_decay >= 0.0))
        fail(MLPH_INVALID_ARGUMENT,
             where + ": weight_decay must be >= 0, got " + schema::number_text(p.weight_decay));
      out_.params.push_back({p.value, p.init, p.l2, p.weight_decay, (p.flags & MLPH_PARAM_TRAINABLE) != 0});
    }
  }

  const ValidParam* param_of(int32_t v) const {
    for (const ValidParam& p : out_.params)
      if (p.value == v) return &p;
    return nullptr;
  }

  ValidNode check_node(size_t index) {
    const MLPH_Node& node = g_.nodes[index];
    if (!node.op || !node.name || (node.n_inputs && !node.inputs) || (node.n_outputs && !node.outputs) ||
        (node.n_attrs && !node.attrs))
      fail(MLPH_INVALID_ARGUMENT, "graph: node " + std::to_string(index) + " is incomplete (null op, name or array)");
    ValidNode n;
    n.op = node.op, n.name = node.name, n.index = index;
    const std::string where = n.where();
    n.spec = schema::find_op(n.op);
    if (!n.spec || n.spec->since > out_.opset)
      fail(MLPH_UNIMPLEMENTED, where + ": op '" + n.op + "' is not in op-set " + std::to_string(out_.opset) +
                                   " (docs/ops.md)");
    if (!backend_.op(n.op)) fail(MLPH_UNIMPLEMENTED, where + ": this backend does not implement op '" + n.op + "'");
    if (node.n_outputs != 1)
      fail(MLPH_INVALID_ARGUMENT, where + ": expects exactly one output, got " + std::to_string(node.n_outputs));
    check_arity(*n.spec, node.n_inputs, where);
    n.inputs.assign(node.inputs, node.inputs + node.n_inputs);
    for (int32_t v : n.inputs) require(v, where);
    n.output = node.outputs[0];
    define(n.output, where);
    AttributeReader attrs(n.spec->attrs, out_.opset, where, n.op);
    attrs.read(node.attrs, node.n_attrs);
    check_types(n, where);
    NodeShapes(*this, n, attrs).check();
    return n;
  }

  static std::string inputs_text(const schema::Op& op) {
    std::string out;
    for (const schema::Input& in : op.inputs)
      out += (out.empty() ? "" : ", ") +
             std::string(in.arity == schema::Arity::optional ? "optional " : "") + in.name +
             (in.arity == schema::Arity::variadic ? "..." : "");
    return out;
  }

  static void check_arity(const schema::Op& op, size_t got, const std::string& where) {
    size_t least = 0, most = 0;
    bool unbounded = false;
    for (const schema::Input& in : op.inputs) {
      if (in.arity != schema::Arity::optional) ++least;
      ++most;
      unbounded = unbounded || in.arity == schema::Arity::variadic;
    }
    if (got >= least && (unbounded || got <= most)) return;
    std::string expected = std::to_string(least);
    if (unbounded) expected += " or more";
    else if (most > least) expected += " to " + std::to_string(most);
    fail(MLPH_INVALID_ARGUMENT, where + ": expects " + expected + " inputs (" + inputs_text(op) + "), got " +
                                    std::to_string(got));
  }

  static const schema::Input& input_spec(const schema::Op& op, size_t i) {
    return op.inputs[std::min(i, op.inputs.size() - 1)];  // the last one repeats (variadic)
  }

  // Inputs of the dtypes the catalogue names, float32 outputs, state inputs that are state.
  void check_types(const ValidNode& n, const std::string& where) const {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const schema::Input& spec = input_spec(*n.spec, i);
      const GraphValue& v = value(n.inputs[i]);
      if (!(schema::dtype_bit(v.dtype) & spec.dtypes))
        fail(MLPH_UNIMPLEMENTED, where + ": input " + spec.name + " '" + v.name + "' is " + schema::dtype_name(v.dtype) +
                                     ", expected " + schema::dtypes_text(spec.dtypes));
      const ValidParam* p = param_of(n.inputs[i]);
      if (spec.state && (!p || p->trainable))
        fail(MLPH_INVALID_ARGUMENT, where + ": input " + spec.name + " '" + v.name +
                                        "' must be a parameter without MLPH_PARAM_TRAINABLE (state the op updates)");
    }
    const GraphValue& y = value(n.output);
    if (y.dtype != MLPH_DTYPE_F32)
      fail(MLPH_UNIMPLEMENTED, where + ": output '" + y.name + "' is " + schema::dtype_name(y.dtype) + ", expected float32");
  }

  // The shape rule of one node: input ranks first, then the attributes counted against them, then
  // the shapes they imply.
  class NodeShapes {
   public:
    NodeShapes(const GraphValidator& v, ValidNode& n, const AttributeReader& attrs)
        : v_(v), n_(n), attrs_(attrs), where_(n.where()) {}

    void check() {
      check_ranks();
      const GraphValue& x = in(0);
      const size_t spatial = x.shape.size() >= 2 ? x.shape.size() - 2 : 0;
      n_.attrs = attrs_.resolve(
          [&](schema::Count c) -> size_t {
            switch (c) {
              case schema::Count::spatial:
              case schema::Count::spatial_or_twice: return spatial;
              case schema::Count::output_rank: return out().shape.size();
              case schema::Count::channels: return x.shape.empty() ? 1 : static_cast<size_t>(x.shape.back());
              case schema::Count::one: break;
            }
            return 1;
          },
          out().shape);
      check_shapes();
    }

   private:
    const GraphValue& in(size_t i) const { return v_.value(n_.inputs[i]); }
    const GraphValue& out() const { return v_.value(n_.output); }
    [[noreturn]] void invalid(const std::string& what) const { fail(MLPH_INVALID_ARGUMENT, where_ + ": " + what); }
    static std::string text(const GraphValue& v) { return "'" + v.name + "' " + shape_string(v.shape); }

    void check_ranks() const {
      const GraphValue& x = in(0);
      switch (n_.spec->shape) {
        case Kind::conv:
        case Kind::conv_transpose:
        case Kind::pool:
        case Kind::halo:
        case Kind::gather:
          if (x.shape.size() != 4 && x.shape.size() != 5)
            invalid("input " + text(x) + " must be [N, spatial..., C] with 2 or 3 spatial dims");
          break;
        case Kind::global_pool:
          if (x.shape.size() < 3) invalid("input " + text(x) + " must be [N, spatial..., C]");
          break;
        case Kind::per_channel:
        case Kind::batch_norm:
        case Kind::concat:
          if (x.shape.size() < 2) invalid("input " + text(x) + " must be [N, ..., C]");
          break;
        case Kind::segmentation_loss:
        case Kind::segmentation_metric: {
          const GraphValue& labels = in(1);
          if (x.shape.size() < 2 || labels.shape != std::vector<int64_t>(x.shape.begin(), x.shape.end() - 1))
            invalid("logits " + shape_string(x.shape) + " and labels " + shape_string(labels.shape) +
                    " must be [N, S..., C] and [N, S...]");
          break;
        }
        default: break;
      }
    }

    // The declared output must be `expected`, which follows from `from` (a description of the inputs).
    void expect_output(const std::vector<int64_t>& expected, const std::string& from) const {
      if (out().shape != expected)
        invalid(from + " gives output " + shape_string(expected) + ", but '" + out().name + "' is declared " +
                shape_string(out().shape));
    }
    void expect_vector(size_t i, int64_t size, const std::string& what) const {
      if (in(i).shape != std::vector<int64_t>{size})
        invalid("input " + text(in(i)) + " must be [" + std::to_string(size) + "], " + what);
    }
    void expect_bias(int64_t channels) const {
      if (n_.inputs.size() > 2) expect_vector(2, channels, "one per output channel");
    }

    void check_shapes() {
      const GraphValue& x = in(0);
      switch (n_.spec->shape) {
        case Kind::elementwise:
          for (size_t i = 1; i < n_.inputs.size(); ++i)
            if (in(i).shape != x.shape)
              invalid("inputs " + shape_string(x.shape) + " and " + shape_string(in(i).shape) + " differ in shape");
          return expect_output(x.shape, "input " + shape_string(x.shape));
        case Kind::loss:
          if (in(1).shape != x.shape)
            invalid("prediction " + shape_string(x.shape) + " and target " + shape_string(in(1).shape) +
                    " differ in shape");
          return expect_output({}, "prediction " + shape_string(x.shape));
        case Kind::conv: return check_conv();
        case Kind::conv_transpose: return check_conv_transpose();
        case Kind::pool: return check_pool();
        case Kind::dense: return check_dense();
        case Kind::reshape:
          if (x.numel() != out().numel())
            invalid("cannot reshape input " + shape_string(x.shape) + " to output " + shape_string(out().shape));
          return check_shape_attribute();
        case Kind::batch_norm:
          if (x.numel() / x.shape.back() * n_.attrs.integer("group_size") < 2)
            invalid("training needs more than 1 value per channel, input is " + shape_string(x.shape));
          [[fallthrough]];
        case Kind::per_channel:
          for (size_t i = 1; i < n_.inputs.size(); ++i)
            expect_vector(i, x.shape.back(), "one per channel of " + shape_string(x.shape));
          return expect_output(x.shape, "input " + shape_string(x.shape));
        case Kind::concat: return check_concat();
        case Kind::global_pool: {
          std::vector<int64_t> shape(x.shape.size(), 1);
          shape.front() = x.shape.front(), shape.back() = x.shape.back();
          return expect_output(shape, "input " + shape_string(x.shape));
        }
        case Kind::broadcast: return check_broadcast();
        case Kind::segmentation_loss: return expect_output({}, "logits " + shape_string(x.shape));
        case Kind::segmentation_metric: return expect_output({x.shape.front()}, "logits " + shape_string(x.shape));
        case Kind::halo: return check_halo();
        case Kind::gather: return check_gather();
      }
    }

    // A block with its halos; a split dim's block must be at least as wide as its halo (comms.h).
    void check_halo() const {
      const GraphValue& x = in(0);
      const size_t spatial = x.shape.size() - 2;
      const std::vector<int64_t> grid = n_.attrs.ints("grid"), halo = n_.attrs.ints("halo");
      const bool both = halo.size() == 2 * spatial;
      std::vector<int64_t> shape = x.shape;
      for (size_t d = 0; d < spatial; ++d) {
        const int64_t before = halo[d], after = both ? halo[spatial + d] : halo[d];
        if (grid[d] > 1 && x.shape[d + 1] < std::max(before, after))
          invalid("input " + shape_string(x.shape) + ": the block along spatial dim " + std::to_string(d) + " (" +
                  std::to_string(x.shape[d + 1]) + ") is narrower than its halo (" +
                  std::to_string(std::max(before, after)) + ") over " + std::to_string(grid[d]) + " ranks");
        shape[d + 1] += before + after;
      }
      expect_output(shape, "input " + shape_string(x.shape) + " with halo " + shape_string(halo));
    }

    void check_gather() const {
      const GraphValue& x = in(0);
      const std::vector<int64_t> grid = n_.attrs.ints("grid");
      std::vector<int64_t> shape = x.shape;
      for (size_t d = 0; d < grid.size(); ++d) shape[d + 1] *= grid[d];
      expect_output(shape, "input " + shape_string(x.shape) + " over grid " + shape_string(grid));
    }

    void check_shape_attribute() const {
      if (n_.attrs.ints("shape") != out().shape)
        invalid("attribute 'shape' " + shape_string(n_.attrs.ints("shape")) + " disagrees with output " + text(out()));
    }

    // Stride, dilation and padding (befores, then afters) into the window; the input's spatial sizes.
    void fill_window(Window& w, const std::vector<int64_t>& kernel) const {
      const GraphValue& x = in(0);
      const size_t spatial = x.shape.size() - 2;
      w.in.assign(x.shape.begin() + 1, x.shape.end() - 1);
      w.kernel = kernel;
      w.stride = n_.attrs.ints("stride");
      w.dilation = n_.spec->shape == Kind::pool ? std::vector<int64_t>(spatial, 1) : n_.attrs.ints("dilation");
      const std::vector<int64_t> padding =
          n_.spec->shape == Kind::pool ? std::vector<int64_t>(spatial, 0) : n_.attrs.ints("padding");
      w.pad_before.assign(padding.begin(), padding.begin() + static_cast<long>(spatial));
      w.pad_after.assign(padding.end() - static_cast<long>(spatial), padding.end());
      w.output_padding = n_.spec->shape == Kind::conv_transpose ? n_.attrs.ints("output_padding")
                                                                : std::vector<int64_t>(spatial, 0);
    }

    void check_conv() {
      const GraphValue &x = in(0), &w = in(1);
      const size_t spatial = x.shape.size() - 2;
      const int64_t groups = n_.attrs.integer("groups"), ci = x.shape.back();
      if (w.shape.size() != x.shape.size())
        invalid("weights " + text(w) + " must be [kernel..., Ci/groups, Co] for input " + shape_string(x.shape));
      const int64_t co = w.shape.back();
      if (ci % groups || co % groups || w.shape[spatial] != ci / groups)
        invalid("weights " + shape_string(w.shape) + " do not fit input " + shape_string(x.shape) + " in " +
                std::to_string(groups) + " groups (expected [kernel..., " + std::to_string(ci / groups) +
                ", Co], Co divisible by groups)");
      Window& g = n_.window;
      fill_window(g, {w.shape.begin(), w.shape.begin() + static_cast<long>(spatial)});
      g.groups = groups;
      std::vector<int64_t> shape{x.shape.front()};
      for (size_t d = 0; d < spatial; ++d) {
        const int64_t span = g.in[d] + g.pad_before[d] + g.pad_after[d] - g.dilation[d] * (g.kernel[d] - 1) - 1;
        if (span < 0)
          invalid("input " + shape_string(x.shape) + " with weights " + shape_string(w.shape) +
                  ": the window along spatial dim " + std::to_string(d) + " is larger than the padded input");
        shape.push_back(g.out.emplace_back(span / g.stride[d] + 1));
      }
      shape.push_back(co);
      expect_bias(co);
      expect_output(shape, "input " + shape_string(x.shape) + " with weights " + shape_string(w.shape));
    }

    void check_conv_transpose() {
      const GraphValue &x = in(0), &w = in(1);
      const size_t spatial = x.shape.size() - 2;
      if (w.shape.size() != x.shape.size() || w.shape.back() != x.shape.back())
        invalid("weights " + text(w) + " must be [kernel..., Co, " + std::to_string(x.shape.back()) +
                "] for input " + shape_string(x.shape));
      const int64_t co = w.shape[spatial];
      Window& g = n_.window;
      fill_window(g, {w.shape.begin(), w.shape.begin() + static_cast<long>(spatial)});
      std::vector<int64_t> shape{x.shape.front()};
      for (size_t d = 0; d < spatial; ++d) {
        const int64_t o = (g.in[d] - 1) * g.stride[d] - g.pad_before[d] - g.pad_after[d] +
                          g.dilation[d] * (g.kernel[d] - 1) + g.output_padding[d] + 1;
        if (o < 1)
          invalid("input " + shape_string(x.shape) + " with weights " + shape_string(w.shape) +
                  ": the output along spatial dim " + std::to_string(d) + " would be empty");
        shape.push_back(g.out.emplace_back(o));
      }
      shape.push_back(co);
      expect_bias(co);
      expect_output(shape, "input " + shape_string(x.shape) + " with weights " + shape_string(w.shape));
    }

    void check_pool() {
      const GraphValue& x = in(0);
      Window& g = n_.window;
      fill_window(g, n_.attrs.ints("kernel"));
      std::vector<int64_t> shape{x.shape.front()};
      for (size_t d = 0; d < g.in.size(); ++d) {
        if (g.in[d] < g.kernel[d])
          invalid("input " + shape_string(x.shape) + ": the window along spatial dim " + std::to_string(d) +
                  " (kernel " + std::to_string(g.kernel[d]) + ") is larger than the input");
        shape.push_back(g.out.emplace_back((g.in[d] - g.kernel[d]) / g.stride[d] + 1));
      }
      shape.push_back(x.shape.back());
      expect_output(shape, "input " + shape_string(x.shape));
    }

    void check_dense() {
      const GraphValue &x = in(0), &w = in(1);
      if (x.shape.size() != 2 || w.shape.size() != 2 || w.shape[0] != x.shape[1])
        invalid("input " + shape_string(x.shape) + " and weights " + shape_string(w.shape) +
                " must be [N, in] and [in, out]");
      expect_bias(w.shape[1]);
      expect_output({x.shape[0], w.shape[1]}, "input " + shape_string(x.shape) + " with weights " + shape_string(w.shape));
    }

    void check_concat() {
      const GraphValue& first = in(0);
      std::vector<int64_t> shape = first.shape;
      shape.back() = 0;
      for (size_t i = 0; i < n_.inputs.size(); ++i) {
        const GraphValue& x = in(i);
        if (x.shape.size() != shape.size() || !std::equal(shape.begin(), shape.end() - 1, x.shape.begin()))
          invalid("input " + text(x) + " differs from " + shape_string(first.shape) + " in more than the channels");
        shape.back() += x.shape.back();
      }
      expect_output(shape, "concatenating the inputs");
    }

    void check_broadcast() const {
      check_shape_attribute();
      const std::vector<int64_t> &x = in(0).shape, &y = out().shape;
      bool fits = x.size() == y.size() && x.size() >= 2 && x.front() == y.front() && x.back() == y.back();
      for (size_t d = 1; fits && d + 1 < x.size(); ++d) fits = x[d] == 1 || x[d] == y[d];
      if (!fits)
        invalid("input " + shape_string(x) + " cannot be broadcast to " + shape_string(y) +
                " (only size-1 spatial dims are repeated)");
    }

    const GraphValidator& v_;
    ValidNode& n_;
    const AttributeReader& attrs_;
    std::string where_;
  };

  void check_outputs() {
    require(g_.loss, "graph: the loss");
    const GraphValue& loss = value(g_.loss);
    if (!loss.shape.empty() || loss.dtype != MLPH_DTYPE_F32)
      fail(MLPH_INVALID_ARGUMENT, "graph: the loss '" + loss.name + "' must be a float32 scalar, got " +
                                      schema::dtype_name(loss.dtype) + " " + shape_string(loss.shape));
    out_.loss = g_.loss;
    for (size_t i = 0; i < g_.n_eval_outputs; ++i) {
      const int32_t v = g_.eval_outputs[i];
      const std::string where = "graph: eval output " + std::to_string(i);
      require(v, where);
      if (value(v).dtype != MLPH_DTYPE_F32 && value(v).dtype != MLPH_DTYPE_I32)
        fail(MLPH_UNIMPLEMENTED, where + " '" + value(v).name + "' is " + schema::dtype_name(value(v).dtype) +
                                     ", expected float32 or int32");
      out_.eval_outputs.push_back(v);
    }
  }

  void check_optimizer() {
    const MLPH_Optimizer& opt = g_.optimizer;
    const std::string name = opt.name ? opt.name : "";
    const std::string where = "optimizer '" + name + "'";
    const schema::Optimizer* spec = schema::find_optimizer(name);
    if (!spec || spec->since > out_.opset) {
      std::vector<std::string> known;
      for (const schema::Optimizer& o : schema::optimizers())
        if (o.since <= out_.opset) known.push_back(o.name);
      fail(MLPH_UNIMPLEMENTED, where + " is not in op-set " + std::to_string(out_.opset) + " (docs/ops.md: " +
                                   join_names(known) + ")");
    }
    if (!backend_.optimizer(name)) fail(MLPH_UNIMPLEMENTED, where + ": this backend does not implement it");
    AttributeReader attrs(spec->attrs, out_.opset, where, name);
    attrs.read(opt.attrs, opt.n_attrs);
    out_.optimizer.name = name;
    out_.optimizer.attrs = attrs.resolve([](schema::Count) -> size_t { return 1; }, {});
  }

  const MLPH_Graph& g_;
  const Implements& backend_;
  ValidGraph out_;
  std::vector<bool> defined_;
};

}  // namespace detail

// Checks `graph` against the catalogue of its op-set and what `backend` implements; throws sdk::Error
// with one line naming what is wrong, the same for every backend.
inline ValidGraph validate_graph(const MLPH_Graph& graph, const Implements& backend) {
  return detail::GraphValidator(graph, backend).run();
}

}  // namespace mlph::sdk
