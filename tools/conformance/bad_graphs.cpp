#include "bad_graphs.hpp"

#include <functional>
#include <limits>

#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::conformance {
namespace {

// A small graph under construction: graph inputs and parameters, nodes with their outputs, and a
// loss (mse against a target input when the last node is not a scalar); SGD unless set otherwise.
class Sketch {
 public:
  explicit Sketch(sdk::GraphBuilder& g) : g_(g) {}

  int32_t input(const std::string& name, std::vector<int64_t> shape, MLPH_DType dtype = MLPH_DTYPE_F32) {
    const int32_t v = g_.value(name, dtype, std::move(shape));
    inputs_.push_back(v);
    return v;
  }
  int32_t param(const std::string& name, std::vector<int64_t> shape, uint32_t flags = MLPH_PARAM_TRAINABLE,
                double l2 = 0, double weight_decay = 1, MLPH_DType dtype = MLPH_DTYPE_F32) {
    const int64_t n = sdk::numel(shape.data(), static_cast<int32_t>(shape.size()));
    const int32_t v = g_.value(name, dtype, std::move(shape));
    g_.parameter(v, std::vector<float>(static_cast<size_t>(n), 0.5f), l2, weight_decay, flags);
    return v;
  }
  // A node `name` with one output `name`.out of `shape`.
  int32_t node(const std::string& op, const std::string& name, std::vector<int32_t> inputs, std::vector<int64_t> shape,
               std::vector<sdk::AttrInit> attrs = {}, MLPH_DType dtype = MLPH_DTYPE_F32) {
    const int32_t y = g_.value(name + ".out", dtype, std::move(shape));
    return g_.node(op, name, std::move(inputs), {y}, std::move(attrs));
  }
  // Ends the graph at `y`: the loss when it is a scalar, else mse(y, target).
  void end(int32_t y) {
    const MLPH_Value& v = g_.value_info(y);
    int32_t loss = y;
    if (v.ndim != 0) {
      const int32_t target = input("target", {v.shape, v.shape + v.ndim});
      loss = node("mse", "loss", {y, target}, {});
    }
    g_.loss(loss);
    g_.inputs(inputs_);
  }
  sdk::GraphBuilder& builder() { return g_; }

