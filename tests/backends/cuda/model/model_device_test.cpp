// The cuda backend's model on a GPU, through the plug-in's C table as the core calls it, against the
// reference backend: training steps (losses, parameters, gradients), evaluation, a checkpoint's state
// written into a fresh model, and a CUDA-graph step against the same step run eagerly, bit for bit;
// the initial weights and the dropout masks are the reference's, bit for bit.
// backend.profile computes the same bits as without it and writes find.json and nodes.json.
// Without a GPU every case skips, saying why (tools/gpu's check runs them where there is one).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>

#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/test/create_args.hpp"
#include "mlph/test/random.hpp"

namespace {

using Floats = std::vector<float>;

std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(error);
  return count == 0 ? "cudaGetDeviceCount found none" : "";
}

void ok(MLPH_Error* error, const std::string& what) {
  if (!error) return;
  const std::string message = mlph::core::error_message(error);
  mlph::core::error_free(error);
  throw std::runtime_error(what + ": " + message);
}

using ::mlph::test::random_floats;

int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A small network over the ops the workloads use: conv (bias) -> batch_norm -> relu -> depthwise conv (+ the
// relu's output) -> relu -> max_pool -> conv (bias) -> leaky_relu -> max_pool ->
// conv_transpose -> leaky_relu -> reshape -> dense (bias) -> dropout -> dense -> mse; adam with decay.
struct Net {
  mlph::sdk::GraphBuilder g;
  std::vector<std::vector<int64_t>> input_shapes;
  Net() {
    auto param = [&](const char* name, std::vector<int64_t> shape, uint32_t seed, uint32_t flags = MLPH_PARAM_TRAINABLE,
                     float fill = NAN) {
      const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
      Floats init = std::isnan(fill) ? random_floats(static_cast<size_t>(count(shape)), seed, -0.5f, 0.5f)
                                     : Floats(static_cast<size_t>(count(shape)), fill);
      g.parameter(v, init, 0.0, 1.0, flags);
      return v;
    };
    auto value = [&](const char* name, std::vector<int64_t> shape) { return g.value(name, MLPH_DTYPE_F32, shape); };
    const int32_t x = value("x", {2, 8, 8, 3});
    const int32_t c1 = value("c1", {2, 8, 8, 4});
    // No bias before batch norm (as the real models): its gradient is zero but for rounding, which
    // AdamW turns into full-size steps of either sign, so no two backends would agree on it.
    g.node("conv", "c1", {x, param("w1", {3, 3, 3, 4}, 1)}, {c1}, {{"padding", {1, 1}}});
    const int32_t bn = value("bn", {2, 8, 8, 4});
    g.node("batch_norm", "bn",
           {c1, param("gamma", {4}, 3, MLPH_PARAM_TRAINABLE, 1.0f), param("beta", {4}, 4, MLPH_PARAM_TRAINABLE, 0.0f),
            param("mean", {4}, 5, 0, 0.0f), param("var", {4}, 6, 0, 1.0f)},
           {bn});
    const int32_t r = value("r", {2, 8, 8, 4});
    g.node("relu", "r", {bn}, {r});  // fused into the batch norm by default (backend.batch_norm=own)
    const int32_t dw = value("dw", {2, 8, 8, 4});  // depthwise, dilated: our kernel by default (backend.depthwise=own)
    g.node("conv", "dw", {r, param("wdw", {3, 3, 1, 4}, 11)}, {dw},
           {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 4.0}});
    const int32_t sum = value("sum", {2, 8, 8, 4}), sum_relu = value("sum_relu", {2, 8, 8, 4});
    g.node("add", "sum", {dw, r}, {sum});  // a residual add, its relu fused into it
    g.node("relu", "sum_relu", {sum}, {sum_relu});
    const int32_t p = value("p", {2, 4, 4, 4});
    g.node("max_pool", "p", {sum_relu}, {p}, {{"kernel", {2, 2}}, {"stride", {2, 2}}});
    // CosmoFlow's block: conv (bias) -> leaky_relu -> max_pool, one pool chain by default (backend.pool_chain=own).
    const int32_t z = value("z", {2, 4, 4, 4}), a = value("a", {2, 4, 4, 4}), p2 = value("p2", {2, 2, 2, 4});
    g.node("conv", "c2", {p, param("w2", {3, 3, 4, 4}, 12), param("b2", {4}, 13)}, {z}, {{"padding", {1, 1}}});
    g.node("leaky_relu", "a", {z}, {a}, {{"alpha", 0.3}});
    g.node("max_pool", "p2", {a}, {p2}, {{"kernel", {2, 2}}, {"stride", {2, 2}}});
    const int32_t t = value("t", {2, 4, 4, 2});
    g.node("conv_transpose", "t", {p2, param("wt", {3, 3, 2, 4}, 7)}, {t},
           {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
    const int32_t l = value("l", {2, 4, 4, 2});
    g.node("leaky_relu", "l", {t}, {l}, {{"alpha", 0.1}});
    const int32_t f = value("f", {2, 32});
    g.node("reshape", "f", {l}, {f});
    const int32_t d1 = value("d1", {2, 16});
    g.node("dense", "d1", {f, param("wd1", {32, 16}, 8), param("bd1", {16}, 9)}, {d1});
    const int32_t drop = value("drop", {2, 16});
    g.node("dropout", "drop", {d1}, {drop}, {{"rate", 0.25}});
    const int32_t d2 = value("d2", {2, 3});
    g.node("dense", "d2", {drop, param("wd2", {16, 3}, 10)}, {d2});
    const int32_t target = value("target", {2, 3});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node("mse", "loss", {d2, target}, {loss});
    g.loss(loss);
    g.inputs({x, target});
    g.eval_outputs({d2});
    g.optimizer("adamw", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.01}});
    input_shapes = {{2, 8, 8, 3}, {2, 3}};
  }
  const MLPH_Graph& graph() { return *g.graph(); }
};

