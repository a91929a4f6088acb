#include "layers.hpp"

#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::bench {
namespace {

bool is_compute(std::string_view op) { return op == "conv" || op == "conv_transpose" || op == "dense"; }
bool is_pool(std::string_view op) { return op == "max_pool" || op == "global_avg_pool"; }
bool is_activation(std::string_view op) { return op == "leaky_relu" || op == "relu" || op == "tanh"; }
bool starts_layer(std::string_view op) {
  return is_compute(op) || is_pool(op) || is_activation(op) || op == "batch_norm";
}

const MLPH_Attr* attr(const MLPH_Node& n, std::string_view key) {
  for (size_t i = 0; i < n.n_attrs; ++i)
    if (key == n.attrs[i].key) return &n.attrs[i];
  return nullptr;
}

// What a layer's first node is, for the tables: a conv is 1x1 when every kernel dim is 1 and
// depthwise when it has as many groups as input channels (its weights [K..., Ci/g, Co]).
std::string kind_of(const MLPH_Graph& g, const MLPH_Node& n) {
  const std::string_view op = n.op;
  if (is_activation(op)) return "activation";
  if (is_pool(op)) return "pool";
  if (op != "conv") return std::string(op);
  const MLPH_Value& w = g.values[n.inputs[1]];
  const MLPH_Value& x = g.values[n.inputs[0]];
  const MLPH_Attr* groups = attr(n, "groups");
  if (groups && groups->n_values == 1 && groups->values[0] > 1 && groups->values[0] == x.shape[x.ndim - 1])
    return "depthwise";
  bool one = true;
  for (int32_t d = 0; d + 2 < w.ndim; ++d) one = one && w.shape[d] == 1;
  return one ? "1x1" : "conv";
}

// Values computed from a trainable parameter: the activations whose gradient a backward pass needs.
std::set<int32_t> values_needing_gradient(const MLPH_Graph& g) {
  std::set<int32_t> needs;
  for (size_t i = 0; i < g.n_params; ++i)
    if (g.params[i].flags & MLPH_PARAM_TRAINABLE) needs.insert(g.params[i].value);
  for (size_t i = 0; i < g.n_nodes; ++i) {
    const MLPH_Node& n = g.nodes[i];
    for (size_t k = 0; k < n.n_inputs; ++k)
      if (needs.count(n.inputs[k])) {
        for (size_t o = 0; o < n.n_outputs; ++o) needs.insert(n.outputs[o]);
        break;
      }
  }
  return needs;
}

std::vector<float> filler(size_t count, uint64_t salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = 0.1f * (2.0f * mlph_uniform(salt, 1, 0, i) - 1.0f);
  return v;
}

std::vector<int64_t> shape_of(const MLPH_Value& v) { return {v.shape, v.shape + v.ndim}; }

// Copies the attributes of a model node into builder form.
std::vector<sdk::AttrInit> copy_attrs(const MLPH_Node& n) {
  std::vector<sdk::AttrInit> out;
  for (size_t i = 0; i < n.n_attrs; ++i) {
    const MLPH_Attr& a = n.attrs[i];
    if (a.text) out.emplace_back(a.key, a.text);
    else out.emplace_back(a.key, std::vector<double>(a.values, a.values + a.n_values));
  }
  return out;
}

}  // namespace

double node_flops(const MLPH_Graph& g, const MLPH_Node& n) {
  const std::string_view op = n.op;
  if (!is_compute(op)) return 0;
  const MLPH_Value& w = g.values[n.inputs[1]];
  const double weights = static_cast<double>(sdk::numel(w));
  if (op == "conv_transpose") {
    // weights [K..., Co, Ci]: every input element feeds prod(K) * Co multiply-adds.
    const MLPH_Value& in = g.values[n.inputs[0]];
    return 2.0 * weights / static_cast<double>(w.shape[w.ndim - 1]) * static_cast<double>(sdk::numel(in));
  }
  // conv weights [K..., Ci/g, Co], dense [in, out]: every output element takes prod(K) * Ci/g.
  const MLPH_Value& out = g.values[n.outputs[0]];
  return 2.0 * weights / static_cast<double>(w.shape[w.ndim - 1]) * static_cast<double>(sdk::numel(out));
}

double forward_flops(const MLPH_Graph& g) {
  double flops = 0;
  for (size_t i = 0; i < g.n_nodes; ++i) flops += node_flops(g, g.nodes[i]);
  return flops;
}

std::vector<Layer> split_layers(const MLPH_Graph& g) {
  const std::set<int32_t> needs_gradient = values_needing_gradient(g);
  std::vector<Layer> layers;
  bool open = false;  // the last layer may still take scale nodes
  for (size_t i = 0; i < g.n_nodes; ++i) {
    const MLPH_Node& n = g.nodes[i];
    const std::string_view op = n.op;
    const bool follows = open && op == "scale" && n.inputs[0] == g.nodes[layers.back().nodes.back()].outputs[0];
    if (follows) {
      layers.back().nodes.push_back(i);
      continue;
    }
    open = is_compute(op) || is_activation(op);
    if (!starts_layer(op)) continue;
    Layer layer{n.name, kind_of(g, n), {i}, node_flops(g, n), needs_gradient.count(n.inputs[0]) > 0};
    layers.push_back(std::move(layer));
  }
  return layers;
}

