// The emulated device and its backend on one rank: the guard on device memory is real (a host read
// dies, the stream's reads see the poison), the stream runs its work later and in order, and the
// backend — driven through its C table as the core drives it — trains a small graph to the reference
// backend's numbers bit for bit, refuses inputs that are not its pinned memory, and catches a batch
// rewritten while the step that reads it is still queued. mlperf-conformance passes on it.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../../integration/cli.hpp"
#include "emulated_device.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/test/create_args.hpp"

using namespace mlph;
using mlph::test::CliResult;
using mlph::test::run_command;

namespace {

// ---- the device ----

TEST(EmulatedDevice, AHostTouchOfDeviceMemoryFaultsWhileTheStreamReadsItsPoison) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto* data = static_cast<float*>(emulated::device_malloc(64 * sizeof(float)));
  ASSERT_TRUE(emulated::is_device(data, 64 * sizeof(float)));
  EXPECT_EXIT({ [[maybe_unused]] volatile float x = data[3]; std::exit(0); }, testing::KilledBySignal(SIGSEGV), "");
  float seen = 0;
  {
    emulated::Stream stream;
    stream.enqueue([&] { seen = data[3]; });
    stream.synchronize();
  }
  EXPECT_TRUE(std::isnan(seen)) << "fresh device memory is poisoned";
  emulated::device_free(data);
}

TEST(EmulatedDevice, TheStreamRunsLaterInOrderAndAFailureIsSticky) {
  setenv("MLPH_EMULATED_DEVICE_DELAY_US", "100000", 1);
  emulated::Stream stream;
  unsetenv("MLPH_EMULATED_DEVICE_DELAY_US");
  std::vector<int> order;
  const uint64_t first = stream.enqueue([&] { order.push_back(1); });
  stream.enqueue([&] { order.push_back(2); });
  EXPECT_TRUE(order.empty()) << "enqueue returns before the work runs";
  stream.wait(first);
  EXPECT_EQ(order.front(), 1);
  stream.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  stream.enqueue([] { throw std::runtime_error("a kernel failed"); });
  stream.enqueue([&] { order.push_back(3); });
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
  EXPECT_EQ(order, (std::vector<int>{1, 2})) << "the work after a failure is skipped";
  stream.enqueue([&] { order.push_back(4); });
  stream.synchronize();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4})) << "synchronize reported the failure: the stream runs again";
}

// ---- the backend, as the core drives it ----

// y = x·w + b, mean squared error, SGD with momentum: the tiny graph both backends train.
struct Regression {
  sdk::GraphBuilder g;
  Regression() {
    const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 4}), y = g.value("y", MLPH_DTYPE_F32, {2, 1});
    const int32_t w = g.value("w", MLPH_DTYPE_F32, {4, 1}), b = g.value("b", MLPH_DTYPE_F32, {1});
    g.parameter(w, {0.1f, -0.2f, 0.3f, 0.05f});
    g.parameter(b, {0.5f});
    const int32_t pred = g.node("dense", "dense", {x, w, b}, {g.value("pred", MLPH_DTYPE_F32, {2, 1})});
    g.loss(g.node("mse", "loss", {pred, y}, {g.value("loss", MLPH_DTYPE_F32, {})}));
    g.inputs({x, y});
    g.eval_outputs({pred});
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
    g.seed(1);
  }
};

// What an MLPH_Error* says, freed; "" for none.
std::string said(MLPH_Error* error) {
  if (!error) return "";
  std::string message = core::error_message(error);
  core::error_free(error);
  return message;
}

// A backend plug-in with one compiled Regression model, destroyed in order.
class Loaded {
 public:
  Loaded(const std::filesystem::path& file, const std::string& name, std::vector<MLPH_KeyValue> options = {})
      : plugin_(core::PluginLoader::load_file(file, MLPH_KIND_BACKEND, name)), api_(plugin_.api<MLPH_BackendApi>()) {
    const MLPH_BackendCreateArgs args = test::single_rank_create_args(core::host_api(), options);
    EXPECT_EQ(said(api_->create_with(&args, &backend_)), "");
    Regression graph;
    EXPECT_EQ(said(api_->compile(backend_, graph.g.graph(), nullptr, &model_)), "");
  }
  ~Loaded() {
    api_->model_destroy(model_);
    for (void* block : blocks_) api_->free_input(backend_, block);
    api_->destroy(backend_);
  }
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;

