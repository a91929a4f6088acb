// The example backend's compiled model: the graph's nodes in order, every value's contents and
// gradient as float32 arrays on the host, and the optimizer's velocities. One rank.
#pragma once

#include <string>
#include <vector>

#include "mlph/sdk/backend.hpp"

namespace mlp {

inline const std::string kName = "mlp backend";  // the start of every error message

enum class Op { dense, relu, tanh, scale, mse };

// A value of the graph: its contents and dL/dvalue, dense row-major float32.
struct Value {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data, grad;
  bool parameter = false;  // its gradient adds up over the micro-batches of an accumulation window

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  MLPH_Value info() const;  // what sdk::check_matches compares a tensor with
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

class MlpModel final : public mlph::sdk::Model {
 public:
  explicit MlpModel(Program program) : p_(std::move(program)) {}

  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args,
                  MLPH_StepResult& out) override;
  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) override;
  void read_parameter(size_t index, MLPH_Tensor& dst) override;
  void write_parameter(size_t index, const MLPH_Tensor& src) override;
  void read_gradient(size_t index, MLPH_Tensor& dst) override;
  // Checkpoints (ABI 1.4): the velocity, and the window's sum while one is open.
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) override;
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) override;

 private:
  Value& value(int32_t index) { return p_.values[static_cast<size_t>(index)]; }
  Parameter& param(size_t index);
  void load_inputs(const MLPH_Tensor* inputs, size_t n);
  void forward();
  void forward_node(const Node& node);
  void backward();
  void backward_node(const Node& node);
  double regularize();
  void update(double learning_rate);
  std::vector<float>& state(size_t index, const std::string& slot, bool reading);

  Program p_;
  bool window_open_ = false;  // micro-batches of an unfinished accumulation window are summed in
};

}  // namespace mlp