// One backend plug-in and one compiled model, through the C table.
class Model {
 public:
  Model(const std::string& backend, std::vector<MLPH_KeyValue> options, const MLPH_Graph& graph)
      : plugin_(mlph::core::PluginLoader::load_file(std::string(MLPH_PLUGIN_DIR) + "/libmlph-backend-" + backend + ".so",
                                                    MLPH_KIND_BACKEND, backend)),
        api_(plugin_.api<MLPH_BackendApi>()),
        graph_(graph) {
    const MLPH_BackendCreateArgs args = mlph::test::single_rank_create_args(mlph::core::host_api(), options);
    ok(api_->create_with(&args, &backend_), backend + " create");
    ok(api_->compile(backend_, &graph, nullptr, &model_), backend + " compile");
  }
  ~Model() {
    api_->model_destroy(model_);
    api_->destroy(backend_);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  double train(std::vector<Floats>& inputs, uint64_t step, bool update = true, bool defer = false) {
    std::vector<MLPH_Tensor> tensors = views(inputs);
    const MLPH_StepArgs args = mlph::sdk::step_args(1e-2, step, step, update, defer);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0};
    ok(api_->train_step(model_, tensors.data(), tensors.size(), &args, &result), "train_step");
    if (!defer) return result.loss;
    double loss = 0;
    ok(api_->read_loss(model_, &loss), "read_loss");
    return loss;
  }
  Floats eval(std::vector<Floats>& inputs, const std::vector<int64_t>& out_shape) {
    std::vector<MLPH_Tensor> tensors = views(inputs);
    Floats out(static_cast<size_t>(count(out_shape)));
    MLPH_Tensor o = mlph::sdk::host_tensor(MLPH_DTYPE_F32, out_shape.data(), static_cast<int32_t>(out_shape.size()), out.data());
    ok(api_->eval_step(model_, tensors.data(), tensors.size(), &o, 1), "eval_step");
    return out;
  }
  Floats read(size_t param, const char* slot = nullptr, bool gradient = false) {
    const MLPH_Value& v = graph_.values[graph_.params[param].value];
    Floats out(static_cast<size_t>(mlph::sdk::numel(v)));
    MLPH_Tensor t = mlph::sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, out.data());
    if (slot)
      ok(api_->read_state(model_, param, slot, &t), std::string("read_state ") + slot);
    else if (gradient)
      ok(api_->read_gradient(model_, param, &t), "read_gradient");
    else
      ok(api_->read_parameter(model_, param, &t), "read_parameter");
    return out;
  }
  void write(size_t param, Floats values, const char* slot = nullptr) {
    const MLPH_Value& v = graph_.values[graph_.params[param].value];
    MLPH_Tensor t = mlph::sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    if (slot)
      ok(api_->write_state(model_, param, slot, &t), std::string("write_state ") + slot);
    else
      ok(api_->write_parameter(model_, param, &t), "write_parameter");
  }

 private:
  std::vector<MLPH_Tensor> views(std::vector<Floats>& inputs) const {
    std::vector<MLPH_Tensor> tensors;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const MLPH_Value& v = graph_.values[graph_.inputs[i]];
      tensors.push_back(mlph::sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, inputs[i].data()));
    }
    return tensors;
  }
  mlph::core::LoadedPlugin plugin_;
  const MLPH_BackendApi* api_;
  const MLPH_Graph& graph_;
  MLPH_Backend* backend_ = nullptr;
  MLPH_Model* model_ = nullptr;
};