  // The backend's input memory (alloc_input), `floats` of it.
  float* pinned(size_t floats) {
    void* block = nullptr;
    EXPECT_EQ(said(api_->alloc_input(backend_, floats * sizeof(float), &block)), "");
    blocks_.push_back(block);
    return static_cast<float*>(block);
  }
  // A train_step on x [2, 4] and y [2, 1] read from `data` (8 then 2 floats) with the loss deferred;
  // the error it returns ("" for none).
  std::string step(float* data, MLPH_DeviceType memory, uint64_t step) {
    const int64_t xs[] = {2, 4}, ys[] = {2, 1};
    MLPH_Tensor in[] = {sdk::host_tensor(MLPH_DTYPE_F32, xs, 2, data), sdk::host_tensor(MLPH_DTYPE_F32, ys, 2, data + 8)};
    for (MLPH_Tensor& t : in) t.device = {memory, 0};
    const MLPH_StepArgs args = sdk::step_args(0.05, step, step, true, true);
    MLPH_StepResult result{sizeof result, nullptr, 0};
    return said(api_->train_step(model_, in, 2, &args, &result));
  }
  double loss() {
    double value = NAN;
    EXPECT_EQ(said(api_->read_loss(model_, &value)), "");
    return value;
  }
  std::string read_loss_error() {
    double value = 0;
    return said(api_->read_loss(model_, &value));
  }
  std::vector<float> weights() {
    std::vector<float> w(4);
    const int64_t shape[] = {4, 1};
    MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, shape, 2, w.data());
    EXPECT_EQ(said(api_->read_parameter(model_, 0, &t)), "");
    return w;
  }

 private:
  core::LoadedPlugin plugin_;
  const MLPH_BackendApi* api_;
  MLPH_Backend* backend_ = nullptr;
  MLPH_Model* model_ = nullptr;
  std::vector<void*> blocks_;
};

const std::filesystem::path kEmulated = MLPH_TEST_PLUGIN_DIR "/libmlph-backend-emulated.so";
const std::filesystem::path kReference = MLPH_PLUGIN_DIR "/libmlph-backend-reference.so";

void fill_batch(float* data, uint64_t step) {
  for (int i = 0; i < 10; ++i) data[i] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(step));
}

TEST(EmulatedBackend, TrainsASmallGraphToTheReferenceBackendsNumbersBitForBit) {
  Loaded emulated(kEmulated, "emulated"), reference(kReference, "reference");
  float* batch = emulated.pinned(10);
  std::vector<float> host(10);
  for (uint64_t s = 0; s < 4; ++s) {
    // The pinned batch is rewritten only after the next train_step returned (ABI 1.6): one step queued
    // behind the other, as the runner's pipeline does with its three buffers.
    float* mine = s % 2 == 0 ? batch : emulated.pinned(10);
    fill_batch(mine, s);
    fill_batch(host.data(), s);
    ASSERT_EQ(emulated.step(mine, MLPH_DEVICE_HOST_PINNED, s), "");
    ASSERT_EQ(reference.step(host.data(), MLPH_DEVICE_HOST, s), "");
  }
  EXPECT_EQ(emulated.loss(), reference.loss());
  EXPECT_EQ(emulated.weights(), reference.weights());
}

TEST(EmulatedBackend, RefusesInputsThatAreNotItsPinnedMemoryInOneLine) {
  std::vector<float> host(10, 1.0f);
  {
    Loaded emulated(kEmulated, "emulated");
    EXPECT_EQ(emulated.step(host.data(), MLPH_DEVICE_HOST, 0), "") << "ordinary host memory, as conformance gives";
    EXPECT_EQ(emulated.step(host.data(), MLPH_DEVICE_HOST_PINNED, 1),
              "emulated backend: input 'x' is marked pinned (MLPH_DEVICE_HOST_PINNED) but is not input memory this "
              "backend allocated (alloc_input)");
  }
  Loaded strict(kEmulated, "emulated", {{"require_pinned_inputs", "true"}});
  EXPECT_EQ(strict.step(host.data(), MLPH_DEVICE_HOST, 0),
            "emulated backend: input 'x' (require_pinned_inputs) but is not input memory this backend allocated "
            "(alloc_input)");
  float* pinned = strict.pinned(10);
  std::fill(pinned, pinned + 10, 1.0f);
  EXPECT_EQ(strict.step(pinned, MLPH_DEVICE_HOST_PINNED, 0), "");
  EXPECT_TRUE(std::isfinite(strict.loss()));
}

// A caller that rewrites a batch while the step reading it is still queued (the stream slowed down to
// 100 ms a task) is caught at the device's copy, and told at the next call that waits.
TEST(EmulatedBackend, ABatchRewrittenWhileItsStepIsQueuedIsCaught) {
  setenv("MLPH_EMULATED_DEVICE_DELAY_US", "100000", 1);
  Loaded emulated(kEmulated, "emulated");
  unsetenv("MLPH_EMULATED_DEVICE_DELAY_US");
  float* batch = emulated.pinned(10);
  fill_batch(batch, 0);
  ASSERT_EQ(emulated.step(batch, MLPH_DEVICE_HOST_PINNED, 0), "") << "train_step only enqueues";
  batch[3] += 1.0f;
  EXPECT_EQ(emulated.read_loss_error(),
            "emulated backend: input 'x' changed between train_step and the device's copy of it: the caller rewrote "
            "it while the step was queued (ABI 1.6 keeps it until the next call on the model returns)");
}

TEST(EmulatedBackend, PassesConformance) {
  const CliResult r = run_command(MLPH_BINARY_DIR "/bin/mlperf-conformance --backend-file " + kEmulated.string() +
                                  " --set backend.threads=2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" 0 FAIL, 0 NOT IMPLEMENTED in "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": CONFORMS"), std::string::npos) << r.output;
}

}  // namespace
