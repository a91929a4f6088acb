// compile_program: everything this backend checks about a graph, in one place, before it builds
// anything. The steps that follow trust the Program it returns (indices in range, shapes agreed).
#include <optional>
#include <string_view>

#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"
#include "model.hpp"

namespace mlp {
namespace {

using mlph::sdk::fail;

[[noreturn]] void unimplemented(const std::string& what) { fail(MLPH_UNIMPLEMENTED, kName + ": " + what); }
[[noreturn]] void invalid(const std::string& what) { fail(MLPH_INVALID_ARGUMENT, kName + ": " + what); }

std::optional<Op> op_named(std::string_view name) {
  if (name == "dense") return Op::dense;
  if (name == "relu") return Op::relu;
  if (name == "tanh") return Op::tanh;
  if (name == "scale") return Op::scale;
  if (name == "mse") return Op::mse;
  return std::nullopt;
}

class Checker {
 public:
  explicit Checker(const MLPH_Graph& g) : g_(g) {}

  Program run() {
    if (g_.struct_size < MLPH_STRUCT_SIZE(MLPH_Graph, seed)) invalid("MLPH_Graph is too small (an older ABI?)");
    optimizer();
    values();
    for (size_t i = 0; i < g_.n_nodes; ++i) node(g_.nodes[i]);
    for (size_t i = 0; i < g_.n_values; ++i)
      if (g_.values[i].dtype != MLPH_DTYPE_F32)
        unimplemented("value '" + p_.values[i].name + "': only float32 is implemented");
    for (size_t i = 0; i < g_.n_inputs; ++i) p_.inputs.push_back(index(g_.inputs[i], "graph input"));
    for (size_t i = 0; i < g_.n_eval_outputs; ++i)
      p_.eval_outputs.push_back(index(g_.eval_outputs[i], "eval output"));
    p_.loss = index(g_.loss, "the loss");
    if (!shape(p_.loss).empty()) invalid("the loss '" + p_.values[p_.loss].name + "' is not a scalar");
    // Checked: now the memory.
    for (Value& v : p_.values) {
      const auto n = static_cast<size_t>(mlph::sdk::numel(v.shape.data(), static_cast<int32_t>(v.shape.size())));
      v.data.resize(n), v.grad.resize(n);
    }
    params();
    return std::move(p_);
  }

 private:
  void optimizer() {
    const MLPH_Optimizer& opt = g_.optimizer;
    if (!opt.name || std::string_view(opt.name) != "sgd_keras")
      unimplemented(std::string("optimizer '") + (opt.name ? opt.name : "") + "' is not implemented (only sgd_keras)");
    for (size_t a = 0; a < opt.n_attrs; ++a)
      if (std::string_view(opt.attrs[a].key) != "momentum")
        unimplemented(std::string("optimizer sgd_keras: attribute '") + opt.attrs[a].key + "' is not implemented");
    p_.momentum = mlph::sdk::Attrs(opt.attrs, opt.n_attrs, "optimizer sgd_keras").number("momentum");
  }

  void values() {
    for (size_t i = 0; i < g_.n_values; ++i) {
      const MLPH_Value& v = g_.values[i];
      std::string name = v.name ? v.name : "#";
      if (!v.name) name += std::to_string(i);  // appended: GCC 12 warns falsely (-Wrestrict) on "#" + ...
      if (v.ndim < 0 || v.ndim > MLPH_MAX_DIMS) invalid("value '" + name + "': ndim " + std::to_string(v.ndim));
      for (int32_t d = 0; d < v.ndim; ++d)
        if (v.shape[d] < 1) invalid("value '" + name + "': shape " + mlph::sdk::shape_string(v.shape, v.ndim));
      p_.values.push_back({name, {v.shape, v.shape + v.ndim}, {}, {}});
    }
  }

  void node(const MLPH_Node& n) {
    const std::string where = std::string("node '") + (n.name ? n.name : "") + "' (" + (n.op ? n.op : "") + ")";
    const std::optional<Op> op = op_named(n.op ? n.op : "");
    if (!op) unimplemented(where + ": op not implemented (dense, relu, tanh, scale and mse are)");
    const std::string_view known_attr = *op == Op::scale ? "factor" : "";
    for (size_t a = 0; a < n.n_attrs; ++a)
      if (known_attr != n.attrs[a].key) unimplemented(where + ": attribute '" + n.attrs[a].key + "' is not implemented");
    if (n.n_outputs != 1) invalid(where + ": expected 1 output");
    Node node{*op, {}, index(n.outputs[0], where)};
    if (*op == Op::scale) node.factor = static_cast<float>(mlph::sdk::Attrs(n).number("factor"));
    for (size_t i = 0; i < n.n_inputs; ++i) node.inputs.push_back(index(n.inputs[i], where));
    shapes(where, node);
    p_.nodes.push_back(std::move(node));
  }

  // The shapes docs/ops.md gives each op: what the loops in ops.hpp rely on.
  void shapes(const std::string& where, const Node& n) {
    const auto in = [&](size_t i) -> const std::vector<int64_t>& { return shape(n.inputs[i]); };
    const std::vector<int64_t>& out = shape(n.output);
    bool ok = false;
    switch (n.op) {
      case Op::dense:
        ok = (n.inputs.size() == 2 || n.inputs.size() == 3) && in(0).size() == 2 && in(1).size() == 2 &&
             in(0)[1] == in(1)[0] && out == std::vector<int64_t>{in(0)[0], in(1)[1]} &&
             (n.inputs.size() == 2 || in(2) == std::vector<int64_t>{in(1)[1]});
        break;
      case Op::relu:
      case Op::tanh:
      case Op::scale:
        ok = n.inputs.size() == 1 && out == in(0);
        break;
      case Op::mse:
        ok = n.inputs.size() == 2 && in(0) == in(1) && out.empty();
        break;
    }
    if (!ok) {
      std::string got;
      for (size_t i = 0; i < n.inputs.size(); ++i) got += (i ? ", " : "") + shape_text(n.inputs[i]);
      invalid(where + ": inputs " + got + " and output " + shape_text(n.output) + " do not fit the op (docs/ops.md)");
    }
  }

  void params() {
    for (size_t i = 0; i < g_.n_params; ++i) {
      const MLPH_Parameter& param = g_.params[i];
      Value& v = p_.values[static_cast<size_t>(index(param.value, "parameter " + std::to_string(i)))];
      if (!param.init) invalid("parameter '" + v.name + "' has no initial contents");
      std::copy(param.init, param.init + v.size(), v.data.begin());
      v.parameter = true;
      const bool trainable = (param.flags & MLPH_PARAM_TRAINABLE) != 0;
      p_.params.push_back({param.value, param.l2, trainable, std::vector<float>(trainable ? v.data.size() : 0)});
    }
  }

  int32_t index(int32_t value, const std::string& who) const {
    if (value < 0 || static_cast<size_t>(value) >= g_.n_values)
      invalid(who + ": value index " + std::to_string(value) + " is not in the graph's " + std::to_string(g_.n_values));
    return value;
  }
  const std::vector<int64_t>& shape(int32_t value) const { return p_.values[static_cast<size_t>(value)].shape; }
  std::string shape_text(int32_t value) const {
    const std::vector<int64_t>& s = shape(value);
    return mlph::sdk::shape_string(s.data(), static_cast<int32_t>(s.size()));
  }

  const MLPH_Graph& g_;
  Program p_;
};

}  // namespace

Program compile_program(const MLPH_Graph& graph) { return Checker(graph).run(); }

}  // namespace mlp