std::vector<Floats> batch(uint32_t seed) { return {random_floats(2 * 8 * 8 * 3, seed), random_floats(6, seed + 100)}; }

void expect_near(const Floats& actual, const Floats& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], tolerance * (1 + std::fabs(expected[i]))) << what << " at " << i;
}
void expect_same_bits(const Floats& actual, const Floats& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i])) << what << " at " << i;
}

class CudaModelDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = no_device(); !why.empty()) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

void training_steps_match_the_reference(std::vector<MLPH_KeyValue> options) {
  Net net;
  Model cuda("cuda", std::move(options), net.graph()), reference("reference", {}, net.graph());
  for (uint64_t step = 0; step < 4; ++step) {
    std::vector<Floats> in = batch(static_cast<uint32_t>(step));
    std::vector<Floats> same = in;
    const double expected = reference.train(same, step);
    EXPECT_NEAR(cuda.train(in, step, true, step % 2 == 1), expected, 1e-4 * (1 + std::fabs(expected))) << "step " << step;
  }
  for (size_t p = 0; p < net.graph().n_params; ++p) {
    expect_near(cuda.read(p), reference.read(p), 1e-4, "parameter " + std::to_string(p));
    if (net.graph().params[p].flags & MLPH_PARAM_TRAINABLE) {
      expect_near(cuda.read(p, nullptr, true), reference.read(p, nullptr, true), 1e-3, "gradient " + std::to_string(p));
      expect_near(cuda.read(p, "m"), reference.read(p, "m"), 1e-3, "m " + std::to_string(p));
    }
  }
  std::vector<Floats> in = batch(99), same = in;
  expect_near(cuda.eval(in, {2, 3}), reference.eval(same, {2, 3}), 1e-4, "eval");
}

// fp32 with TF32 off: cuDNN's and cuBLASLt's sums in another order than the reference's, so within 1e-4;
// batch norm and the depthwise conv on our kernels (the default) and on cuDNN, and batch norm's
// statistics in one pass.
TEST_F(CudaModelDevice, TrainingStepsMatchTheReferenceBackendInFp32) {
  for (const char* engine : {"own", "cudnn"}) {
    SCOPED_TRACE(std::string("backend.batch_norm and backend.depthwise ") + engine + ", the pool chain " +
                 (std::string(engine) == "own" ? "fused" : "off"));
    training_steps_match_the_reference({{"deterministic", "1"}, {"batch_norm", engine}, {"depthwise", engine},
                                        {"pool_chain", std::string(engine) == "own" ? "own" : "off"}});
  }
  SCOPED_TRACE("backend.batch_norm one_pass");
  training_steps_match_the_reference({{"deterministic", "1"}, {"batch_norm", "one_pass"}});
}