 private:
  sdk::GraphBuilder& g_;
  std::vector<int32_t> inputs_;
};

using Build = std::function<void(Sketch&)>;
using Edit = std::function<void(MLPH_Graph&, std::vector<MLPH_Node>&)>;

std::unique_ptr<BadGraph> make(std::string rule, const Build& build, const Edit& edit = {}) {
  auto bad = std::make_unique<BadGraph>();
  bad->rule = std::move(rule);
  Sketch s(bad->builder);
  bad->builder.optimizer("sgd_keras", {{"momentum", 0.9}});
  bad->builder.seed(1);
  build(s);
  bad->graph = *bad->builder.graph();
  bad->nodes.assign(bad->graph.nodes, bad->graph.nodes + bad->graph.n_nodes);
  bad->graph.nodes = bad->nodes.data();
  if (edit) edit(bad->graph, bad->nodes);
  return bad;
}

// x [2,3] -> relu -> mse: the smallest valid graph, for rules about the graph rather than an op.
void relu_graph(Sketch& s) {
  const int32_t x = s.param("x", {2, 3});
  s.end(s.node("relu", "act", {x}, {2, 3}));
}

// A one-node graph: op over a float32 input x [1,4,4,2] (a trainable parameter) and `more` inputs.
Build one_op(const std::string& op, std::vector<int64_t> out, std::vector<sdk::AttrInit> attrs = {},
             std::vector<int64_t> x_shape = {1, 4, 4, 2}) {
  return [=](Sketch& s) {
    const int32_t x = s.param("x", x_shape);
    s.end(s.node(op, "probe", {x}, out, attrs));
  };
}

// conv of x [1,4,4,2] with w (a parameter), optional bias.
Build conv(std::vector<int64_t> w_shape, std::vector<int64_t> out, std::vector<sdk::AttrInit> attrs = {},
           std::vector<int64_t> bias = {}, std::vector<int64_t> x_shape = {1, 4, 4, 2}, const char* op = "conv") {
  return [=](Sketch& s) {
    std::vector<int32_t> inputs{s.param("x", x_shape), s.param("w", w_shape)};
    if (!bias.empty()) inputs.push_back(s.param("b", bias));
    s.end(s.node(op, "probe", inputs, out, attrs));
  };
}

// batch_norm of x with gamma, beta and running statistics (trainable when `trainable_statistics`).
Build batch_norm(std::vector<int64_t> x_shape, bool trainable_statistics) {
  return [=](Sketch& s) {
    const int32_t x = s.param("x", x_shape);
    const int64_t c = x_shape.back();
    const uint32_t flags = trainable_statistics ? MLPH_PARAM_TRAINABLE : 0;
    const int32_t gamma = s.param("gamma", {c}), beta = s.param("beta", {c});
    const int32_t mean = s.param("mean", {c}, flags), var = s.param("var", {c}, flags);
    s.end(s.node("batch_norm", "probe", {x, gamma, beta, mean, var}, x_shape));
  };
}

// softmax_cross_entropy or iou of logits [2,3,3] and labels of `labels_shape`.
Build segmentation(const std::string& op, std::vector<int64_t> labels_shape, std::vector<int64_t> out,
                   std::vector<sdk::AttrInit> attrs = {}, MLPH_DType labels_dtype = MLPH_DTYPE_I32) {
  return [=](Sketch& s) {
    const int32_t logits = s.param("logits", {2, 3, 3});
    const int32_t labels = s.input("labels", labels_shape, labels_dtype);
    s.end(s.node(op, "probe", {logits, labels}, out, attrs));
  };
}

// relu_graph with another optimizer.
Build with_optimizer(const std::string& name, std::vector<sdk::AttrInit> attrs) {
  return [=](Sketch& s) {
    relu_graph(s);
    s.builder().optimizer(name, attrs);
  };
}

std::vector<sdk::AttrInit> adam_attrs() { return {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}}; }

}  // namespace

