// reference_bench: throughput of the reference backend's kernels and of a whole CosmoFlow training
// step. Not a test (CTest does not run it); for the numbers in reports.
//   reference_bench conv [edge=32] [cin=32] [cout=64] [threads]   conv k3 'same' GFLOP/s, fwd/bwd
//   reference_bench conv2d [h=48] [w=72] [cin=128] [cout=128] [groups=128] [k=3] [dilation=1] [batch=2] [threads]
//   reference_bench deepcam_ops [batch=2] [threads]   the DeepCAM ops at DeepCAM-mini shapes, ms per call
//   reference_bench cosmoflow [edge=128] [batch=1] [threads] [steps=2]   seconds per train step
#include <array>
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
  Scratch scratch;
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

// A 2-D conv k x k 'same' (padding = dilation), stride 1, on [batch, h, w, cin]: forward and both backward passes.
// groups == cin == cout is DeepCAM's depthwise conv.
int conv2d(int64_t h, int64_t w_, int64_t cin, int64_t cout, int64_t groups, int64_t kernel, int64_t dilation,
           int64_t batch, unsigned threads) {
  ThreadPool pool(threads);
  Scratch scratch;
  Window g;
  g.batch = batch, g.in_channels = cin, g.out_channels = cout, g.groups = groups;
  g.in[1] = g.out[1] = h, g.in[2] = g.out[2] = w_;
  for (int d = 1; d < 3; ++d)
    g.kernel[d] = kernel, g.dilation[d] = dilation, g.pad_before[d] = g.pad_after[d] = dilation * (kernel / 2);
  const auto x = test::random_floats(static_cast<size_t>(g.in_positions() * cin), 1);
  const auto w = test::random_floats(static_cast<size_t>(g.taps() * cin / groups * cout), 2, 0.1f);
  const auto dy = test::random_floats(static_cast<size_t>(g.out_positions() * cout), 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(static_cast<size_t>(cout));
  const double fwd = best_seconds(5, [&] { conv_forward(pool, scratch, g, x.data(), w.data(), nullptr, y.data()); });
  const double data = best_seconds(5, [&] { conv_backward_data(pool, scratch, g, w.data(), dy.data(), dx.data()); });
  const double weights =
      best_seconds(5, [&] { conv_backward_weights(pool, scratch, g, x.data(), dy.data(), dw.data(), db.data()); });
  std::printf(
      "conv2d [%lld,%lld,%lld,%lld] -> %lld, k%lld d%lld groups %lld, %u threads: forward %.3f ms, "
      "backward data %.3f ms, backward weights %.3f ms (%.2f GFLOP/s overall)\n",
      static_cast<long long>(batch), static_cast<long long>(h), static_cast<long long>(w_), static_cast<long long>(cin),
      static_cast<long long>(cout), static_cast<long long>(kernel), static_cast<long long>(dilation),
      static_cast<long long>(groups), threads, fwd * 1e3, data * 1e3, weights * 1e3,
      3 * 2 * g.macs() / 1e9 / (fwd + data + weights));
  return 0;
}

// The DeepCAM ops at DeepCAM-mini shapes (input 96x144, so the encoder runs at 6x9 and the decoder up to 96x144):
// milliseconds per call, best of 5.
int deepcam_ops(int64_t batch, unsigned threads) {
  ThreadPool pool(threads);
  Scratch scratch;
  auto report = [&](const std::string& what, double seconds) {
    std::printf("%-58s %9.3f ms\n", what.c_str(), seconds * 1e3);
  };
  auto floats = [](int64_t n, uint64_t stream) { return test::random_floats(static_cast<size_t>(n), stream); };
  std::printf("deepcam ops, batch %lld, %u threads\n", static_cast<long long>(batch), threads);
  // ConvTranspose2d(k3, s2, p1, output_padding 1): Ci -> Co from h x w to 2h x 2w.
  for (const auto& [h, w, ci, co] : {std::array<int64_t, 4>{12, 18, 256, 256}, std::array<int64_t, 4>{24, 36, 256, 256},
                                     std::array<int64_t, 4>{48, 72, 256, 3}}) {
    Window g;
    g.batch = batch, g.in_channels = co, g.out_channels = ci;
    g.out[1] = h, g.out[2] = w, g.in[1] = 2 * h, g.in[2] = 2 * w;
    for (int d = 1; d < 3; ++d) g.kernel[d] = 3, g.stride[d] = 2, g.pad_before[d] = 1, g.pad_after[d] = 0;
    const auto x = floats(g.out_positions() * ci, 1), wt = floats(9 * ci * co, 2),
               dy = floats(g.in_positions() * co, 3);
    std::vector<float> y(dy.size()), dx(x.size()), dw(wt.size());
    const std::string shape = "[" + std::to_string(batch) + "," + std::to_string(h) + "," + std::to_string(w) + "," +
                              std::to_string(ci) + "] -> " + std::to_string(co);
    report("conv_transpose fwd " + shape,
           best_seconds(5, [&] { conv_transpose_forward(pool, scratch, g, x.data(), wt.data(), nullptr, y.data()); }));
    report("conv_transpose bwd " + shape, best_seconds(5, [&] {
             conv_transpose_backward(pool, scratch, g, x.data(), wt.data(), dy.data(), dx.data(), dw.data(), nullptr);
           }));
  }
  for (const auto& [h, w, c] :
       {std::array<int64_t, 3>{6, 9, 728}, std::array<int64_t, 3>{48, 72, 128}, std::array<int64_t, 3>{24, 36, 256}}) {
    const RowsByChannels s{batch * h * w, c};
    const auto x = floats(s.size(), 4), dy = floats(s.size(), 5), gamma = floats(c, 6), beta = floats(c, 7);
    std::vector<float> y(x.size()), dx(x.size()), mean(static_cast<size_t>(c)), var(mean.size(), 1.0f),
        saved(2 * mean.size()), dg(mean.size()), db(mean.size());
    const std::string shape =
        "[" + std::to_string(batch) + "," + std::to_string(h) + "," + std::to_string(w) + "," + std::to_string(c) + "]";
    report("batch_norm train fwd " + shape, best_seconds(5, [&] {
             batch_norm_train_forward(pool, s, {}, x.data(), gamma.data(), beta.data(), mean.data(), var.data(),
                                      saved.data(), y.data());
           }));
    report("batch_norm bwd " + shape, best_seconds(5, [&] {
             batch_norm_backward(pool, s, x.data(), gamma.data(), saved.data(), dy.data(), dx.data(), dg.data(),
                                 db.data());
           }));
    report("add " + shape, best_seconds(5, [&] { add_forward(pool, s.size(), x.data(), dy.data(), y.data()); }));
    report("channel_affine fwd " + shape,
           best_seconds(5, [&] { channel_affine_forward(pool, s, x.data(), gamma.data(), beta.data(), y.data()); }));
    report("channel_affine bwd " + shape, best_seconds(5, [&] {
             channel_affine_backward(pool, s, x.data(), gamma.data(), dy.data(), dx.data(), dg.data(), db.data());
           }));
  }
  {  // the decoder's concat [x, low level] = 256 + 48 channels at 24x36, and the ASPP pooling branch on 2048 at 6x9
    const int64_t rows = batch * 24 * 36;
    const auto a = floats(rows * 256, 8), b = floats(rows * 48, 9);
    std::vector<float> y(static_cast<size_t>(rows * 304)), da(a.size()), db(b.size());
    report("concat fwd 256+48 at 24x36", best_seconds(5, [&] {
             concat_forward(pool, rows, {a.data(), b.data()}, {256, 48}, y.data());
           }));
    report("concat bwd 256+48 at 24x36", best_seconds(5, [&] {
             concat_backward(pool, rows, {da.data(), db.data()}, {256, 48}, y.data());
           }));
    const auto x = floats(batch * 54 * 2048, 10);
    std::vector<float> pooled(static_cast<size_t>(batch * 2048)), dx(x.size());
    report("global_avg_pool fwd [6x9, 2048]",
           best_seconds(5, [&] { global_avg_pool_forward(pool, batch, 54, 2048, x.data(), pooled.data()); }));
    report("global_avg_pool bwd [6x9, 2048]",
           best_seconds(5, [&] { global_avg_pool_backward(pool, batch, 54, 2048, pooled.data(), dx.data()); }));
    const std::vector<int64_t> in{batch, 1, 1, 256}, out{batch, 6, 9, 256};
    std::vector<float> tiled(static_cast<size_t>(batch * 54 * 256));
    report("broadcast fwd [1x1 -> 6x9, 256]",
           best_seconds(5, [&] { broadcast_forward(pool, in, out, pooled.data(), tiled.data()); }));
    report("broadcast bwd [1x1 -> 6x9, 256]",
           best_seconds(5, [&] { broadcast_backward(pool, in, out, tiled.data(), dx.data()); }));
  }
  {  // loss and metric on the logits [batch, 96, 144, 3]
    const RowsByChannels s{batch * 96 * 144, 3};
    const auto logits = floats(s.size(), 11);
    std::vector<int32_t> labels(static_cast<size_t>(s.rows));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 3);
    const std::vector<float> weights{1.0f, 2.6f, 1.7f};
    std::vector<float> dl(logits.size()), iou(static_cast<size_t>(batch));
    report("softmax_cross_entropy fwd [96x144, 3]", best_seconds(5, [&] {
             softmax_cross_entropy_forward(pool, s, logits.data(), labels.data(), weights.data());
           }));
    report("softmax_cross_entropy bwd [96x144, 3]", best_seconds(5, [&] {
             softmax_cross_entropy_backward(pool, s, logits.data(), labels.data(), weights.data(), 1.0f, dl.data());
           }));
    report("iou [96x144, 3]",
           best_seconds(5, [&] { iou_forward(pool, s, batch, logits.data(), labels.data(), iou.data()); }));
  }
  {  // optimizer updates over 1M parameters
    const int64_t n = 1 << 20;
    const auto g = floats(n, 12);
    std::vector<float> w = floats(n, 13), m(static_cast<size_t>(n)), v(m.size()), u(m.size());
    const AdamAttrs a{0.9, 0.999, 1e-6, 0.01, 1.0};
    report("adamw update, 1M parameters", best_seconds(5, [&] {
             adam_update(pool, n, 1e-3, a, 1, 0.01, true, g.data(), m.data(), v.data(), w.data());
           }));
    report("lamb update, 1M parameters", best_seconds(5, [&] {
             lamb_update(pool, n, 1e-3, a, 1, 0.01, 1.0f, g.data(), m.data(), v.data(), w.data(), u.data());
           }));
  }
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
  if (what == "conv2d")
    return mlph::reference::conv2d(arg(2, 48), arg(3, 72), arg(4, 128), arg(5, 128), arg(6, 128), arg(7, 3), arg(8, 1),
                                   arg(9, 2), static_cast<unsigned>(arg(10, hardware)));
  if (what == "deepcam_ops") return mlph::reference::deepcam_ops(arg(2, 2), static_cast<unsigned>(arg(3, hardware)));
  if (what == "cosmoflow")
    return mlph::reference::cosmoflow(arg(2, 128), arg(3, 1), static_cast<unsigned>(arg(4, hardware)),
                                      static_cast<int>(arg(5, 2)));
  std::fprintf(stderr, "usage: reference_bench conv|conv2d|deepcam_ops|cosmoflow [...]\n");
  return 2;
}