TEST_F(CudaModelDevice, ACapturedStepIsTheEagerStepBitForBit) {
  Net net;
  Model graphs("cuda", {{"deterministic", "1"}, {"graphs", "1"}}, net.graph());
  Model eager("cuda", {{"deterministic", "1"}, {"graphs", "0"}}, net.graph());
  for (uint64_t step = 0; step < 6; ++step) {  // 2 eager, then captured, then replayed three times
    std::vector<Floats> a = batch(static_cast<uint32_t>(step)), b = a;
    const double with = graphs.train(a, step, true, true), without = eager.train(b, step, true, true);
    EXPECT_EQ(std::bit_cast<uint64_t>(with), std::bit_cast<uint64_t>(without)) << "step " << step;
  }
  for (size_t p = 0; p < net.graph().n_params; ++p) expect_same_bits(graphs.read(p), eager.read(p), "parameter " + std::to_string(p));
  // An accumulation window: the other kind of step, warmed up and captured on its own.
  for (uint64_t micro = 6; micro < 14; ++micro) {
    std::vector<Floats> a = batch(static_cast<uint32_t>(micro)), b = a;
    const bool update = micro % 2 == 1;
    EXPECT_EQ(graphs.train(a, micro, update), eager.train(b, micro, update)) << "micro-batch " << micro;
  }
  for (size_t p = 0; p < net.graph().n_params; ++p) expect_same_bits(graphs.read(p), eager.read(p), "parameter " + std::to_string(p));
}

// backend.profile: the same bits as without it (it only adds events and waits), and its files written.
TEST_F(CudaModelDevice, AProfiledModelTrainsBitForBitAsWithoutAndWritesItsReports) {
  Net net;
  const std::string dir = ::testing::TempDir() + "mlph-cuda-profile";
  std::filesystem::remove_all(dir);
  Model profiled("cuda", {{"deterministic", "1"}, {"profile", dir.c_str()}}, net.graph());
  Model plain("cuda", {{"deterministic", "1"}}, net.graph());
  for (uint64_t step = 0; step < 6; ++step) {  // 2 eager and timed, a capture, replays (one for ncu)
    std::vector<Floats> a = batch(static_cast<uint32_t>(step)), b = a;
    const double with = profiled.train(a, step, true, true), without = plain.train(b, step, true, true);
    EXPECT_EQ(std::bit_cast<uint64_t>(with), std::bit_cast<uint64_t>(without)) << "step " << step;
  }
  for (size_t p = 0; p < net.graph().n_params; ++p)
    expect_same_bits(profiled.read(p), plain.read(p), "parameter " + std::to_string(p));
  for (const char* file : {"/find.json", "/nodes.json"}) {
    std::ifstream in(dir + file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(file[1] == 'f' ? "\"chosen\": true" : "\"call\": \"cudnnConvolutionForward\""), std::string::npos)
        << dir << file << ": " << text.substr(0, 400);
  }
}

TEST_F(CudaModelDevice, AModelGivenAnothersStateMidWindowTrainsBitForBitAlike) {
  for (const char* precision : {"fp32", "fp16"}) {
    Net net;
    Model first("cuda", {{"deterministic", "1"}, {"precision", precision}}, net.graph());
    for (uint64_t step = 0; step < 3; ++step) {
      std::vector<Floats> in = batch(static_cast<uint32_t>(step));
      first.train(in, step, step != 2);  // the last one leaves a window open
    }
    Model second("cuda", {{"deterministic", "1"}, {"precision", precision}}, net.graph());
    std::vector<const char*> slots = {"m", "v", "pending_gradient"};
    if (std::string(precision) == "fp16") slots.push_back("loss_scale");
    for (size_t p = 0; p < net.graph().n_params; ++p) {
      second.write(p, first.read(p));
      if (!(net.graph().params[p].flags & MLPH_PARAM_TRAINABLE)) continue;
      for (const char* slot : slots) second.write(p, first.read(p, slot), slot);
    }
    for (uint64_t step = 3; step < 6; ++step) {
      std::vector<Floats> a = batch(static_cast<uint32_t>(step)), b = a;
      EXPECT_EQ(first.train(a, step), second.train(b, step)) << precision << " step " << step;
    }
    for (size_t p = 0; p < net.graph().n_params; ++p)
      expect_same_bits(second.read(p), first.read(p), std::string(precision) + " parameter " + std::to_string(p));
  }
}

