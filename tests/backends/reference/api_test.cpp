// The reference backend through its generated C table, with the core's host services as host:
// training, parameter and gradient access, eval, options, comms, and the errors compile and the
// steps must return (code and a message that names the culprit).
#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>

#include "mlph/sdk/util/cpus.hpp"
#include "test_util.hpp"

namespace mlph::reference {
namespace {
using test::CallResult;
using test::result_of;

// y = x·w + b, loss = mse(y, t): a least-squares problem small enough to check by hand.
struct Regression {
  sdk::GraphBuilder g;
  int32_t x, t, w, b, y, loss;
  std::vector<float> xs{1, 2, 0, -1, 0.5f, 1, 0, 1, -2, 2, 1, 1};  // [4, 3]
  std::vector<float> ts{1, 0, 0, 1, -1, 1, 2, 0};                  // [4, 2]

  explicit Regression(double momentum = 0.0, double l2 = 0.0) {
    x = g.value("x", MLPH_DTYPE_F32, {4, 3});
    t = g.value("t", MLPH_DTYPE_F32, {4, 2});
    w = g.value("w", MLPH_DTYPE_F32, {3, 2});
    b = g.value("b", MLPH_DTYPE_F32, {2});
    g.parameter(w, {0.1f, -0.2f, 0.3f, 0.0f, -0.1f, 0.2f}, l2);
    g.parameter(b, {0.0f, 0.1f});
    y = g.node("dense", "fit", {x, w, b}, {g.value("y", MLPH_DTYPE_F32, {4, 2})});
    loss = g.node("mse", "loss", {y, t}, {g.value("loss", MLPH_DTYPE_F32, {})});
    g.inputs({x, t});
    g.loss(loss);
    g.eval_outputs({y});
    g.optimizer("sgd_keras", {{"momentum", momentum}});
  }
  std::vector<MLPH_Tensor> inputs() {
    return {test::tensor_for(g.value_info(x), xs), test::tensor_for(g.value_info(t), ts)};
  }
  const MLPH_Value& info(int32_t v) const { return g.value_info(v); }
};

CallResult compile_error(const MLPH_Graph* graph) {
  MLPH_Backend* backend = nullptr;
  core::check(test::api()->create(core::host_api(), nullptr, 0, &backend));
  MLPH_Model* model = nullptr;
  CallResult r = result_of(test::api()->compile(backend, graph, nullptr, &model));
  EXPECT_EQ(model, nullptr) << "out-parameters stay untouched on error";
  test::api()->destroy(backend);
  return r;
}

CallResult create_error(std::vector<MLPH_KeyValue> options) {
  MLPH_Backend* backend = nullptr;
  CallResult r = result_of(test::api()->create(core::host_api(), options.data(), options.size(), &backend));
  test::api()->destroy(backend);  // NULL on error: a no-op
  return r;
}

CallResult train_error(test::Compiled& model, std::vector<MLPH_Tensor> inputs) {
  const MLPH_StepArgs args = mlph::sdk::step_args(0.1, 0);
  MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
  return result_of(test::api()->train_step(model.model(), inputs.data(), inputs.size(), &args, &result));
}

TEST(ReferenceApi, LossDecreasesWhileTraining) {
  Regression r;
  test::Compiled model(r.g.graph());
  std::vector<double> losses;
  for (uint64_t step = 0; step < 40; ++step) losses.push_back(model.train(r.inputs(), 0.05, step));
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  EXPECT_LT(losses.back(), 0.5 * losses.front());
}

// d mse / d w = 2/(N*out) * x^T (y - t), d/d b = column sums of the same residual.
TEST(ReferenceApi, GradientsMatchTheHandDerivedLeastSquaresGradient) {
  Regression r;
  test::Compiled model(r.g.graph());
  const double loss = model.train(r.inputs(), 0.0);
  const std::vector<float> w{0.1f, -0.2f, 0.3f, 0.0f, -0.1f, 0.2f}, b{0.0f, 0.1f};
  std::vector<double> dw(6, 0.0), db(2, 0.0);
  double expected_loss = 0;
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 2; ++o) {
      double y = b[o];
      for (int i = 0; i < 3; ++i) y += r.xs[n * 3 + i] * w[i * 2 + o];
      const double residual = y - r.ts[n * 2 + o];
      expected_loss += residual * residual / 8;
      db[o] += 2 * residual / 8;
      for (int i = 0; i < 3; ++i) dw[i * 2 + o] += 2 * residual * r.xs[n * 3 + i] / 8;
    }
  EXPECT_NEAR(loss, expected_loss, 1e-6);
  const std::vector<float> got_w = model.read_gradient(0, r.info(r.w)), got_b = model.read_gradient(1, r.info(r.b));
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(got_w[i], dw[i], 1e-6) << i;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got_b[i], db[i], 1e-6) << i;
}

