// sdk::ModelProtocol, the step protocol every backend shares: the accumulation window, the state
// slots and their errors, the checks of what a caller hands in, the deferred loss; and which hooks it
// calls when, as an asynchronous device backend relies on (synchronize before a copy or a loss, none
// when the loss is deferred). The model: loss = sum(w * x); its gradient x adds up over a window; an
// update is w -= lr * gradient. Every hook call is logged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mlph/sdk/model/protocol.hpp"

namespace mlph::sdk {
namespace {

GraphValue value(const std::string& name, std::vector<int64_t> shape) { return {name, MLPH_DTYPE_F32, std::move(shape)}; }

ModelSignature signature() {
  ModelSignature s;
  s.inputs = {value("x", {2})};
  s.eval_outputs = {value("y", {1})};
  s.params = {{value("w", {2}), true}, {value("frozen", {1}), false}};
  s.optimizer_state = {"velocity"};
  return s;
}

MLPH_HostApi host_of_minor(uint32_t minor) {
  MLPH_HostApi host{};
  host.struct_size = sizeof host;
  host.abi_major = MLPH_ABI_MAJOR;
  host.abi_minor = minor;
  return host;
}

// Host memory through host_storage, or (`device`) the copies and synchronize a device backend gives.
class LoggingModel final : public ModelProtocol {
 public:
  LoggingModel(const MLPH_HostApi* host, bool device) : ModelProtocol(host, "test backend", signature()), device_(device) {}
  std::vector<std::string> log;
  std::vector<float> w{1, 2}, gradient{0, 0}, velocity{0, 0}, frozen{7};
  bool fail_next_step = false;

 private:
  void run_train(const MLPH_Tensor* inputs, const StepPlan& plan) override {
    log.push_back(plan.apply_update ? "run_train update" : "run_train");
    if (fail_next_step) fail(MLPH_INTERNAL, "test backend: the step failed");
    const auto* x = static_cast<const float*>(inputs[0].data);
    loss_ = w[0] * x[0] + w[1] * x[1];
    for (int i = 0; i < 2; ++i) gradient[i] += x[i];
    if (plan.apply_update)
      for (int i = 0; i < 2; ++i) w[i] -= static_cast<float>(plan.learning_rate) * gradient[i];
  }
  double last_loss() override {
    log.push_back("last_loss");
    return loss_;
  }
  void run_eval(const MLPH_Tensor* inputs, MLPH_Tensor* outputs) override {
    log.push_back("run_eval");
    const auto* x = static_cast<const float*>(inputs[0].data);
    static_cast<float*>(outputs[0].data)[0] = w[0] * x[0] + w[1] * x[1];
  }
  void zero_gradients() override {
    log.push_back("zero_gradients");
    gradient = {0, 0};
  }
  float* memory(const ParamTensor& t) {
    if (t.param == 1) return frozen.data();
    return t.kind == ParamTensor::Kind::value ? w.data() : t.kind == ParamTensor::Kind::gradient ? gradient.data() : velocity.data();
  }
  float* host_storage(const ParamTensor& t) override {
    if (device_) ADD_FAILURE() << "a device model's memory is not the host's";
    return memory(t);
  }
  void copy_out(const ParamTensor& t, float* dst, int64_t count) override {
    if (!device_) return ModelProtocol::copy_out(t, dst, count);
    log.push_back("copy_out");
    std::copy_n(memory(t), count, dst);
  }
  void copy_in(const ParamTensor& t, const float* src, int64_t count) override {
    if (!device_) return ModelProtocol::copy_in(t, src, count);
    log.push_back("copy_in");
    std::copy_n(src, count, memory(t));
  }
  void synchronize() override { log.push_back("synchronize"); }

  bool device_;
  double loss_ = 0;
};

struct ModelProtocolTest : ::testing::Test {
  MLPH_HostApi host = host_of_minor(MLPH_ABI_MINOR);
  LoggingModel model{&host, false};
  std::vector<float> x{1, 10};
  int64_t two = 2, one = 1;

