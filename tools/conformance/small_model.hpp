// The small trainable graph that the training checks share (accumulation, training state): dense,
// tanh, dense, mse, l2 on the first kernel, trained by a chosen optimizer through the C ABI only.
#pragma once

#include <memory>
#include <vector>

#include "check.hpp"
#include "mlph/sdk/graph/graph.hpp"

namespace mlph::conformance::small {

constexpr int64_t kBatch = 4, kIn = 6, kHidden = 8, kOut = 3;

struct Weights {
  std::vector<float> w1, b1, w2, b2;
};
Weights random_weights(uint64_t seed);

// A whole batch of kBatch random inputs and targets.
std::vector<HostTensor> random_batch(uint64_t seed);

// Rows [first, first + count) of every tensor of `batch` ([kBatch, cols] each).
std::vector<HostTensor> rows(const std::vector<HostTensor>& batch, int64_t first, int64_t count);

struct Optimizer {
  std::string name;
  std::vector<sdk::AttrInit> attrs;
};
Optimizer sgd_momentum();

// The graph for micro-batches of `batch` samples in windows of `window` (the loss divided by it).
std::unique_ptr<sdk::GraphBuilder> make_graph(int64_t batch, int window, const Weights& w, const Optimizer& optimizer);

// A compiled model of `graph` on `backend`: steps, and the parameters, gradients and state it holds.
class Trainer {
 public:
  Trainer(const LoadedBackend& backend, const MLPH_Graph& graph);
  double step(std::vector<HostTensor>& inputs, const MLPH_StepArgs& args);
  std::vector<HostTensor> parameters() const;
  std::vector<HostTensor> gradients() const;
  // State slot `slot` of every trainable parameter (MLPH_BackendApi.read_state / write_state, ABI 1.4).
  std::vector<HostTensor> state(const std::string& slot) const;
  void set_parameters(std::vector<HostTensor> values);
  void set_state(const std::string& slot, std::vector<HostTensor> values);

 private:
  enum class Kind { parameter, gradient, state };
  std::vector<HostTensor> read(Kind kind, const std::string& slot) const;
  void write(Kind kind, const std::string& slot, std::vector<HostTensor>& values);
  const LoadedBackend& backend_;
  const MLPH_Graph& graph_;
  core::Owned<MLPH_Model> model_;
};

double worst_error(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected);
bool bitwise_equal(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b);

}  // namespace mlph::conformance::small
