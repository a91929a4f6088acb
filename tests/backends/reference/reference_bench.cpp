// reference_bench: throughput of the reference backend's kernels and of a whole CosmoFlow training
// step. Not a test (CTest does not run it); for the numbers in reports.
//   reference_bench conv [edge=32] [cin=32] [cout=64] [threads]   conv k3 'same' GFLOP/s, fwd/bwd
//   reference_bench cosmoflow [edge=128] [batch=1] [threads] [steps=2]   seconds per train step
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ops.hpp"
#include "test_util.hpp"

namespace mlph::reference {
namespace {

template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

int conv(int64_t edge, int64_t cin, int64_t cout, unsigned threads) {
  ThreadPool pool(threads);
  ConvScratch scratch;
  Window g;
  g.in_channels = cin, g.out_channels = cout;
  for (int d = 0; d < 3; ++d) g.in[d] = g.out[d] = edge, g.kernel[d] = 3, g.pad_before[d] = g.pad_after[d] = 1;
  const auto x = test::random_floats(static_cast<size_t>(g.in_positions() * cin), 1);
  const auto w = test::random_floats(static_cast<size_t>(27 * cin * cout), 2, 0.1f);
  const auto b = test::random_floats(static_cast<size_t>(cout), 3);
  const auto dy = test::random_floats(static_cast<size_t>(g.out_positions() * cout), 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  const double gflop = 2 * g.macs() / 1e9;
  const double fwd = best_seconds(5, [&] { conv_forward(pool, scratch, g, x.data(), w.data(), b.data(), y.data()); });
  const double data = best_seconds(5, [&] { conv_backward_data(pool, scratch, g, w.data(), dy.data(), dx.data()); });
  const double weights =
      best_seconds(5, [&] { conv_backward_weights(pool, scratch, g, x.data(), dy.data(), dw.data(), db.data()); });
  std::printf(
      "conv3d %lld^3 x %lld -> %lld, k3, %u threads: forward %.1f GFLOP/s, backward data %.1f, backward weights %.1f\n",
      static_cast<long long>(edge), static_cast<long long>(cin), static_cast<long long>(cout), threads, gflop / fwd,
      gflop / data, gflop / weights);
  return 0;
}

// The CosmoFlow model: 5 x [conv k3 'same' + bias, leaky 0.3, max-pool 2], 4 -> 32 -> ... -> 512
// channels, flatten, dense 128 + leaky + dropout, dense 64 + leaky + dropout, dense 4, tanh, x1.2, mse.
int cosmoflow(int64_t edge, int64_t batch, unsigned threads, int steps) {
  const int64_t input_edge = edge;
  sdk::GraphBuilder g;
  uint64_t stream = 0;
  auto param = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, std::move(shape));
    g.parameter(v, test::random_floats(static_cast<size_t>(sdk::numel(g.value_info(v))), ++stream, scale));
    return v;
  };
  auto value = [&](const std::string& name, std::vector<int64_t> shape) {
    return g.value(name, MLPH_DTYPE_F32, std::move(shape));
  };
  const int32_t counts = g.value("counts", MLPH_DTYPE_I16, {batch, edge, edge, edge, 4});
  int32_t h = g.node("log1p", "log1p", {counts}, {value("log", {batch, edge, edge, edge, 4})});
  int64_t channels = 4;
  for (int i = 1; i <= 5; ++i) {
    const std::string n = "conv" + std::to_string(i);
    const int64_t out = i == 1 ? 32 : channels * 2;
    const int32_t w = param(n + ".w", {3, 3, 3, channels, out}, 0.05f), b = param(n + ".b", {out}, 0.01f);
    h = g.node("conv", n, {h, w, b}, {value(n, {batch, edge, edge, edge, out})}, {{"padding", {1, 1, 1}}});
    h = g.node("leaky_relu", n + ".act", {h}, {value(n + ".act", {batch, edge, edge, edge, out})}, {{"alpha", 0.3}});
    edge /= 2;
    h = g.node("max_pool", n + ".pool", {h}, {value(n + ".pool", {batch, edge, edge, edge, out})},
               {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
    channels = out;
  }
  const int64_t flat = edge * edge * edge * channels;
  h = g.node("reshape", "flatten", {h}, {value("flat", {batch, flat})},
             {{"shape", {static_cast<double>(batch), static_cast<double>(flat)}}});
  int64_t width = flat;
  for (int64_t units : {128, 64}) {
    const std::string n = "dense" + std::to_string(units);
    const int32_t w = param(n + ".w", {width, units}, 0.02f), b = param(n + ".b", {units}, 0.01f);
    h = g.node("dense", n, {h, w, b}, {value(n, {batch, units})});
    h = g.node("leaky_relu", n + ".act", {h}, {value(n + ".act", {batch, units})}, {{"alpha", 0.3}});
    h = g.node("dropout", n + ".drop", {h}, {value(n + ".drop", {batch, units})}, {{"rate", 0.5}});
    width = units;
  }
  const int32_t w = param("out.w", {width, 4}, 0.1f), b = param("out.b", {4}, 0.01f);
  h = g.node("dense", "out", {h, w, b}, {value("out", {batch, 4})});
  h = g.node("tanh", "tanh", {h}, {value("tanh", {batch, 4})});
  h = g.node("scale", "scale", {h}, {value("scale", {batch, 4})}, {{"factor", 1.2}});
  const int32_t target = value("target", {batch, 4});
  g.loss(g.node("mse", "loss", {h, target}, {value("loss", {})}));
  g.inputs({counts, target});
  g.optimizer("sgd_keras", {{"momentum", 0.9}});

  const std::string thread_option = std::to_string(threads);
  test::Compiled model(g.graph(), nullptr, {{"threads", thread_option.c_str()}});
  std::vector<int16_t> data(static_cast<size_t>(sdk::numel(g.value_info(counts))));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int16_t>(mlph_uniform(3, 0, 0, i) * 40);
  std::vector<float> labels = test::random_floats(static_cast<size_t>(batch * 4), 5);
  const std::vector<MLPH_Tensor> inputs{test::tensor_for(g.value_info(counts), data),
                                        test::tensor_for(g.value_info(target), labels)};
  for (int step = 0; step < steps; ++step) {
    double loss = 0;
    const double seconds = best_seconds(1, [&] { loss = model.train(inputs, 1e-3, static_cast<uint64_t>(step)); });
    std::printf("cosmoflow %lld^3 batch %lld, %u threads: step %d took %.2f s (%.2f samples/s), loss %.4f\n",
                static_cast<long long>(input_edge), static_cast<long long>(batch), threads, step, seconds,
                static_cast<double>(batch) / seconds, loss);
  }
  return 0;
}

}  // namespace
}  // namespace mlph::reference

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "conv";
  auto arg = [&](int i, long long fallback) { return argc > i ? std::atoll(argv[i]) : fallback; };
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  if (what == "conv")
    return mlph::reference::conv(arg(2, 32), arg(3, 32), arg(4, 64), static_cast<unsigned>(arg(5, hardware)));
  if (what == "cosmoflow")
    return mlph::reference::cosmoflow(arg(2, 128), arg(3, 1), static_cast<unsigned>(arg(4, hardware)),
                                      static_cast<int>(arg(5, 2)));
  std::fprintf(stderr, "usage: reference_bench conv|cosmoflow [...]\n");
  return 2;
}
