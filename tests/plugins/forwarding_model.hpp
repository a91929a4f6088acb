// For the test backends built on the reference backend: a model that forwards every call to the one
// it wraps, so each test backend overrides only what it changes.
#pragma once

#include <memory>
#include <string>

#include "mlph/sdk/model/backend.hpp"

namespace mlph::test {

class ForwardingModel : public sdk::Model {
 public:
  explicit ForwardingModel(std::unique_ptr<sdk::Model> inner) : inner_(std::move(inner)) {}

  void train_step(const MLPH_Tensor* inputs, size_t n, const MLPH_StepArgs& args, MLPH_StepResult& out) override {
    inner_->train_step(inputs, n, args, out);
  }
  void eval_step(const MLPH_Tensor* inputs, size_t n, MLPH_Tensor* outputs, size_t n_outputs) override {
    inner_->eval_step(inputs, n, outputs, n_outputs);
  }
  void read_parameter(size_t index, MLPH_Tensor& dst) override { inner_->read_parameter(index, dst); }
  void write_parameter(size_t index, const MLPH_Tensor& src) override { inner_->write_parameter(index, src); }
  void read_gradient(size_t index, MLPH_Tensor& dst) override { inner_->read_gradient(index, dst); }
  void read_state(size_t index, const std::string& slot, MLPH_Tensor& dst) override { inner_->read_state(index, slot, dst); }
  void write_state(size_t index, const std::string& slot, const MLPH_Tensor& src) override {
    inner_->write_state(index, slot, src);
  }
  // A loss the core defers (ABI 1.6) is the inner model's to wait for: its train_step left NaN.
  std::optional<double> read_loss() override { return inner_->read_loss(); }

 private:
  std::unique_ptr<sdk::Model> inner_;
};

}  // namespace mlph::test