// In bf16 and fp16 the first conv (3 channels, x needs no gradient) is padded: its taps along w folded
// into 9 channels padded to 16 (backend.small_channels=fold, the default), or its channels padded to 8.
TEST_F(CudaModelDevice, ReducedPrecisionsTrainWithinTheirTolerance) {
  for (const auto& [precision, tolerance] : {std::pair{"tf32", 2e-2}, {"bf16", 1e-1}, {"fp16", 5e-2}})
    for (const char* small_channels : {"fold", "pad"}) {
      Net net;
      // fp16 from a loss scale of 1024: at PyTorch's 65536 this net's first steps overflow in half
      // precision and are skipped (as PyTorch's would be), which the reference never does.
      Model cuda("cuda", {{"precision", precision}, {"loss_scale", "1024"}, {"small_channels", small_channels}}, net.graph()),
          reference("reference", {}, net.graph());
      for (uint64_t step = 0; step < 3; ++step) {
        std::vector<Floats> in = batch(static_cast<uint32_t>(step)), same = in;
        const double expected = reference.train(same, step);
        EXPECT_NEAR(cuda.train(in, step), expected, tolerance * (1 + std::fabs(expected)))
            << precision << " small_channels " << small_channels << " step " << step;
      }
    }
}

// Pointwise convs (backend.pointwise=gemm, the default: cuBLASLt on channels-last rows) against the
// reference and against cuDNN's: 8192 rows, so a deterministic dw takes 4 chunks summed in order, and
// two deterministic runs agree bit for bit. Channels 5 -> 6 (a bias) -> 3, not multiples of 8.
struct PointwiseNet {
  mlph::sdk::GraphBuilder g;
  PointwiseNet() {
    auto param = [&](const char* name, std::vector<int64_t> shape, uint32_t seed) {
      const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
      g.parameter(v, random_floats(static_cast<size_t>(count(shape)), seed, -0.5f, 0.5f), 0.0, 1.0, MLPH_PARAM_TRAINABLE);
      return v;
    };
    auto value = [&](const char* name, std::vector<int64_t> shape) { return g.value(name, MLPH_DTYPE_F32, shape); };
    const int32_t x = value("x", {2, 64, 64, 5}), a = value("a", {2, 64, 64, 6}), r = value("r", {2, 64, 64, 6});
    const int32_t b = value("b", {2, 64, 64, 3}), target = value("target", {2, 64, 64, 3});
    g.node("conv", "a", {x, param("wa", {1, 1, 5, 6}, 21), param("ba", {6}, 22)}, {a});
    g.node("relu", "r", {a}, {r});
    g.node("conv", "b", {r, param("wb", {1, 1, 6, 3}, 23)}, {b});
    const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
    g.node("mse", "loss", {b, target}, {loss});
    g.loss(loss);
    g.inputs({x, target});
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
  }
  static std::vector<Floats> batch(uint32_t seed) {
    return {random_floats(2 * 64 * 64 * 5, seed), random_floats(2 * 64 * 64 * 3, seed + 100)};
  }
};

