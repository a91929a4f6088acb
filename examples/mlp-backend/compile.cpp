// compile_program: the SDK's validator checks the graph against the op catalogue (the same one-line
// errors as every other backend); what is left here is what this backend itself cannot do, and
// copying the checked graph into the Program the model runs.
#include "mlph/sdk/graph/validate.hpp"
#include "model.hpp"

namespace mlp {
namespace {

using mlph::sdk::fail;

Op op_named(const std::string& name) {
  if (name == "dense") return Op::dense;
  if (name == "relu") return Op::relu;
  if (name == "tanh") return Op::tanh;
  if (name == "scale") return Op::scale;
  return Op::mse;  // the validator let through only what Implements lists below
}

}  // namespace

Program compile_program(const MLPH_Graph& graph) {
  const mlph::sdk::ValidGraph g =
      mlph::sdk::validate_graph(graph, mlph::sdk::Implements{{"dense", "relu", "tanh", "scale", "mse"}, {"sgd_keras"}});
  Program p;
  p.signature = mlph::sdk::signature_of(g);
  for (const mlph::sdk::GraphValue& v : g.values) {
    // The catalogue allows int16 and int32 inputs; these loops compute in float32 only.
    if (v.dtype != MLPH_DTYPE_F32) fail(MLPH_UNIMPLEMENTED, kName + ": value '" + v.name + "': only float32 is implemented");
    const auto n = static_cast<size_t>(v.numel());
    p.values.push_back({v.shape, std::vector<float>(n), std::vector<float>(n)});
  }
  for (const mlph::sdk::ValidNode& n : g.nodes) {
    Node node{op_named(n.op), n.inputs, n.output};
    if (node.op == Op::scale) node.factor = static_cast<float>(n.attrs.number("factor"));
    p.nodes.push_back(std::move(node));
  }
  for (const mlph::sdk::ValidParam& param : g.params) {
    Value& v = p.values[static_cast<size_t>(param.value)];
    std::copy(param.init, param.init + v.size(), v.data.begin());
    v.parameter = true;
    p.params.push_back({param.value, param.l2, param.trainable, std::vector<float>(param.trainable ? v.data.size() : 0)});
  }
  p.inputs = g.inputs;
  p.eval_outputs = g.eval_outputs;
  p.loss = g.loss;
  p.momentum = g.optimizer.attrs.number("momentum");
  return p;
}

}  // namespace mlp
