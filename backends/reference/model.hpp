// The reference executor: interprets an MLPH_Graph node by node on the host, float32 throughout.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "mlph/sdk/backend.hpp"

namespace mlph::reference {

enum class OpKind { log1p, conv, leaky_relu, relu, tanh, scale, max_pool, reshape, dense, dropout, mse, abs_error_sum };

struct CompiledNode {
  OpKind kind;
  std::string name;
  uint64_t index;  // position in graph.nodes: the dropout stream id
  std::vector<int32_t> inputs, outputs;
  Window window;               // conv, max_pool
  int64_t rows = 0, cols_in = 0, cols_out = 0;  // dense
  double attr = 0;             // alpha, factor or rate
  std::vector<int64_t> argmax; // max_pool
  std::vector<float> mask;     // dropout: 0 or 1/(1-rate)
};

class ReferenceModel final : public sdk::Model {
 public:
  ReferenceModel(const MLPH_HostApi* host, std::shared_ptr<ThreadPool> pool, const MLPH_Graph& graph,
                 const MLPH_CommsHandle* comms);
  void train_step(const MLPH_Tensor* inputs, size_t n_inputs, const MLPH_StepArgs& args, MLPH_StepResult& out) override;
  void eval_step(const MLPH_Tensor* inputs, size_t n_inputs, MLPH_Tensor* outputs, size_t n_outputs) override;
  void read_parameter(size_t index, MLPH_Tensor& dst) override;
  void write_parameter(size_t index, const MLPH_Tensor& src) override;
  void read_gradient(size_t index, MLPH_Tensor& dst) override;

 private:
  struct Param {
    int32_t value;
    double l2;
    bool trainable;
    std::vector<float> velocity;
  };
  void load_inputs(const MLPH_Tensor* inputs, size_t n);
  void forward(bool training, uint64_t step);
  void backward();
  void forward_node(CompiledNode& node, bool training, uint64_t step);
  void backward_node(CompiledNode& node);
  float* grad(int32_t value) { return needs_grad_[value] ? grads_[value].data() : nullptr; }
  const MLPH_Value& value(int32_t v) const { return values_[static_cast<size_t>(v)]; }

  const MLPH_HostApi* host_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<MLPH_Value> values_;
  std::vector<std::string> value_names_;
  std::vector<CompiledNode> nodes_;
  std::vector<Param> params_;
  std::vector<int32_t> inputs_, eval_outputs_;
  int32_t loss_;
  double momentum_ = 0.0;
  uint64_t seed_;
  std::vector<std::vector<float>> data_, grads_;
  std::vector<bool> needs_grad_;
  const MLPH_CommsHandle* comms_;
};

}  // namespace mlph::reference
