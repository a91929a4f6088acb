// The example backend's compiled model: the graph's nodes in order, every value's contents and
// gradient as float32 arrays on the host, and the optimizer's velocities. One rank. The step protocol
// (the accumulation window, the checkpoint slots, every check of what the caller hands in) is the
// SDK's (mlph/sdk/model/protocol.hpp); this model supplies the steps and says where its state lives.
#pragma once

#include <string>
#include <vector>

#include "mlph/sdk/model/protocol.hpp"

namespace mlp {

inline const std::string kName = "mlp backend";  // the start of every error message

enum class Op { dense, relu, tanh, scale, mse };

// A value of the graph: its contents and dL/dvalue, dense row-major float32.
struct Value {
  std::vector<int64_t> shape;
  std::vector<float> data, grad;
  bool parameter = false;  // its gradient adds up over the micro-batches of an accumulation window

  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

struct Node {
  Op op;
  std::vector<int32_t> inputs;  // value indices
  int32_t output;
  float factor = 1;             // scale's attribute
};

struct Parameter {
  int32_t value;
  double l2;                    // Keras kernel_regularizer factor, 0 for none
  bool trainable;
  std::vector<float> velocity;  // sgd_keras' v; empty unless trainable
};

// What the model keeps of a graph, which compile only borrows.
struct Program {
  mlph::sdk::ModelSignature signature;  // what the caller feeds and reads, for the SDK's checks
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order
  std::vector<Parameter> params;
  std::vector<int32_t> inputs, eval_outputs;
  int32_t loss = -1;
  double momentum = 0;  // sgd_keras
};

// Validates the graph with the SDK (sdk::validate_graph), then copies what the model needs. Throws
// mlph::sdk::Error: MLPH_UNIMPLEMENTED naming the op, attribute, dtype or optimizer this backend
// does not implement (docs/ops.md: refuse, never skip), MLPH_INVALID_ARGUMENT for a graph that
// breaks the ABI's rules.
Program compile_program(const MLPH_Graph& graph);

class MlpModel final : public mlph::sdk::ModelProtocol {
 public:
  MlpModel(const MLPH_HostApi* host, Program program)
      : ModelProtocol(host, kName, std::move(program.signature)), p_(std::move(program)) {}

 private:
  // The SDK's hooks: the steps, and where a parameter, its gradient and its velocity live.
  void run_train(const MLPH_Tensor* inputs, const mlph::sdk::StepPlan& plan) override;
  double last_loss() override { return loss_; }
  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override;
  void zero_gradients() override;
  float* host_storage(const mlph::sdk::ParamTensor& tensor) override;

  Value& value(int32_t index) { return p_.values[static_cast<size_t>(index)]; }
  void load_inputs(const MLPH_Tensor* inputs);
  void forward();
  void forward_node(const Node& node);
  void backward();
  void backward_node(const Node& node);
  double regularize();
  void update(double learning_rate);

  Program p_;
  double loss_ = 0;  // the last training step's
};

}  // namespace mlp