TEST_F(CudaModelDevice, PointwiseConvsAsGemmsTrainAsTheReferenceAndAsCudnn) {
  PointwiseNet net;
  const MLPH_Graph& graph = *net.g.graph();
  Model reference("reference", {}, graph);
  Model gemm("cuda", {{"deterministic", "1"}}, graph), again("cuda", {{"deterministic", "1"}}, graph);
  Model cudnn("cuda", {{"deterministic", "1"}, {"pointwise", "cudnn"}}, graph), split_k("cuda", {}, graph);
  for (uint64_t step = 0; step < 3; ++step) {
    const std::vector<Floats> in = PointwiseNet::batch(static_cast<uint32_t>(step));
    std::vector<Floats> r = in, a = in, b = in, c = in, d = in;
    const double expected = reference.train(r, step);
    const double deterministic = gemm.train(a, step);
    EXPECT_NEAR(deterministic, expected, 1e-4 * (1 + std::fabs(expected))) << "step " << step;
    EXPECT_EQ(std::bit_cast<uint64_t>(again.train(b, step)), std::bit_cast<uint64_t>(deterministic)) << "step " << step;
    EXPECT_NEAR(cudnn.train(c, step), expected, 1e-4 * (1 + std::fabs(expected))) << "step " << step;
    EXPECT_NEAR(split_k.train(d, step), expected, 1e-4 * (1 + std::fabs(expected))) << "step " << step;
  }
  for (size_t p = 0; p < graph.n_params; ++p) {
    expect_near(gemm.read(p), reference.read(p), 1e-4, "parameter " + std::to_string(p));
    expect_near(gemm.read(p, nullptr, true), reference.read(p, nullptr, true), 1e-3, "gradient " + std::to_string(p));
    expect_same_bits(again.read(p), gemm.read(p), "parameter " + std::to_string(p) + " (deterministic twice)");
    expect_near(cudnn.read(p), reference.read(p), 1e-4, "parameter " + std::to_string(p) + " (cudnn)");
    expect_near(split_k.read(p), reference.read(p), 1e-4, "parameter " + std::to_string(p) + " (split-K)");
  }
}

// The initial weights as the graph gives them, and the dropout masks (mlph_uniform on the device) the
// reference backend's, for the same graph seed and step: a parameter fed straight through dropout to
// the loss has a zero gradient exactly where its element was dropped, so the gradients' zeros are the
// masks; three steps draw three masks.
TEST_F(CudaModelDevice, InitialWeightsAndDropoutMasksAreTheReferences) {
  Net net;
  Model cuda_net("cuda", {{"deterministic", "1"}}, net.graph()), reference_net("reference", {}, net.graph());
  for (size_t p = 0; p < net.graph().n_params; ++p)
    expect_same_bits(cuda_net.read(p), reference_net.read(p), "initial parameter " + std::to_string(p));

  mlph::sdk::GraphBuilder g;
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {4, 512});
  g.parameter(w, random_floats(4 * 512, 21, 0.5f, 1.5f), 0.0, 1.0, MLPH_PARAM_TRAINABLE);
  const int32_t dropped = g.value("dropped", MLPH_DTYPE_F32, {4, 512});
  g.node("dropout", "drop", {w}, {dropped}, {{"rate", 0.3}});
  const int32_t target = g.value("target", MLPH_DTYPE_F32, {4, 512});
  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("mse", "loss", {dropped, target}, {loss});
  g.loss(loss);
  g.inputs({target});
  g.eval_outputs({dropped});
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  g.seed(1234);
  Model cuda("cuda", {{"deterministic", "1"}}, *g.graph()), reference("reference", {}, *g.graph());
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<Floats> in = {Floats(4 * 512, 0.0f)}, same = in;
    cuda.train(in, step);
    reference.train(same, step);
    const Floats a = cuda.read(0, nullptr, true), b = reference.read(0, nullptr, true);
    size_t zeros = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i] == 0.0f, b[i] == 0.0f) << "step " << step << ": element " << i << " dropped by one backend only";
      zeros += b[i] == 0.0f;
    }
    EXPECT_GT(zeros, 400u) << "a rate of 0.3 drops ~614 of 2048";
    EXPECT_LT(zeros, 830u);
    expect_near(a, b, 1e-6, "gradient at step " + std::to_string(step));
  }
}

}  // namespace