TEST(ReferenceApi, ParametersRoundTripAndEvalUsesThem) {
  Regression r;
  test::Compiled model(r.g.graph());
  const std::vector<float> w{1, 2, 3, 4, 5, 6}, b{0.5f, -0.5f};
  model.write_parameter(0, r.info(r.w), w);
  model.write_parameter(1, r.info(r.b), b);
  EXPECT_EQ(model.read_parameter(0, r.info(r.w)), w);
  EXPECT_EQ(model.read_parameter(1, r.info(r.b)), b);
  std::vector<float> y(8);
  MLPH_Tensor out = test::tensor_for(r.info(r.y), y);
  std::vector<MLPH_Tensor> in = r.inputs();
  core::check(test::api()->eval_step(model.model(), in.data(), in.size(), &out, 1));
  // row 0: x = [1, 2, 0]: [1*1 + 2*3, 1*2 + 2*4] + b
  EXPECT_FLOAT_EQ(y[0], 7.5f);
  EXPECT_FLOAT_EQ(y[1], 9.5f);
  // row 3: x = [2, 1, 1]: [2 + 3 + 5, 4 + 4 + 6] + b
  EXPECT_FLOAT_EQ(y[6], 10.5f);
  EXPECT_FLOAT_EQ(y[7], 13.5f);
}