std::vector<Layer> split_blocks(const MLPH_Graph& g) {
  std::map<int32_t, std::vector<size_t>> readers;  // value -> the nodes reading it
  for (size_t i = 0; i < g.n_nodes; ++i)
    for (size_t k = 0; k < g.nodes[i].n_inputs; ++k) readers[g.nodes[i].inputs[k]].push_back(i);
  // The one node reading node i's output, if it is one and `wanted` says yes.
  auto only_reader = [&](size_t i, bool (*wanted)(std::string_view)) -> std::optional<size_t> {
    const std::vector<size_t>& r = readers[g.nodes[i].outputs[0]];
    if (r.size() != 1 || !wanted(g.nodes[r[0]].op)) return std::nullopt;
    return r[0];
  };
  const std::set<int32_t> needs_gradient = values_needing_gradient(g);
  std::vector<Layer> blocks;
  for (size_t i = 0; i < g.n_nodes; ++i) {
    const MLPH_Node& conv = g.nodes[i];
    if (std::string_view(conv.op) != "conv") continue;
    const std::optional<size_t> act = only_reader(i, is_activation);
    const std::optional<size_t> pool = act ? only_reader(*act, is_pool) : std::nullopt;
    if (!pool) continue;
    blocks.push_back({std::string(conv.name) + " block", "block", {i, *act, *pool}, node_flops(g, conv),
                      needs_gradient.count(conv.inputs[0]) > 0});
  }
  return blocks;
}

const MLPH_Graph* layer_graph(const MLPH_Graph& model, const Layer& layer, sdk::GraphBuilder& b) {
  std::map<int32_t, const MLPH_Parameter*> params;
  for (size_t i = 0; i < model.n_params; ++i) params[model.params[i].value] = &model.params[i];
  std::set<int32_t> produced;
  std::map<int32_t, int32_t> id;  // model value -> layer graph value
  std::vector<int32_t> data_inputs;
  auto map_input = [&](int32_t v) {
    if (id.count(v)) return id[v];
    const MLPH_Value& info = model.values[v];
    const int32_t nv = id[v] = b.value(info.name, info.dtype, shape_of(info));
    const auto count = static_cast<size_t>(sdk::numel(info));
    if (params.count(v)) {
      const MLPH_Parameter& p = *params[v];
      b.parameter(nv, std::vector<float>(p.init, p.init + count), p.l2, p.weight_decay, p.flags);
    } else if (layer.needs_input_gradient) {
      b.parameter(nv, filler(count, static_cast<uint64_t>(v)));  // an activation: gets a data gradient
    } else {
      data_inputs.push_back(nv);
    }
    return nv;
  };
  int32_t last = -1;
  for (size_t index : layer.nodes) {
    const MLPH_Node& n = model.nodes[index];
    std::vector<int32_t> inputs, outputs;
    for (size_t k = 0; k < n.n_inputs; ++k)
      inputs.push_back(produced.count(n.inputs[k]) ? id[n.inputs[k]] : map_input(n.inputs[k]));
    for (size_t k = 0; k < n.n_outputs; ++k) {
      const MLPH_Value& info = model.values[n.outputs[k]];
      outputs.push_back(id[n.outputs[k]] = b.value(info.name, info.dtype, shape_of(info)));
      produced.insert(n.outputs[k]);
    }
    b.node(n.op, n.name, inputs, outputs, copy_attrs(n));
    last = outputs[0];
  }
  // The loss and the evaluation output are taken on the spatial mean of an activation, so that
  // the timing is the layer's and not that of copying a target in and an output out through the
  // ABI (a gigabyte each for CosmoFlow's conv1 at 128^3, more than its convolution takes).
  std::vector<int64_t> summary_shape = shape_of(b.value_info(last));
  if (summary_shape.size() >= 3) {
    std::fill(summary_shape.begin() + 1, summary_shape.end() - 1, 1);
    const int32_t mean = b.value("spatial_mean", MLPH_DTYPE_F32, summary_shape);
    b.node("global_avg_pool", "spatial_mean", {last}, {mean});
    last = mean;
  }
  const int32_t target = b.value("target", MLPH_DTYPE_F32, summary_shape);
  const int32_t loss = b.value("loss", MLPH_DTYPE_F32, {});
  b.node("mse", "loss", {last, target}, {loss});
  data_inputs.push_back(target);
  b.inputs(data_inputs);
  b.loss(loss);
  b.eval_outputs({last});
  b.optimizer("sgd_keras", {{"momentum", 0.0}});
  b.seed(model.seed);
  return b.graph();
}

}  // namespace mlph::bench
