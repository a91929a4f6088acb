// Reading an MLPH_Graph (backends) and building one (workloads) in C++.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "mlph/graph.h"
#include "mlph/sdk/graph/op_schema.hpp"
#include "mlph/sdk/util/error.hpp"

namespace mlph::sdk {

// ---- reading -----------------------------------------------------------------------------

inline const MLPH_Attr* find_attr(const MLPH_Attr* attrs, size_t n, std::string_view key) {
  for (size_t i = 0; i < n; ++i)
    if (key == attrs[i].key) return &attrs[i];
  return nullptr;
}

// Typed attribute access for one node (or optimizer); missing required attributes throw,
// naming the node and key.
class Attrs {
 public:
  Attrs(const MLPH_Attr* attrs, size_t n, std::string owner) : attrs_(attrs), n_(n), owner_(std::move(owner)) {}
  Attrs(const MLPH_Node& node) : Attrs(node.attrs, node.n_attrs, std::string(node.op) + " '" + node.name + "'") {}

  bool has(std::string_view key) const { return find_attr(attrs_, n_, key) != nullptr; }
  std::vector<double> numbers(std::string_view key) const {
    const MLPH_Attr* a = require(key);
    if (!a->values) fail(MLPH_INVALID_ARGUMENT, owner_ + ": attribute '" + std::string(key) + "' is not numeric");
    return {a->values, a->values + a->n_values};
  }
  std::vector<int64_t> ints(std::string_view key) const {
    std::vector<int64_t> out;
    for (double v : numbers(key)) out.push_back(static_cast<int64_t>(v));
    return out;
  }
  double number(std::string_view key) const {
    auto v = numbers(key);
    if (v.size() != 1) fail(MLPH_INVALID_ARGUMENT, owner_ + ": attribute '" + std::string(key) + "' must be a scalar");
    return v[0];
  }
  double number(std::string_view key, double fallback) const { return has(key) ? number(key) : fallback; }
  std::string text(std::string_view key) const {
    const MLPH_Attr* a = require(key);
    if (!a->text) fail(MLPH_INVALID_ARGUMENT, owner_ + ": attribute '" + std::string(key) + "' is not text");
    return a->text;
  }

 private:
  const MLPH_Attr* require(std::string_view key) const {
    const MLPH_Attr* a = find_attr(attrs_, n_, key);
    if (!a) fail(MLPH_INVALID_ARGUMENT, owner_ + ": missing attribute '" + std::string(key) + "'");
    return a;
  }
  const MLPH_Attr* attrs_;
  size_t n_;
  std::string owner_;
};

// ---- building ----------------------------------------------------------------------------

struct AttrInit {
  std::string key;
  std::vector<double> values;
  std::string text;
  bool is_text = false;
  AttrInit(std::string k, double v) : key(std::move(k)), values{v} {}
  AttrInit(std::string k, std::vector<double> v) : key(std::move(k)), values(std::move(v)) {}
  AttrInit(std::string k, std::initializer_list<double> v) : key(std::move(k)), values(v) {}
  AttrInit(std::string k, const char* t) : key(std::move(k)), text(t), is_text(true) {}
};

// Owns every array an MLPH_Graph points to; `graph()` is valid until the builder changes or dies.
class GraphBuilder {
 public:
  int32_t value(const std::string& name, MLPH_DType dtype, std::vector<int64_t> shape) {
    MLPH_Value v{};
    v.name = keep(name);
    v.dtype = dtype;
    v.ndim = static_cast<int32_t>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
    values_.push_back(v);
    return static_cast<int32_t>(values_.size() - 1);
  }
  const MLPH_Value& value_info(int32_t id) const { return values_.at(static_cast<size_t>(id)); }

  // Adds a node; returns its first output.
  int32_t node(const std::string& op, const std::string& name, std::vector<int32_t> inputs,
               std::vector<int32_t> outputs, std::vector<AttrInit> attrs = {}) {
    NodeStore& s = nodes_.emplace_back();
    s.op = op;
    s.name = name;
    s.inputs = std::move(inputs);
    s.outputs = std::move(outputs);
    s.attr_src = std::move(attrs);
    return s.outputs.empty() ? -1 : s.outputs[0];
  }