TEST(ReferenceApi, ParameterAccessIsChecked) {
  Regression r;
  test::Compiled model(r.g.graph());
  std::vector<float> wrong(5);
  const int64_t shape[2] = {5, 1};
  MLPH_Tensor t = sdk::host_tensor(MLPH_DTYPE_F32, shape, 2, wrong.data());
  EXPECT_EQ(result_of(test::api()->read_parameter(model.model(), 0, &t)).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(result_of(test::api()->write_parameter(model.model(), 0, &t)).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(result_of(test::api()->read_gradient(model.model(), 0, &t)).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(result_of(test::api()->read_parameter(model.model(), 2, &t)).code, MLPH_OUT_OF_RANGE);
}

TEST(ReferenceApi, L2PenaltyJoinsLossAndGradient) {
  Regression plain, regularized(0.0, 0.25);
  test::Compiled a(plain.g.graph()), b(regularized.g.graph());
  const double loss_a = a.train(plain.inputs(), 0.0), loss_b = b.train(regularized.inputs(), 0.0);
  const std::vector<float> w{0.1f, -0.2f, 0.3f, 0.0f, -0.1f, 0.2f};
  double sum_sq = 0;
  for (float v : w) sum_sq += static_cast<double>(v) * v;
  EXPECT_NEAR(loss_b - loss_a, 0.25 * sum_sq, 1e-7);
  const auto ga = a.read_gradient(0, plain.info(plain.w)), gb = b.read_gradient(0, regularized.info(regularized.w));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(gb[i] - ga[i], 2 * 0.25 * w[i], 1e-6) << i;
  // The bias has no l2: identical gradients.
  EXPECT_EQ(a.read_gradient(1, plain.info(plain.b)), b.read_gradient(1, regularized.info(regularized.b)));
}

TEST(ReferenceApi, NanLossIsReportedNotHidden) {
  Regression r;
  r.ts[3] = NAN;
  test::Compiled model(r.g.graph());
  EXPECT_TRUE(std::isnan(model.train(r.inputs(), 0.1)));
}

// ---- dropout ---------------------------------------------------------------------------------------

// y = dropout(w) with w = 1, loss = mean(y^2): dloss/dw[i] = 2/n * mask[i]^2 reveals the mask.
TEST(ReferenceApi, DropoutMaskFollowsTheSharedRandomStream) {
  sdk::GraphBuilder g;
  const int32_t w = g.value("w", MLPH_DTYPE_F32, {4, 64});
  g.parameter(w, std::vector<float>(256, 1.0f));
  const int32_t zeros = g.value("zeros", MLPH_DTYPE_F32, {4, 64});
  const int32_t first = g.node("scale", "one", {w}, {g.value("s", MLPH_DTYPE_F32, {4, 64})}, {{"factor", 1.0}});
  const int32_t y = g.node("dropout", "drop", {first}, {g.value("y", MLPH_DTYPE_F32, {4, 64})}, {{"rate", 0.25}});
  g.loss(g.node("mse", "loss", {y, zeros}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.inputs({zeros});
  g.eval_outputs({y});
  g.optimizer("sgd_keras", {{"momentum", 0.0}});
  g.seed(31);
  test::Compiled model(g.graph());
  std::vector<float> zero(256, 0.0f);
  std::vector<MLPH_Tensor> in{test::tensor_for(g.value_info(zeros), zero)};
  for (uint64_t step : {3u, 4u}) {
    model.train(in, 0.0, step);
    const std::vector<float> grad = model.read_gradient(0, g.value_info(w));
    int dropped = 0;
    for (uint64_t i = 0; i < 256; ++i) {
      const bool keep = mlph_uniform(31, /*node index*/ 1, step, i) >= 0.25;
      dropped += keep ? 0 : 1;
      ASSERT_NEAR(grad[i], keep ? 2.0 / 256 / (0.75 * 0.75) : 0.0, 1e-7) << "step " << step << " element " << i;
    }
    EXPECT_GT(dropped, 30);
    EXPECT_LT(dropped, 100);
  }
  std::vector<float> out(256);
  MLPH_Tensor out_tensor = test::tensor_for(g.value_info(y), out);
  core::check(test::api()->eval_step(model.model(), in.data(), 1, &out_tensor, 1));
  EXPECT_EQ(out, std::vector<float>(256, 1.0f)) << "evaluation: identity";
}

// ---- comms ---------------------------------------------------------------------------------------

// A pretend second rank whose gradients are all zero: averaging halves ours.
struct FakeComm {
  int calls = 0;
  size_t count = 0;
};
MLPH_Error* halve(MLPH_Comm* comm, void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) {
  auto* fake = reinterpret_cast<FakeComm*>(comm);
  ++fake->calls;
  fake->count = count;
  if (dtype != MLPH_DTYPE_F32 || op != MLPH_REDUCE_AVERAGE)
    return core::host_api()->error_new(MLPH_INTERNAL, "bad call");
  for (size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] *= 0.5f;
  return nullptr;
}

TEST(ReferenceApi, GradientsAreAveragedOverRanksInOneAllreduce) {
  Regression alone, shared;
  FakeComm fake;
  MLPH_CommsApi comms_api{};
  comms_api.struct_size = sizeof(MLPH_CommsApi);
  comms_api.allreduce = halve;
  const MLPH_CommsHandle handle{sizeof(MLPH_CommsHandle), nullptr, &comms_api, reinterpret_cast<MLPH_Comm*>(&fake)};
  test::Compiled a(alone.g.graph()), b(shared.g.graph(), &handle);
  a.train(alone.inputs(), 0.1);
  b.train(shared.inputs(), 0.1);
  EXPECT_EQ(fake.calls, 1);
  EXPECT_EQ(fake.count, 8u) << "w [3,2] and b [2] in one flat buffer";
  const auto ga = a.read_gradient(0, alone.info(alone.w)), gb = b.read_gradient(0, shared.info(shared.w));
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_FLOAT_EQ(gb[i], 0.5f * ga[i]);
  // ...and the update used the averaged gradient: w - lr*g/2.
  const auto wb = b.read_parameter(0, shared.info(shared.w));
  const std::vector<float> w0{0.1f, -0.2f, 0.3f, 0.0f, -0.1f, 0.2f};
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_NEAR(wb[i], w0[i] - 0.1f * 0.5f * ga[i], 1e-7);
}

// ---- errors --------------------------------------------------------------------------------------

TEST(ReferenceApi, UnknownOpIsUnimplementedNamingNodeAndOp) {
  Regression r;
  const int32_t z = r.g.value("z", MLPH_DTYPE_F32, {4, 2});
  r.g.node("fancy_op", "mystery_layer", {r.y}, {z});
  const CallResult e = compile_error(r.g.graph());
  EXPECT_EQ(e.code, MLPH_UNIMPLEMENTED);
  EXPECT_NE(e.message.find("mystery_layer"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("fancy_op"), std::string::npos) << e.message;
}

TEST(ReferenceApi, UnknownAttributeIsUnimplemented) {
  Regression r;
  const int32_t z = r.g.value("z", MLPH_DTYPE_F32, {4, 2});
  r.g.node("leaky_relu", "act", {r.y}, {z}, {{"alpha", 0.3}, {"slope_mode", "fancy"}});
  const CallResult e = compile_error(r.g.graph());
  EXPECT_EQ(e.code, MLPH_UNIMPLEMENTED);
  EXPECT_NE(e.message.find("'act'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("slope_mode"), std::string::npos) << e.message;
}

TEST(ReferenceApi, InconsistentShapesAreInvalidNamingNodeAndBothShapes) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {1, 8, 8, 8, 4});
  const int32_t w = g.value("k", MLPH_DTYPE_F32, {3, 3, 3, 4, 16});
  g.parameter(w, std::vector<float>(3 * 3 * 3 * 4 * 16, 0.0f));
  const int32_t y = g.node("conv", "conv1", {x, w}, {g.value("y", MLPH_DTYPE_F32, {1, 8, 8, 8, 16})});
  g.loss(g.node("mse", "loss", {y, y}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.inputs({x});
  g.optimizer("sgd_keras", {{"momentum", 0.9}});
  const CallResult e = compile_error(g.graph());  // no padding: the output is 6^3, not 8^3
  EXPECT_EQ(e.code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(e.message.find("'conv1'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("[1,8,8,8,4]"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("[1,6,6,6,16]"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("[1,8,8,8,16]"), std::string::npos) << e.message;
}

// A spatial op over 2 ranks compiled for one: one line naming the node, the grid and the ranks.
TEST(ReferenceApi, ASpatialGridNeedsItsRanks) {
  sdk::GraphBuilder g;
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {1, 4, 4, 2});
  g.parameter(x, std::vector<float>(32, 0.5f));
  const int32_t y = g.node("halo_exchange", "halo", {x}, {g.value("y", MLPH_DTYPE_F32, {1, 6, 4, 2})},
                           {{"grid", {2, 1}}, {"halo", {1, 0}}});
  g.loss(g.node("mse", "loss", {y, y}, {g.value("loss", MLPH_DTYPE_F32, {})}));
  g.optimizer("sgd_keras", {});
  const CallResult e = compile_error(g.graph());
  EXPECT_EQ(e.code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(e.message, "reference backend: node 'halo' (halo_exchange): grid 2x1 needs 2 ranks; this run has 1");
}

TEST(ReferenceApi, InvalidGraphsAreRejectedAtCompile) {
  {  // the loss must be a scalar
    Regression r;
    r.g.loss(r.y);
    EXPECT_EQ(compile_error(r.g.graph()).code, MLPH_INVALID_ARGUMENT);
  }
  {  // nodes in topological order: a value is used before the node that computes it
    sdk::GraphBuilder g;
    const int32_t x = g.value("x", MLPH_DTYPE_F32, {2, 2}), a = g.value("a", MLPH_DTYPE_F32, {2, 2});
    const int32_t b = g.value("b", MLPH_DTYPE_F32, {2, 2});
    g.node("relu", "second", {a}, {b});
    g.node("relu", "first", {x}, {a});
    g.loss(g.node("mse", "loss", {b, x}, {g.value("loss", MLPH_DTYPE_F32, {})}));
    g.inputs({x});
    g.optimizer("sgd_keras", {});
    const CallResult e = compile_error(g.graph());
    EXPECT_EQ(e.code, MLPH_INVALID_ARGUMENT);
    EXPECT_NE(e.message.find("'second'"), std::string::npos) << e.message;
  }
  {  // parameters are float32
    Regression r;
    const int32_t q = r.g.value("q", MLPH_DTYPE_I16, {2});
    r.g.parameter(q, {0.0f, 0.0f});
    EXPECT_EQ(compile_error(r.g.graph()).code, MLPH_INVALID_ARGUMENT);
  }
  {  // an optimizer it does not know
    Regression r;
    r.g.optimizer("adagrad", {});
    EXPECT_EQ(compile_error(r.g.graph()).code, MLPH_UNIMPLEMENTED);
  }
}

TEST(ReferenceApi, WrongInputsAtTrainStepAreInvalid) {
  Regression r;
  test::Compiled model(r.g.graph());
  std::vector<MLPH_Tensor> in = r.inputs();
  in[0].shape[0] = 3;  // x is [4, 3]
  const CallResult shape = train_error(model, in);
  EXPECT_EQ(shape.code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(shape.message.find("[4,3]"), std::string::npos) << shape.message;
  EXPECT_NE(shape.message.find("[3,3]"), std::string::npos) << shape.message;
  in = r.inputs();
  in[1].dtype = MLPH_DTYPE_F64;
  EXPECT_EQ(train_error(model, in).code, MLPH_INVALID_ARGUMENT);
  in = r.inputs();
  in.pop_back();
  EXPECT_EQ(train_error(model, in).code, MLPH_INVALID_ARGUMENT);
  EXPECT_GT(model.train(r.inputs(), 0.1), 0.0) << "the model still works after rejected calls";
}

TEST(ReferenceApi, Options) {
  const CallResult unknown = create_error({{"threads", "2"}, {"fast", "yes"}});
  EXPECT_EQ(unknown.code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(unknown.message.find("reference backend: unknown option 'fast'"), std::string::npos) << unknown.message;
  EXPECT_EQ(create_error({{"threads", "0"}}).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(create_error({{"threads", "many"}}).code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(create_error({{"threads", "1"}}).code, MLPH_OK);
  EXPECT_EQ(create_error({}).code, MLPH_OK);
  EXPECT_EQ(ReferenceBackend(core::host_api(), sdk::Options()).threads(), sdk::available_cpus());
}

// Its default thread count is the CPUs it may run on (srun --cpu-bind, taskset), not the machine's.
TEST(ReferenceApi, DefaultThreadsFollowTheAffinityMask) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: nothing to restrict";
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const unsigned threads = ReferenceBackend(core::host_api(), sdk::Options()).threads();
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(threads, 1u);
}

// The options every backend shares (sdk/model/compute.hpp): fp32 only, deterministic whether asked or not,
// and the attributes say so.
TEST(ReferenceApi, SharedComputeOptions) {
  EXPECT_EQ(create_error({{"precision", "fp32"}, {"deterministic", "1"}}).code, MLPH_OK);
  EXPECT_EQ(create_error({{"deterministic", "false"}}).code, MLPH_OK);
  const CallResult bf16 = create_error({{"precision", "bf16"}});
  EXPECT_EQ(bf16.code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(bf16.message, "reference backend: option 'precision' is 'bf16'; this backend computes in fp32");
  const CallResult maybe = create_error({{"deterministic", "maybe"}});
  EXPECT_EQ(maybe.message, "reference backend: option 'deterministic' is 'maybe'; expected 0, 1, false or true");

  MLPH_Backend* backend = nullptr;
  const MLPH_KeyValue options[] = {{"deterministic", "0"}};
  core::check(test::api()->create(core::host_api(), options, 1, &backend));
  MLPH_BackendAttributes attributes{};
  attributes.struct_size = sizeof attributes;
  core::check(test::api()->attributes(backend, &attributes));
  EXPECT_STREQ(attributes.precision, "fp32");
  EXPECT_EQ(attributes.deterministic, 1u) << "bitwise repeatable for a fixed thread count, asked or not";
  EXPECT_EQ(attributes.device.type, MLPH_DEVICE_HOST);
  test::api()->destroy(backend);
}

}  // namespace
}  // namespace mlph::reference#include "mlph/sdk/model/backend.hpp"