  MLPH_Tensor tensor(std::vector<float>& data, int64_t size) { return host_tensor(MLPH_DTYPE_F32, &size, 1, data.data()); }
  double step(bool apply_update, bool defer_loss = false) {
    MLPH_Tensor input = tensor(x, 2);
    MLPH_StepArgs args = step_args(0.5, 0, 0, apply_update, defer_loss);
    MLPH_StepResult out{sizeof out, nullptr, 0.0};
    model.train_step(&input, 1, args, out);
    return out.loss;
  }
  std::vector<float> read(size_t param, const std::string& slot = "") {
    std::vector<float> data(param == 0 ? 2 : 1);
    MLPH_Tensor t = tensor(data, static_cast<int64_t>(data.size()));
    if (slot == "gradient") model.read_gradient(param, t);
    else if (slot.empty()) model.read_parameter(param, t);
    else model.read_state(param, slot, t);
    return data;
  }
  // The code and message of what `f` throws.
  template <class F>
  std::pair<MLPH_Code, std::string> error(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {MLPH_OK, ""};
  }
};

TEST_F(ModelProtocolTest, AWindowSumsItsMicroBatchesAndTheNextStartsFromZero) {
  step(false);
  EXPECT_EQ(read(0, "gradient"), (std::vector<float>{1, 10}));
  EXPECT_EQ(read(0), (std::vector<float>{1, 2})) << "no update inside a window";
  step(true);
  EXPECT_EQ(read(0, "gradient"), (std::vector<float>{2, 20})) << "the window's sum";
  EXPECT_EQ(read(0), (std::vector<float>{0, -8}));
  step(true);
  EXPECT_EQ(read(0, "gradient"), (std::vector<float>{1, 10})) << "a new window starts from zero";
  EXPECT_EQ(std::count(model.log.begin(), model.log.end(), "zero_gradients"), 2);
}

TEST_F(ModelProtocolTest, ThePendingGradientIsTheOpenWindowsSumAndWritingItOpensOne) {
  EXPECT_EQ(error([&] { read(0, kPendingGradientSlot); }),
            std::pair(MLPH_FAILED_PRECONDITION, std::string("test backend: no accumulation window is open: no pending gradient")));
  step(false);
  EXPECT_EQ(read(0, kPendingGradientSlot), (std::vector<float>{1, 10}));
  step(true);
  EXPECT_EQ(error([&] { read(0, kPendingGradientSlot); }).first, MLPH_FAILED_PRECONDITION) << "the window closed";

  // A restored checkpoint: its pending sum written opens the window, so the next micro-batch adds to it.
  std::vector<float> pending{100, 200};
  MLPH_Tensor t = tensor(pending, 2);
  model.write_state(0, kPendingGradientSlot, t);
  model.log.clear();
  step(true);
  EXPECT_EQ(read(0, "gradient"), (std::vector<float>{101, 210}));
  EXPECT_EQ(std::count(model.log.begin(), model.log.end(), "zero_gradients"), 0);
}

TEST_F(ModelProtocolTest, OptimizerSlotsComeFromTheSignatureAndTheirErrorsNameWhat) {
  std::vector<float> v{3, 4};
  MLPH_Tensor t = tensor(v, 2);
  model.write_state(0, "velocity", t);
  EXPECT_EQ(model.velocity, v);
  EXPECT_EQ(read(0, "velocity"), v);
  EXPECT_EQ(error([&] { read(0, "m"); }),
            std::pair(MLPH_NOT_FOUND, std::string("test backend: the optimizer has no state slot 'm'")));
  EXPECT_EQ(error([&] { read(1, "velocity"); }),
            std::pair(MLPH_NOT_FOUND, std::string("test backend: parameter 'frozen' is not trainable and has no state")));
  EXPECT_EQ(error([&] { read(1, "gradient"); }),
            std::pair(MLPH_FAILED_PRECONDITION,
                      std::string("test backend: parameter 'frozen' is not trainable and has no gradient")));
  EXPECT_EQ(error([&] { read(2); }),
            std::pair(MLPH_OUT_OF_RANGE, std::string("test backend: no parameter 2 (the graph has 2)")));
  EXPECT_EQ(read(1), (std::vector<float>{7}));
  std::vector<float> wrong(3);
  MLPH_Tensor w3 = tensor(wrong, 3);
  EXPECT_EQ(error([&] { model.read_parameter(0, w3); }),
            std::pair(MLPH_INVALID_ARGUMENT, std::string("test backend: parameter 'w': expected dense host tensor [2], got [3]")));
}

TEST_F(ModelProtocolTest, InputsAndOutputsAreCheckedBeforeAnyHookRuns) {
  MLPH_Tensor input = tensor(x, 2);
  MLPH_StepArgs args = step_args(0.5, 0);
  MLPH_StepResult out{sizeof out, nullptr, 0.0};
  EXPECT_EQ(error([&] { model.train_step(&input, 2, args, out); }),
            std::pair(MLPH_INVALID_ARGUMENT, std::string("test backend: expected 1 inputs, got 2")));
  MLPH_Tensor empty = input;
  empty.data = nullptr;
  EXPECT_EQ(error([&] { model.train_step(&empty, 1, args, out); }),
            std::pair(MLPH_INVALID_ARGUMENT, std::string("test backend: input 'x' is not a valid tensor")));
  std::vector<float> y(1);
  MLPH_Tensor output = tensor(y, 1);
  EXPECT_EQ(error([&] { model.eval_step(&input, 1, &output, 2); }),
            std::pair(MLPH_INVALID_ARGUMENT, std::string("test backend: expected 1 eval outputs, got 2")));
  EXPECT_TRUE(model.log.empty());
  model.eval_step(&input, 1, &output, 1);
  EXPECT_EQ(y[0], 21.0f);
}

TEST_F(ModelProtocolTest, ADeferredLossIsNotWaitedForUntilRead) {
  EXPECT_EQ(model.read_loss(), std::nullopt) << "before any step";
  EXPECT_TRUE(std::isnan(step(true, true)));
  EXPECT_EQ(model.log, (std::vector<std::string>{"zero_gradients", "run_train update"})) << "nothing waited for";
  EXPECT_EQ(model.read_loss(), 21.0);
  EXPECT_EQ(model.read_loss(), 21.0);
  EXPECT_EQ(std::count(model.log.begin(), model.log.end(), "last_loss"), 1) << "waited for once";
  EXPECT_EQ(step(true), -29.5) << "not deferred: the loss, waited for (w = {0.5, -3} after the first update)";
}

TEST_F(ModelProtocolTest, ACoreOlderThanTheDeferredLossIsNeverDeferred) {
  const MLPH_HostApi old = host_of_minor(5);  // 1.5 did not write defer_loss: it is 1.2's padding there
  LoggingModel older(&old, false);
  MLPH_Tensor input = tensor(x, 2);
  MLPH_StepArgs args = step_args(0.5, 0, 0, true, true);
  MLPH_StepResult out{sizeof out, nullptr, 0.0};
  older.train_step(&input, 1, args, out);
  EXPECT_EQ(out.loss, 21.0);
}

TEST_F(ModelProtocolTest, AStepThatFailsLeavesNoLossToRead) {
  step(true);
  model.fail_next_step = true;
  EXPECT_EQ(error([&] { step(true); }).first, MLPH_INTERNAL);
  EXPECT_EQ(model.read_loss(), std::nullopt);
}

TEST_F(ModelProtocolTest, ADeviceModelIsSynchronizedBeforeEveryCopy) {
  LoggingModel device(&host, true);
  std::vector<float> w(2);
  MLPH_Tensor t = tensor(w, 2);
  device.read_parameter(0, t);
  device.write_state(0, "velocity", t);
  device.read_state(0, "velocity", t);
  EXPECT_EQ(device.log, (std::vector<std::string>{"synchronize", "copy_out", "synchronize", "copy_in", "synchronize",
                                                  "copy_out"}));
  EXPECT_EQ(w, (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace mlph::sdk