  void parameter(int32_t value, std::vector<float> init, double l2 = 0.0, double weight_decay = 1.0,
                 uint32_t flags = MLPH_PARAM_TRAINABLE) {
    param_init_.push_back(std::move(init));
    params_.push_back({value, nullptr, l2, weight_decay, flags});
  }
  void inputs(std::vector<int32_t> ids) { inputs_ = std::move(ids); }
  void loss(int32_t id) { loss_ = id; }
  void eval_outputs(std::vector<int32_t> ids) { eval_outputs_ = std::move(ids); }
  void optimizer(const std::string& name, std::vector<AttrInit> attrs) {
    opt_name_ = name;
    opt_attr_src_ = std::move(attrs);
  }
  void seed(uint64_t s) { seed_ = s; }

  const MLPH_Graph* graph() {
    node_structs_.clear();
    for (NodeStore& s : nodes_) {
      s.attrs = to_attrs(s.attr_src);
      node_structs_.push_back({s.op.c_str(), s.name.c_str(), s.inputs.data(), s.inputs.size(), s.outputs.data(),
                               s.outputs.size(), s.attrs.data(), s.attrs.size()});
    }
    for (size_t i = 0; i < params_.size(); ++i) params_[i].init = param_init_[i].data();
    opt_attrs_ = to_attrs(opt_attr_src_);
    graph_ = MLPH_Graph{};
    graph_.struct_size = sizeof(MLPH_Graph);
    graph_.values = values_.data();
    graph_.n_values = values_.size();
    graph_.nodes = node_structs_.data();
    graph_.n_nodes = node_structs_.size();
    graph_.params = params_.data();
    graph_.n_params = params_.size();
    graph_.inputs = inputs_.data();
    graph_.n_inputs = inputs_.size();
    graph_.loss = loss_;
    graph_.eval_outputs = eval_outputs_.data();
    graph_.n_eval_outputs = eval_outputs_.size();
    graph_.optimizer = {opt_name_.c_str(), opt_attrs_.data(), opt_attrs_.size()};
    graph_.seed = seed_;
    graph_.opset = needed_opset();
    return &graph_;
  }

  // The op-set the graph is written against: the newest its ops, attributes and optimizer need, so
  // that a graph of op-set 1's ops still runs on a backend built before op-set 2.
  uint32_t needed_opset() const {
    uint32_t opset = 1;
    const auto attrs_since = [&](const std::vector<schema::Attribute>& specs, const std::vector<AttrInit>& given) {
      for (const AttrInit& a : given)
        for (const schema::Attribute& spec : specs)
          if (a.key == spec.name) opset = std::max(opset, spec.since);
    };
    for (const NodeStore& s : nodes_)
      if (const schema::Op* op = schema::find_op(s.op)) {
        opset = std::max(opset, op->since);
        attrs_since(op->attrs, s.attr_src);
      }
    if (const schema::Optimizer* o = schema::find_optimizer(opt_name_)) {
      opset = std::max(opset, o->since);
      attrs_since(o->attrs, opt_attr_src_);
    }
    return opset;
  }

 private:
  struct NodeStore {
    std::string op, name;
    std::vector<int32_t> inputs, outputs;
    std::vector<AttrInit> attr_src;
    std::vector<MLPH_Attr> attrs;
  };
  static std::vector<MLPH_Attr> to_attrs(const std::vector<AttrInit>& src) {
    std::vector<MLPH_Attr> out;
    for (const AttrInit& a : src)
      out.push_back({a.key.c_str(), a.is_text ? nullptr : a.values.data(), a.is_text ? 0 : a.values.size(),
                     a.is_text ? a.text.c_str() : nullptr});
    return out;
  }
  const char* keep(const std::string& s) { return names_.emplace_back(s).c_str(); }

  std::deque<std::string> names_;  // deque: stable addresses for value names
  std::vector<MLPH_Value> values_;
  std::deque<NodeStore> nodes_;
  std::vector<MLPH_Node> node_structs_;
  std::vector<std::vector<float>> param_init_;
  std::vector<MLPH_Parameter> params_;
  std::vector<int32_t> inputs_, eval_outputs_;
  int32_t loss_ = -1;
  std::string opt_name_;
  std::vector<AttrInit> opt_attr_src_;
  std::vector<MLPH_Attr> opt_attrs_;
  uint64_t seed_ = 0;
  MLPH_Graph graph_{};
};

}  // namespace mlph::sdk