std::vector<std::unique_ptr<BadGraph>> bad_graphs() {
  std::vector<std::unique_ptr<BadGraph>> out;
  auto add = [&](std::string rule, const Build& build, const Edit& edit = {}) {
    out.push_back(make(std::move(rule), build, edit));
  };
  // ---- the graph as a whole ----
  add("graph struct size", relu_graph,
      [](MLPH_Graph& g, auto&) { g.struct_size = MLPH_STRUCT_SIZE(MLPH_Graph, seed) - 8; });
  add("op-set 0", relu_graph, [](MLPH_Graph& g, auto&) { g.opset = 0; });
  add("op-set newer than the SDK", relu_graph, [](MLPH_Graph& g, auto&) { g.opset = MLPH_OPSET + 1; });
  add("null array", relu_graph, [](MLPH_Graph& g, auto&) { g.params = nullptr; });
  add("value shape", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3});
    s.builder().value("empty", MLPH_DTYPE_F32, {2, 0});
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  add("graph input dtype", [](Sketch& s) {
    const int32_t x = s.input("x", {2, 3}, MLPH_DTYPE_F64);
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  add("value index", relu_graph, [](MLPH_Graph& g, auto&) { g.loss = 99; });
  add("value defined twice", [](Sketch& s) {
    const int32_t x = s.input("x", {2, 3});
    s.builder().parameter(x, std::vector<float>(6, 0.0f));
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  add("parameter dtype", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3}, MLPH_PARAM_TRAINABLE, 0, 1, MLPH_DTYPE_I32);
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  add("parameter l2", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3}, MLPH_PARAM_TRAINABLE, -0.5);
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  add("parameter weight_decay", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3}, MLPH_PARAM_TRAINABLE, 0, -1);
    s.end(s.node("relu", "act", {x}, {2, 3}));
  });
  // ---- nodes ----
  add("incomplete node", relu_graph, [](MLPH_Graph&, std::vector<MLPH_Node>& nodes) { nodes[0].name = nullptr; });
  add("unknown op", one_op("frobnicate", {1, 4, 4, 2}));
  add("op of a later op-set", one_op("spatial_gather", {1, 4, 4, 2}, {{"grid", {1, 1}}}),
      [](MLPH_Graph& g, auto&) { g.opset = 1; });
  add("one output", relu_graph, [](MLPH_Graph&, std::vector<MLPH_Node>& nodes) { nodes[0].n_outputs = 0; });
  add("arity", [](Sketch& s) {
    const int32_t x = s.param("x", {1, 4, 4, 2});
    s.end(s.node("conv", "probe", {x}, {1, 4, 4, 2}));
  });
  add("topological order", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3});
    const int32_t a = s.builder().value("a", MLPH_DTYPE_F32, {2, 3}), b = s.builder().value("b", MLPH_DTYPE_F32, {2, 3});
    s.builder().node("relu", "second", {a}, {b});
    s.builder().node("relu", "first", {x}, {a});
    s.end(b);
  });
  add("output defined twice", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3});
    s.builder().node("relu", "act", {x}, {x});
    s.end(x);
  });
  add("unknown attribute", one_op("leaky_relu", {1, 4, 4, 2}, {{"alpha", 0.3}, {"slope_mode", "fancy"}}));
  add("attribute given twice", one_op("leaky_relu", {1, 4, 4, 2}, {{"alpha", 0.3}, {"alpha", 0.2}}));
  add("missing required attribute", one_op("leaky_relu", {1, 4, 4, 2}));
  add("attribute type", one_op("leaky_relu", {1, 4, 4, 2}, {{"alpha", "steep"}}));
  add("attribute scalar", one_op("scale", {1, 4, 4, 2}, {{"factor", {1.0, 2.0}}}));
  add("attribute integer", conv({1, 1, 2, 2}, {1, 4, 4, 2}, {{"groups", 1.5}}));
  add("attribute range", one_op("dropout", {1, 4, 4, 2}, {{"rate", 1.0}}));
  add("attribute finite", one_op("scale", {1, 4, 4, 2}, {{"factor", std::numeric_limits<double>::infinity()}}));
  add("attribute count", conv({3, 3, 2, 2}, {1, 4, 4, 2}, {{"padding", {1, 1, 1}}}));
  add("input dtype", [](Sketch& s) {
    const int32_t counts = s.input("counts", {2, 3}, MLPH_DTYPE_I32);
    s.end(s.node("log1p", "probe", {counts}, {2, 3}));
  });
  add("output dtype", [](Sketch& s) {
    const int32_t x = s.param("x", {2, 3});
    s.end(s.node("relu", "probe", {x}, {2, 3}, {}, MLPH_DTYPE_I32));
  });
  add("running statistics are state", batch_norm({1, 4, 4, 2}, true));
  // ---- shape rules ----
  add("shape: elementwise", [](Sketch& s) {
    const int32_t a = s.param("a", {2, 3}), b = s.param("b", {3, 2});
    s.end(s.node("add", "probe", {a, b}, {2, 3}));
  });
  add("shape: elementwise output", one_op("relu", {1, 4, 2, 4}));
  add("shape: loss", [](Sketch& s) {
    const int32_t p = s.param("p", {2, 3}), t = s.input("t", {3, 2});
    s.end(s.node("mse", "probe", {p, t}, {}));
  });
  add("shape: conv output", conv({3, 3, 2, 4}, {1, 4, 4, 4}));
  add("shape: conv input rank", conv({3, 2, 4}, {1, 4, 4}, {}, {}, {1, 4, 2}));
  add("shape: conv groups", conv({3, 3, 2, 4}, {1, 2, 2, 4}, {{"groups", 2.0}}));
  add("shape: conv window", conv({5, 5, 2, 4}, {1, 1, 1, 4}));
  add("shape: conv bias", conv({3, 3, 2, 4}, {1, 2, 2, 4}, {}, {2}));
  add("shape: conv_transpose weights", conv({3, 3, 4, 3}, {1, 6, 6, 4}, {}, {}, {1, 4, 4, 2}, "conv_transpose"));
  add("shape: conv_transpose output", conv({3, 3, 4, 2}, {1, 8, 8, 4}, {{"stride", {2, 2}}}, {}, {1, 4, 4, 2},
                                           "conv_transpose"));
  add("shape: pool window", one_op("max_pool", {1, 1, 1, 2}, {{"kernel", {5, 5}}}));
  add("shape: pool output", one_op("max_pool", {1, 3, 3, 2}, {{"kernel", {3, 3}}, {"stride", {1, 1}}}));
  add("shape: dense", conv({3, 4}, {2, 4}, {}, {}, {2, 5}, "dense"));
  add("shape: reshape count", one_op("reshape", {2, 8}));
  add("shape: reshape attribute", one_op("reshape", {1, 32}, {{"shape", {32, 1}}}));
  add("shape: per channel", [](Sketch& s) {
    const int32_t x = s.param("x", {1, 4, 4, 2}), w = s.param("w", {3}), b = s.param("b", {2});
    s.end(s.node("channel_affine", "probe", {x, w, b}, {1, 4, 4, 2}));
  });
  add("shape: batch_norm statistics", batch_norm({1, 2}, false));
  add("shape: concat", [](Sketch& s) {
    const int32_t a = s.param("a", {1, 4, 4, 2}), b = s.param("b", {1, 4, 2, 2});
    s.end(s.node("concat", "probe", {a, b}, {1, 4, 4, 4}));
  });
  add("shape: global_avg_pool", one_op("global_avg_pool", {1, 2}, {}, {4, 2}));
  add("shape: broadcast", one_op("broadcast", {1, 8, 4, 2}));
  add("shape: halo output", one_op("halo_exchange", {1, 4, 4, 2}, {{"grid", {1, 1}}, {"halo", {1, 1}}}));
  add("shape: halo wider than the block",
      one_op("halo_exchange", {1, 14, 4, 2}, {{"grid", {2, 1}}, {"halo", {5, 0}}}));
  add("shape: spatial_gather", one_op("spatial_gather", {1, 4, 4, 2}, {{"grid", {2, 1}}}));
  add("shape: segmentation labels", segmentation("softmax_cross_entropy", {2, 2}, {}));
  add("shape: segmentation metric", segmentation("iou", {2, 3}, {}));
  add("attribute count: class_weights", segmentation("softmax_cross_entropy", {2, 3}, {}, {{"class_weights", {1.0, 2.0}}}));
  add("labels dtype", segmentation("softmax_cross_entropy", {2, 3}, {}, {}, MLPH_DTYPE_F32));
  // ---- loss, eval outputs, optimizer ----
  add("loss scalar", relu_graph, [](MLPH_Graph& g, auto& nodes) { g.loss = nodes[0].outputs[0]; });
  add("eval output dtype", [](Sketch& s) {
    const int32_t counts = s.input("counts", {2, 3}, MLPH_DTYPE_I16);
    const int32_t x = s.node("log1p", "log", {counts}, {2, 3});
    s.end(x);
    s.builder().eval_outputs({counts});
  });
  add("unknown optimizer", with_optimizer("adagrad", {}));
  add("optimizer attribute missing", [](Sketch& s) {
    std::vector<sdk::AttrInit> attrs = adam_attrs();
    attrs.erase(attrs.begin());
    with_optimizer("adam", attrs)(s);
  });
  add("optimizer attribute range", [](Sketch& s) {
    std::vector<sdk::AttrInit> attrs = adam_attrs();
    attrs[0] = {"beta1", 1.0};
    with_optimizer("adamw", attrs)(s);
  });
  add("optimizer weight_decay", [](Sketch& s) {
    std::vector<sdk::AttrInit> attrs = adam_attrs();
    attrs[3] = {"weight_decay", -0.1};
    attrs.emplace_back("max_grad_norm", 1.0);
    with_optimizer("lamb", attrs)(s);
  });
  add("optimizer unknown attribute", [](Sketch& s) {
    std::vector<sdk::AttrInit> attrs = adam_attrs();
    attrs.emplace_back("amsgrad", 1.0);
    with_optimizer("adam", attrs)(s);
  });
  add("sgd momentum", with_optimizer("sgd_keras", {{"momentum", -0.9}}));
  return out;
}

}  // namespace mlph::conformance
