// The cuda backend's kernel bodies (backends/cuda/kernels/*.hpp) run on the CPU, index by index as the
// launchers run them (device_order.hpp), against the reference backend's functions on random inputs.
// Where a body performs the reference's float operations in the reference's order (element-wise ops,
// dropout masks, selections, optimizer updates, per-row losses), its output must have the same bits.
// Where a sum's order differs (the device's sums are cut into parts, the reference's run in a row)
// both sum in double, so the float results differ by at most an ulp or two: those are compared within
// kSumTolerance (relative) and say so.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device_order.hpp"
#include "kernels/batch_norm.hpp"
#include "kernels/channel.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/layout.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/pool.hpp"
#include "kernels/precision.hpp"
#include "ops.hpp"
#include "plan/precision.hpp"
#include "reference_side.hpp"

namespace mlph::cuda {
namespace {

namespace ref = mlph::reference;
using test::each;
using test::each_row_channel;
using test::kSumTolerance;
using test::pool;
using test::random_floats;
using test::special_floats;

std::vector<int32_t> random_labels(size_t n, int32_t classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, classes - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// Same bits, NaNs included (the bodies must produce the reference's NaN, not just a NaN).
void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
        << what << " at " << i << ": " << actual[i] << " vs the reference's " << expected[i];
}

void expect_near(double actual, double expected, const char* what, size_t i = 0) {
  ASSERT_LE(std::fabs(actual - expected), kSumTolerance * (1.0 + std::fabs(expected)))
      << what << " at " << i << ": " << actual << " vs the reference's " << expected;
}
void expect_near(const std::vector<float>& actual, const std::vector<float>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) expect_near(actual[i], expected[i], what, i);
}

// ---- element-wise ----------------------------------------------------------------------------------

constexpr int64_t kN = 3001;

TEST(CudaKernelBodies, Log1pOfFloatsAndOfEveryInt16MatchTheReference) {
  const std::vector<float> x = special_floats(kN, 1);
  std::vector<float> y(kN), expected(kN);
  each(kN, [&](int64_t i) { log1p_forward_at(i, x.data(), y.data()); });
  ref::log1p_forward(pool(), kN, x.data(), expected.data());
  expect_same_bits(y, expected, "log1p");

  // CosmoFlow's int16 counts, every value: the host backends convert to float while loading, then log1p.
  std::vector<int16_t> counts(65536);
  std::vector<float> as_floats(counts.size()), converted(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int16_t>(i), as_floats[i] = counts[i];
  std::vector<float> y16(counts.size()), expected16(counts.size());
  each(65536, [&](int64_t i) { log1p_int16_forward_at(i, counts.data(), y16.data()); });
  each(65536, [&](int64_t i) { int16_to_float_at(i, counts.data(), converted.data()); });
  ref::log1p_forward(pool(), 65536, as_floats.data(), expected16.data());
  expect_same_bits(y16, expected16, "log1p of int16");
  expect_same_bits(converted, as_floats, "int16 to float");
}

TEST(CudaKernelBodies, ActivationsForwardAndAccumulatingBackwardMatchTheReference) {
  const std::vector<float> x = special_floats(kN, 2), dy = special_floats(kN, 3), dx0 = random_floats(kN, 4);
  const float alpha = 0.3f, factor = -1.7f;
  std::vector<float> y(kN), expected(kN), dx, expected_dx;
  auto backward = [&](auto&& body, auto&& reference, const char* what) {
    dx = dx0, expected_dx = dx0;  // backward accumulates: a non-zero start shows it
    each(kN, body);
    reference();
    expect_same_bits(dx, expected_dx, what);
  };

  each(kN, [&](int64_t i) { leaky_relu_forward_at(i, alpha, x.data(), y.data()); });
  ref::leaky_relu_forward(pool(), kN, alpha, x.data(), expected.data());
  expect_same_bits(y, expected, "leaky_relu forward");
  backward([&](int64_t i) { leaky_relu_backward_at(i, alpha, x.data(), dy.data(), dx.data()); },
           [&] { ref::leaky_relu_backward(pool(), kN, alpha, x.data(), dy.data(), expected_dx.data()); },
           "leaky_relu backward");

  each(kN, [&](int64_t i) { relu_forward_at(i, x.data(), y.data()); });
  ref::relu_forward(pool(), kN, x.data(), expected.data());
  expect_same_bits(y, expected, "relu forward (NaN kept)");
  backward([&](int64_t i) { relu_backward_at(i, x.data(), dy.data(), dx.data()); },
           [&] { ref::relu_backward(pool(), kN, x.data(), dy.data(), expected_dx.data()); }, "relu backward");

  each(kN, [&](int64_t i) { tanh_forward_at(i, x.data(), y.data()); });
  ref::tanh_forward(pool(), kN, x.data(), expected.data());
  expect_same_bits(y, expected, "tanh forward");
  backward([&](int64_t i) { tanh_backward_at(i, y.data(), dy.data(), dx.data()); },
           [&] { ref::tanh_backward(pool(), kN, expected.data(), dy.data(), expected_dx.data()); }, "tanh backward");

  each(kN, [&](int64_t i) { scale_forward_at(i, factor, x.data(), y.data()); });
  ref::scale_forward(pool(), kN, factor, x.data(), expected.data());
  expect_same_bits(y, expected, "scale forward");
  backward([&](int64_t i) { scale_backward_at(i, factor, dy.data(), dx.data()); },
           [&] { ref::scale_backward(pool(), kN, factor, dy.data(), expected_dx.data()); }, "scale backward");

  each(kN, [&](int64_t i) { add_forward_at(i, x.data(), dy.data(), y.data()); });
  ref::add_forward(pool(), kN, x.data(), dy.data(), expected.data());
  expect_same_bits(y, expected, "add");
  backward([&](int64_t i) { accumulate_at(i, dy.data(), dx.data()); },
           [&] { ref::copy_backward(pool(), kN, dy.data(), expected_dx.data()); }, "accumulate (copy backward)");
}

// Issue 33 item 7: the 16-byte vector bodies (4 floats a thread) as the vectorized launch runs them,
// the scalar body on the last n % 4 (kN = 3001: one), against the reference: the same bits.
TEST(CudaKernelBodies, VectorizedElementWiseBodiesAreTheReferenceBits) {
  const std::vector<float> x = special_floats(kN, 12), dy = special_floats(kN, 13), dx0 = random_floats(kN, 14);
  const float alpha = 0.3f, factor = -1.7f;
  std::vector<float> y(kN), expected(kN), dx, expected_dx;
  auto run = [&](auto&& vector, auto&& scalar, auto&& reference, bool accumulates, const char* what) {
    dx = dx0, expected_dx = dx0;
    std::fill(y.begin(), y.end(), 9.0f);
    test::each_vectorized<4>(kN, vector, scalar);
    reference();
    if (accumulates) expect_same_bits(dx, expected_dx, what);
    else expect_same_bits(y, expected, what);
  };
  const float *xp = x.data(), *gp = dy.data();
  run([&](int64_t i) { leaky_relu_forward_vec_at<4>(i, alpha, xp, y.data()); },
      [&](int64_t i) { leaky_relu_forward_at(i, alpha, xp, y.data()); },
      [&] { ref::leaky_relu_forward(pool(), kN, alpha, xp, expected.data()); }, false, "leaky_relu forward, 4 a thread");
  run([&](int64_t i) { leaky_relu_backward_vec_at<4>(i, alpha, xp, gp, dx.data()); },
      [&](int64_t i) { leaky_relu_backward_at(i, alpha, xp, gp, dx.data()); },
      [&] { ref::leaky_relu_backward(pool(), kN, alpha, xp, gp, expected_dx.data()); }, true, "leaky_relu backward, 4 a thread");
  run([&](int64_t i) { relu_forward_vec_at<4>(i, xp, y.data()); }, [&](int64_t i) { relu_forward_at(i, xp, y.data()); },
      [&] { ref::relu_forward(pool(), kN, xp, expected.data()); }, false, "relu forward, 4 a thread");
  run([&](int64_t i) { relu_backward_vec_at<4>(i, xp, gp, dx.data()); },
      [&](int64_t i) { relu_backward_at(i, xp, gp, dx.data()); },
      [&] { ref::relu_backward(pool(), kN, xp, gp, expected_dx.data()); }, true, "relu backward, 4 a thread");
  run([&](int64_t i) { tanh_forward_vec_at<4>(i, xp, y.data()); }, [&](int64_t i) { tanh_forward_at(i, xp, y.data()); },
      [&] { ref::tanh_forward(pool(), kN, xp, expected.data()); }, false, "tanh forward, 4 a thread");
  run([&](int64_t i) { tanh_backward_vec_at<4>(i, xp, gp, dx.data()); },
      [&](int64_t i) { tanh_backward_at(i, xp, gp, dx.data()); },
      [&] { ref::tanh_backward(pool(), kN, xp, gp, expected_dx.data()); }, true, "tanh backward, 4 a thread");
  run([&](int64_t i) { scale_forward_vec_at<4>(i, factor, xp, y.data()); },
      [&](int64_t i) { scale_forward_at(i, factor, xp, y.data()); },
      [&] { ref::scale_forward(pool(), kN, factor, xp, expected.data()); }, false, "scale forward, 4 a thread");
  run([&](int64_t i) { scale_backward_vec_at<4>(i, factor, gp, dx.data()); },
      [&](int64_t i) { scale_backward_at(i, factor, gp, dx.data()); },
      [&] { ref::scale_backward(pool(), kN, factor, gp, expected_dx.data()); }, true, "scale backward, 4 a thread");
  run([&](int64_t i) { add_forward_vec_at<4>(i, xp, gp, y.data()); }, [&](int64_t i) { add_forward_at(i, xp, gp, y.data()); },
      [&] { ref::add_forward(pool(), kN, xp, gp, expected.data()); }, false, "add, 4 a thread");
  run([&](int64_t i) { accumulate_vec_at<4>(i, gp, dx.data()); }, [&](int64_t i) { accumulate_at(i, gp, dx.data()); },
      [&] { ref::copy_backward(pool(), kN, gp, expected_dx.data()); }, true, "accumulate, 4 a thread");
  const uint64_t step = 5;
  const DropoutStream d = dropout_stream(0.3, 77, 4);
  std::vector<float> mask(kN);
  ref::dropout_mask(pool(), kN, 0.3, 77, 4, step, mask.data());
  run([&](int64_t i) { dropout_forward_vec_at<4>(i, d, &step, xp, y.data()); },
      [&](int64_t i) { dropout_forward_at(i, d, &step, xp, y.data()); },
      [&] { ref::mask_forward(pool(), kN, mask.data(), xp, expected.data()); }, false, "dropout forward, 4 a thread");
  run([&](int64_t i) { dropout_backward_vec_at<4>(i, d, &step, gp, dx.data()); },
      [&](int64_t i) { dropout_backward_at(i, d, &step, gp, dx.data()); },
      [&] { ref::mask_backward(pool(), kN, mask.data(), gp, expected_dx.data()); }, true, "dropout backward, 4 a thread");
}

// The masks must agree bit for bit with the host backends': same mlph_uniform stream, same double compare.
TEST(CudaKernelBodies, DropoutMasksForwardAndBackwardAreTheReferenceBits) {
  const std::vector<float> x = special_floats(kN, 5), dy = random_floats(kN, 6), dx0 = random_floats(kN, 7);
  const uint64_t seed = 20240611, node = 9;
  for (double rate : {0.0, 0.1, 0.5, 0.875})
    for (uint64_t step : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 40}) {
      const DropoutStream d = dropout_stream(rate, seed, node);
      std::vector<float> mask(kN), expected_mask(kN), y(kN), expected_y(kN), dx = dx0, expected_dx = dx0;
      each(kN, [&](int64_t i) { dropout_mask_at(i, d, &step, mask.data()); });
      ref::dropout_mask(pool(), kN, rate, seed, node, step, expected_mask.data());
      expect_same_bits(mask, expected_mask, "dropout mask");
      each(kN, [&](int64_t i) { dropout_forward_at(i, d, &step, x.data(), y.data()); });
      ref::mask_forward(pool(), kN, expected_mask.data(), x.data(), expected_y.data());
      expect_same_bits(y, expected_y, "dropout forward");
      each(kN, [&](int64_t i) { dropout_backward_at(i, d, &step, dy.data(), dx.data()); });
      ref::mask_backward(pool(), kN, expected_mask.data(), dy.data(), expected_dx.data());
      expect_same_bits(dx, expected_dx, "dropout backward");
    }
}

// ---- per channel and layout ------------------------------------------------------------------------

constexpr int64_t kRows = 203, kChannels = 37;  // channels not a multiple of the 32-wide tiles

TEST(CudaKernelBodies, ChannelAffineAndShiftScaleMatchTheReference) {
  const sdk::program::RowsByChannels s{kRows, kChannels};
  const auto n = static_cast<size_t>(s.size());
  const std::vector<float> x = random_floats(n, 8), dy = random_floats(n, 9), dx0 = random_floats(n, 10);
  const std::vector<float> w = random_floats(kChannels, 11), b = random_floats(kChannels, 12);
  const std::vector<float> dw0 = random_floats(kChannels, 13), db0 = random_floats(kChannels, 14);

  std::vector<float> y(n), expected(n);
  each_row_channel(kRows, kChannels, [&](int64_t r, int64_t c) {
    channel_affine_forward_at(r, c, kChannels, x.data(), w.data(), b.data(), y.data());
  });
  ref::channel_affine_forward(pool(), s, x.data(), w.data(), b.data(), expected.data());
  expect_same_bits(y, expected, "channel_affine forward");

  std::vector<float> dx = dx0, dw = dw0, db = db0, expected_dx = dx0, expected_dw = dw0, expected_db = db0;
  each_row_channel(kRows, kChannels, [&](int64_t r, int64_t c) {
    channel_affine_backward_data_at(r, c, kChannels, w.data(), dy.data(), dx.data());
  });
  const std::vector<double> sums = test::channel_sums(ChannelAffineParamTerm{x.data(), dy.data(), kChannels}, 1,
                                                      kRows, kChannels);
  each(kChannels, [&](int64_t c) { channel_affine_params_at(c, kChannels, sums.data(), dw.data(), db.data()); });
  ref::channel_affine_backward(pool(), s, x.data(), w.data(), dy.data(), expected_dx.data(), expected_dw.data(),
                               expected_db.data());
  expect_same_bits(dx, expected_dx, "channel_affine backward dx");
  expect_near(dw, expected_dw, "channel_affine dw (sums over rows)");
  expect_near(db, expected_db, "channel_affine db (sums over rows)");

  const std::vector<float> shift = random_floats(kChannels, 15), scale = random_floats(kChannels, 16, 0.1f, 3.0f);
  each_row_channel(kRows, kChannels, [&](int64_t r, int64_t c) {
    shift_scale_forward_at(r, c, kChannels, x.data(), shift.data(), scale.data(), y.data());
  });
  ref::shift_scale_forward(pool(), s, x.data(), shift.data(), scale.data(), expected.data());
  expect_same_bits(y, expected, "shift_scale");
}

TEST(CudaKernelBodies, ConcatBandsMatchTheReference) {
  const int64_t rows = 23;
  const std::vector<int64_t> widths = {3, 1, 33};
  const int64_t total = 37;
  std::vector<std::vector<float>> inputs;
  for (size_t k = 0; k < widths.size(); ++k)
    inputs.push_back(random_floats(static_cast<size_t>(rows * widths[k]), 20 + static_cast<uint32_t>(k)));
  std::vector<float> y(static_cast<size_t>(rows * total), -9.0f), expected(y.size());
  int64_t offset = 0;
  for (size_t k = 0; k < widths.size(); offset += widths[k], ++k)
    each_row_channel(rows, widths[k], [&](int64_t r, int64_t c) {
      copy_columns_at(r, c, widths[k], inputs[k].data(), total, offset, y.data());
    });
  ref::concat_forward(pool(), rows, {inputs[0].data(), inputs[1].data(), inputs[2].data()}, widths, expected.data());
  expect_same_bits(y, expected, "concat forward");

  // Backward into the first and last inputs' gradients; the middle one needs none.
  const std::vector<float> dy = random_floats(y.size(), 24);
  std::vector<float> g0 = random_floats(static_cast<size_t>(rows * 3), 25), g2 = random_floats(static_cast<size_t>(rows * 33), 26);
  std::vector<float> e0 = g0, e2 = g2;
  offset = 0;
  for (size_t k = 0; k < widths.size(); offset += widths[k], ++k) {
    float* g = k == 0 ? g0.data() : k == 2 ? g2.data() : nullptr;
    if (g)
      each_row_channel(rows, widths[k],
                       [&](int64_t r, int64_t c) { add_columns_at(r, c, widths[k], dy.data(), total, offset, g); });
  }
  ref::concat_backward(pool(), rows, {e0.data(), nullptr, e2.data()}, widths, dy.data());
  expect_same_bits(g0, e0, "concat backward, first input");
  expect_same_bits(g2, e2, "concat backward, last input");
}

TEST(CudaKernelBodies, GlobalAveragePoolMatchesTheReference) {
  const int64_t batch = 3, positions = 301, channels = 37;
  const auto n = static_cast<size_t>(batch * positions * channels);
  const std::vector<float> x = random_floats(n, 30, -1.0f, 3.0f);
  std::vector<float> y(static_cast<size_t>(batch * channels)), expected(y.size());
  const std::vector<double> sums = test::channel_sums(SumTerm{x.data(), channels}, batch, positions, channels);
  each(batch * channels, [&](int64_t i) { global_avg_pool_finish_at(i, positions, sums.data(), y.data()); });
  ref::global_avg_pool_forward(pool(), batch, positions, channels, x.data(), expected.data());
  expect_near(y, expected, "global_avg_pool forward (sums over positions)");

  const std::vector<float> dy = random_floats(y.size(), 31);
  std::vector<float> dx = random_floats(n, 32), expected_dx = dx;
  const float inverse = 1.0f / static_cast<float>(positions);
  each_row_channel(batch * positions, channels, [&](int64_t r, int64_t c) {
    global_avg_pool_backward_at(r, c, channels, positions, inverse, dy.data(), dx.data());
  });
  ref::global_avg_pool_backward(pool(), batch, positions, channels, dy.data(), expected_dx.data());
  expect_same_bits(dx, expected_dx, "global_avg_pool backward");
}

TEST(CudaKernelBodies, BroadcastForwardAndBackwardMatchTheReference) {
  // DeepCAM's ASPP pooling branch [N,1,1,C] -> [N,H,W,C], and mixed repeats up to rank 5.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 1, 1, 5}, {2, 3, 4, 5}}, {{2, 3, 1, 5}, {2, 3, 4, 5}}, {{2, 1, 4, 1, 3}, {2, 3, 4, 2, 3}}};
  uint32_t seed = 40;
  for (const auto& [in, out] : cases) {
    const BroadcastShape s = broadcast_shape(in, out);
    const int64_t channels = s.channels();
    const std::vector<float> x = random_floats(static_cast<size_t>(s.in_rows() * channels), ++seed);
    std::vector<float> y(static_cast<size_t>(s.out_rows() * channels)), expected(y.size());
    each_row_channel(s.out_rows(), channels,
                     [&](int64_t r, int64_t c) { broadcast_forward_at(r, c, s, x.data(), y.data()); });
    ref::broadcast_forward(pool(), in, out, x.data(), expected.data());
    expect_same_bits(y, expected, "broadcast forward");

    const std::vector<float> dy = random_floats(y.size(), ++seed);
    std::vector<float> dx = random_floats(x.size(), ++seed), expected_dx = dx;
    each_row_channel(s.in_rows(), channels,
                     [&](int64_t q, int64_t c) { broadcast_backward_at(q, c, s, dy.data(), dx.data()); });
    ref::broadcast_backward(pool(), in, out, dy.data(), expected_dx.data());
    expect_same_bits(dx, expected_dx, "broadcast backward (sums in the reference's order)");
  }
}

// ---- batch normalization ---------------------------------------------------------------------------

struct BatchNormRun {
  std::vector<float> y, saved, running_mean, running_var;
};

// The training forward as the launchers run it: sum, [allreduce], mean, variance, [allreduce], finalize,
// apply. `ranks` > 1 splits the rows among that many ranks and sums their stats between the passes, as
// a SyncBatchNorm group's allreduce would; each rank keeps (identical) running statistics.
BatchNormRun batch_norm_forward(const std::vector<float>& x, int64_t rows, int64_t channels, int ranks,
                                const std::vector<float>& gamma, const std::vector<float>& beta,
                                const std::vector<float>& running_mean, const std::vector<float>& running_var,
                                double eps, double momentum) {
  const int64_t mine = rows / ranks;
  std::vector<std::vector<double>> stats(static_cast<size_t>(ranks), std::vector<double>(2 * channels + 1));
  auto allreduce = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double sum = 0;
      for (auto& s : stats) sum += s[static_cast<size_t>(i)];
      for (auto& s : stats) s[static_cast<size_t>(i)] = sum;
    }
  };
  for (int k = 0; k < ranks; ++k) {
    const float* xk = x.data() + k * mine * channels;
    const std::vector<double> sums = test::channel_sums(SumTerm{xk, channels}, 1, mine, channels);
    std::copy(sums.begin(), sums.end(), stats[static_cast<size_t>(k)].begin());
    stats[static_cast<size_t>(k)][static_cast<size_t>(channels)] = static_cast<double>(mine);
  }
  if (ranks > 1) allreduce(0, channels + 1);
  for (int k = 0; k < ranks; ++k) {
    double* sk = stats[static_cast<size_t>(k)].data();
    each(channels, [&](int64_t c) { batch_norm_mean_at(c, channels, sk); });
    const std::vector<double> deviations =
        test::channel_sums(BatchNormDeviationTerm{x.data() + k * mine * channels, sk, channels}, 1, mine, channels);
    std::copy(deviations.begin(), deviations.end(), sk + channels + 1);
  }
  if (ranks > 1) allreduce(channels + 1, 2 * channels + 1);
  BatchNormRun run{std::vector<float>(x.size()), std::vector<float>(2 * channels), running_mean, running_var};
  for (int k = 0; k < ranks; ++k) {
    std::vector<float> scale_shift(2 * channels), rm = running_mean, rv = running_var;
    each(channels, [&](int64_t c) {
      batch_norm_finalize_at(c, channels, eps, momentum, stats[static_cast<size_t>(k)].data(), gamma.data(),
                             beta.data(), rm.data(), rv.data(), run.saved.data(), scale_shift.data());
    });
    each_row_channel(mine, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.data() + k * mine * channels, scale_shift.data(),
                          run.y.data() + k * mine * channels);
    });
    run.running_mean = rm, run.running_var = rv;
  }
  return run;
}

TEST(CudaKernelBodies, BatchNormTrainingForwardMatchesTheReference) {
  const int64_t rows = 400, channels = 37;
  const std::vector<float> x = random_floats(static_cast<size_t>(rows * channels), 50, 1.0f, 4.0f);
  const std::vector<float> gamma = random_floats(channels, 51), beta = random_floats(channels, 52);
  const std::vector<float> rm = random_floats(channels, 53), rv = random_floats(channels, 54, 0.5f, 2.0f);
  const sdk::program::BatchNormAttrs a{1e-3, 0.1, 1};
  std::vector<float> expected_y(x.size()), expected_saved(2 * channels), expected_rm = rm, expected_rv = rv;
  ref::batch_norm_train_forward(pool(), {rows, channels}, a, x.data(), gamma.data(), beta.data(), expected_rm.data(),
                                expected_rv.data(), expected_saved.data(), expected_y.data());
  // One rank, and a SyncBatchNorm group of 4 whose batches together are the reference's.
  for (int ranks : {1, 4}) {
    const BatchNormRun run = batch_norm_forward(x, rows, channels, ranks, gamma, beta, rm, rv, a.eps, a.momentum);
    expect_near(run.y, expected_y, "batch_norm y (statistics summed over rows)");
    expect_near(run.saved, expected_saved, "batch_norm saved mean and inverse std");
    expect_near(run.running_mean, expected_rm, "batch_norm running_mean");
    expect_near(run.running_var, expected_rv, "batch_norm running_var (unbiased)");
  }
}

TEST(CudaKernelBodies, BatchNormEvaluationIsTheReferenceBits) {
  const int64_t rows = 100, channels = 37;
  const std::vector<float> x = random_floats(static_cast<size_t>(rows * channels), 55);
  const std::vector<float> gamma = random_floats(channels, 56), beta = random_floats(channels, 57);
  const std::vector<float> rm = random_floats(channels, 58), rv = random_floats(channels, 59, 0.5f, 2.0f);
  std::vector<float> scale_shift(2 * channels), y(x.size()), expected(x.size());
  each(channels, [&](int64_t c) {
    batch_norm_eval_coefficients_at(c, channels, 1e-5, gamma.data(), beta.data(), rm.data(), rv.data(),
                                    scale_shift.data());
  });
  each_row_channel(rows, channels,
                   [&](int64_t r, int64_t c) { batch_norm_apply_at(r, c, channels, x.data(), scale_shift.data(), y.data()); });
  ref::batch_norm_eval_forward(pool(), {rows, channels}, {1e-5, 0.1, 1}, x.data(), gamma.data(), beta.data(),
                               rm.data(), rv.data(), expected.data());
  expect_same_bits(y, expected, "batch_norm evaluation");
}

TEST(CudaKernelBodies, BatchNormBackwardMatchesTheReferenceAloneAndInAGroup) {
  const int64_t rows = 400, channels = 37;
  const auto n = static_cast<size_t>(rows * channels);
  const std::vector<float> x = random_floats(n, 60, -1.0f, 2.0f), dy = random_floats(n, 61);
  const std::vector<float> gamma = random_floats(channels, 62), beta = random_floats(channels, 63);
  std::vector<float> rm(channels, 0.0f), rv(channels, 1.0f), saved(2 * channels), y(n);
  ref::batch_norm_train_forward(pool(), {rows, channels}, {1e-5, 0.1, 1}, x.data(), gamma.data(), beta.data(),
                                rm.data(), rv.data(), saved.data(), y.data());
  const std::vector<float> dx0 = random_floats(n, 64), dgamma0 = random_floats(channels, 65),
                           dbeta0 = random_floats(channels, 66);
  std::vector<float> expected_dx = dx0, expected_dgamma = dgamma0, expected_dbeta = dbeta0;
  ref::batch_norm_backward(pool(), {rows, channels}, x.data(), gamma.data(), saved.data(), dy.data(),
                           expected_dx.data(), expected_dgamma.data(), expected_dbeta.data());

  // As the launchers run: sums, this rank's dgamma/dbeta, [allreduce of the sums], coefficients, dx. In a
  // group of 2, dx must be the whole batch's; each rank's dgamma and dbeta its own rows' share (the
  // reference's backward over those rows alone, with the same statistics).
  for (int ranks : {1, 2}) {
    const int64_t mine = rows / ranks;
    std::vector<std::vector<double>> sums;
    std::vector<float> dx = dx0;
    for (int k = 0; k < ranks; ++k) {
      const size_t first = static_cast<size_t>(k * mine * channels);
      sums.push_back(test::channel_sums(BatchNormBackwardTerm{x.data() + first, dy.data() + first, saved.data(), channels},
                                        1, mine, channels));
      sums.back().push_back(static_cast<double>(mine));
      std::vector<float> dgamma = dgamma0, dbeta = dbeta0;
      each(channels, [&](int64_t c) {
        batch_norm_backward_params_at(c, channels, sums.back().data(), dgamma.data(), dbeta.data());
      });
      std::vector<float> own_dgamma = dgamma0, own_dbeta = dbeta0;
      ref::batch_norm_backward(pool(), {mine, channels}, x.data() + first, gamma.data(), saved.data(),
                               dy.data() + first, nullptr, own_dgamma.data(), own_dbeta.data());
      expect_near(dgamma, own_dgamma, "batch_norm dgamma (sums over rows)");
      expect_near(dbeta, own_dbeta, "batch_norm dbeta (sums over rows)");
    }
    for (size_t i = 0; i < sums[0].size(); ++i) {  // the group's allreduce
      double total = 0;
      for (auto& s : sums) total += s[i];
      for (auto& s : sums) s[i] = total;
    }
    for (int k = 0; k < ranks; ++k) {
      const size_t first = static_cast<size_t>(k * mine * channels);
      std::vector<float> coefficients(3 * channels);
      each(channels, [&](int64_t c) {
        batch_norm_backward_coefficients_at(c, channels, sums[static_cast<size_t>(k)].data(), gamma.data(),
                                            saved.data(), coefficients.data());
      });
      each_row_channel(mine, channels, [&](int64_t r, int64_t c) {
        batch_norm_backward_data_at(r, c, channels, x.data() + first, dy.data() + first, saved.data(),
                                    coefficients.data(), dx.data() + first);
      });
    }
    expect_near(dx, expected_dx, "batch_norm dx (sums over rows)");
  }
  if (HasFatalFailure()) return;
  // The whole batch's parameter gradients, as one rank has them.
  std::vector<double> sums = test::channel_sums(BatchNormBackwardTerm{x.data(), dy.data(), saved.data(), channels}, 1,
                                                rows, channels);
  std::vector<float> dgamma = dgamma0, dbeta = dbeta0;
  each(channels, [&](int64_t c) { batch_norm_backward_params_at(c, channels, sums.data(), dgamma.data(), dbeta.data()); });
  expect_near(dgamma, expected_dgamma, "batch_norm dgamma, whole batch");
  expect_near(dbeta, expected_dbeta, "batch_norm dbeta, whole batch");
}

// ---- max pooling -----------------------------------------------------------------------------------

sdk::program::Window pool_window(int64_t batch, std::array<int64_t, 3> in, std::array<int64_t, 3> kernel,
                              std::array<int64_t, 3> stride, int64_t channels) {
  sdk::program::Window g;
  g.batch = batch, g.in_channels = g.out_channels = channels;
  for (int d = 0; d < 3; ++d) {
    g.in[d] = in[static_cast<size_t>(d)], g.kernel[d] = kernel[static_cast<size_t>(d)];
    g.stride[d] = stride[static_cast<size_t>(d)];
    g.out[d] = (g.in[d] - g.kernel[d]) / g.stride[d] + 1;
  }
  return g;
}

TEST(CudaKernelBodies, MaxPoolTiesNansAndOverlapsAreTheReferenceBits) {
  // CosmoFlow's 2x2x2 / 2 (with a ragged edge no window covers), and overlapping 2-D windows.
  const sdk::program::Window windows[] = {pool_window(2, {5, 6, 7}, {2, 2, 2}, {2, 2, 2}, 3),
                                       pool_window(2, {1, 7, 9}, {1, 3, 3}, {1, 2, 2}, 5),
                                       pool_window(1, {1, 6, 5}, {1, 2, 2}, {1, 1, 1}, 2)};
  uint32_t seed = 70;
  int tiling = 0;
  for (const sdk::program::Window& g : windows) {
    const PoolShape s = pool_shape(g);
    // Small integers make ties common; a few NaNs must win their windows (and take the gradient).
    std::mt19937 gen(++seed);
    std::vector<float> x(static_cast<size_t>(g.in_positions() * g.in_channels));
    for (float& v : x) v = static_cast<float>(gen() % 4);
    for (size_t i = 5; i < x.size(); i += 97) x[i] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> y(static_cast<size_t>(g.out_positions() * g.out_channels)), expected(y.size());
    each_row_channel(s.out_positions(), s.channels,
                     [&](int64_t pos, int64_t c) { max_pool_forward_at(pos, c, s, x.data(), y.data()); });
    ref::max_pool_forward(pool(), g, x.data(), expected.data());
    expect_same_bits(y, expected, "max_pool forward");

    const std::vector<float> dy = random_floats(y.size(), ++seed);
    std::vector<float> dx = random_floats(x.size(), ++seed);
    for (size_t i = 0; i < dx.size(); i += 3) dx[i] = -0.0f;  // the reference's + 0 for losers turns these to +0
    std::vector<float> expected_dx = dx;
    const std::vector<float> dx0 = dx;
    each_row_channel(s.in_positions(), s.channels,
                     [&](int64_t p, int64_t c) { max_pool_backward_at(p, c, s, x.data(), dy.data(), dx.data()); });
    ref::max_pool_backward(pool(), g, x.data(), dy.data(), expected_dx.data());
    expect_same_bits(dx, expected_dx, "max_pool backward");
    if (!pool_windows_tile(s)) continue;
    // Tiling windows: a thread per window instead of per element of dx, the same bits (the ragged
    // edge that no window covers left alone).
    std::vector<float> tiled = dx0;
    each_row_channel(s.out_positions(), s.channels,
                     [&](int64_t pos, int64_t c) { max_pool_backward_tiled_at(pos, c, s, x.data(), dy.data(), tiled.data()); });
    expect_same_bits(tiled, expected_dx, "max_pool backward, a thread per window");
    ++tiling;
  }
  EXPECT_EQ(tiling, 1) << "CosmoFlow's 2x2x2 / 2 tiles; the others overlap or leave gaps";
}

// ---- losses and metrics ----------------------------------------------------------------------------

TEST(CudaKernelBodies, MseAndAbsErrorMatchTheReference) {
  const int64_t n = 20011;  // several parts of the flat sums
  const std::vector<float> p = random_floats(n, 80), t = random_floats(n, 81);
  const float mse = mse_loss(test::flat_sums(MseTerm{p.data(), t.data()}, n)[0], n);
  expect_near(mse, static_cast<float>(ref::mse_forward(pool(), n, p.data(), t.data())), "mse (sum over elements)");
  const auto abs_sum = static_cast<float>(test::flat_sums(AbsErrorTerm{p.data(), t.data()}, n)[0]);
  expect_near(abs_sum, static_cast<float>(ref::abs_error_sum(pool(), n, p.data(), t.data())), "abs_error_sum");

  const float dloss = 0.75f;  // not 1: the loss's gradient must be used
  std::vector<float> dp = random_floats(n, 82), dt = random_floats(n, 83), expected_dp = dp, expected_dt = dt;
  each(n, [&](int64_t i) { mse_backward_at(i, n, &dloss, p.data(), t.data(), dp.data(), dt.data()); });
  ref::mse_backward(pool(), n, p.data(), t.data(), dloss, expected_dp.data(), expected_dt.data());
  expect_same_bits(dp, expected_dp, "mse backward, prediction");
  expect_same_bits(dt, expected_dt, "mse backward, target");
}

TEST(CudaKernelBodies, WeightedSoftmaxCrossEntropyMatchesTheReference) {
  for (int64_t classes : {3, 7}) {
    const int64_t rows = 9001;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows * classes), 90, -6.0f, 6.0f);
    const std::vector<int32_t> labels = random_labels(static_cast<size_t>(rows), static_cast<int32_t>(classes), 91);
    const std::vector<float> weights = random_floats(static_cast<size_t>(classes), 92, 0.1f, 5.0f);
    const SoftmaxCrossEntropyTerm term{logits.data(), labels.data(), weights.data(), classes};
    const float loss = softmax_cross_entropy_loss(test::flat_sums(term, rows)[0], rows);
    const double expected =
        ref::softmax_cross_entropy_forward(pool(), {rows, classes}, logits.data(), labels.data(), weights.data());
    expect_near(loss, static_cast<float>(expected), "softmax_cross_entropy (sum over rows)");

    // Per row in double with the same libm calls: the same bits on the host (exp/log differ on a device).
    const float dloss = 1.25f;
    std::vector<float> dz = random_floats(logits.size(), 93), expected_dz = dz;
    each(rows, [&](int64_t r) {
      softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &dloss,
                                        dz.data());
    });
    ref::softmax_cross_entropy_backward(pool(), {rows, classes}, logits.data(), labels.data(), weights.data(), dloss,
                                        expected_dz.data());
    expect_same_bits(dz, expected_dz, "softmax_cross_entropy backward");
  }
}

TEST(CudaKernelBodies, CrossEntropyWithALabelOutOfRangeIsNanAndReadsNothingOutside) {
  const int64_t rows = 4, classes = 3;
  // A fourth weight past the three classes': a body reading class_weights[3] would find it, not fault.
  const std::vector<float> logits = random_floats(rows * classes, 95), weights = {1.0f, 2.0f, 3.0f, 7.0f};
  const std::vector<int32_t> labels = {0, 2, 3, 1};  // 3 is outside [0, 3)
  const SoftmaxCrossEntropyTerm term{logits.data(), labels.data(), weights.data(), classes};
  EXPECT_TRUE(std::isnan(softmax_cross_entropy_loss(test::flat_sums(term, rows)[0], rows)));
  const float dloss = 1.0f;
  std::vector<float> dz(rows * classes, 0.0f);
  each(rows, [&](int64_t r) {
    softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &dloss,
                                      dz.data());
  });
  for (int64_t c = 0; c < classes; ++c) EXPECT_EQ(dz[static_cast<size_t>(2 * classes + c)], 0.0f) << c;
  EXPECT_NE(dz[0], 0.0f);
  EXPECT_FALSE(label_ok(-1, classes));
  EXPECT_TRUE(label_ok(2, classes));
}

TEST(CudaKernelBodies, IouCountsAndScoresAreTheReferenceBits) {
  // 4 classes: ties in the logits (the lowest class wins), and class 3 never predicted nor labelled in
  // sample 0 (it counts 1/C).
  const int64_t batch = 3, pixels = 517, classes = 4, rows = batch * pixels;
  std::mt19937 gen(100);
  std::vector<float> logits(static_cast<size_t>(rows * classes));
  for (float& v : logits) v = static_cast<float>(gen() % 3);
  std::vector<int32_t> labels = random_labels(static_cast<size_t>(rows), 4, 101);
  for (int64_t r = 0; r < pixels; ++r) {
    logits[static_cast<size_t>(r * classes + 3)] = -5.0f;
    labels[static_cast<size_t>(r)] %= 3;
  }
  const std::vector<double> counts =
      test::channel_sums(IouCountTerm{logits.data(), labels.data(), classes}, batch, pixels, classes);
  std::vector<float> iou(batch), expected(batch);
  each(batch, [&](int64_t n) { iou_finish_at(n, classes, counts.data(), iou.data()); });
  ref::iou_forward(pool(), {rows, classes}, batch, logits.data(), labels.data(), expected.data());
  expect_same_bits(iou, expected, "iou");
}

// ---- optimizers over the flat trainable buffers ----------------------------------------------------

// Four trainable tensors of DeepCAM-like variety, chunked small so that tensors span several chunks.
struct FlatParams {
  std::vector<TensorSlice> slices;
  std::vector<double> multipliers;  // MLPH_Parameter.weight_decay
  ChunkTable table;
  int64_t n = 0;

  FlatParams() {
    const int64_t counts[] = {5, 700, 1, 2049};
    const double decay[] = {1.0, 0.0, 0.5, 1.0};
    for (size_t t = 0; t < std::size(counts); ++t) {
      slices.push_back({n, counts[t]});
      multipliers.push_back(decay[t]);
      n += counts[t];
    }
    table = make_chunks(slices, 256);
  }
  template <class F>
  void each_chunk(F&& body) const {
    for (const Chunk& chunk : table.chunks)
      for (int64_t i = chunk.begin; i < chunk.end; ++i) body(i, chunk.tensor);
  }
};

TEST(CudaKernelBodies, ChunksCoverEveryTensorInOrderWithoutStraddling) {
  const std::vector<TensorSlice> slices = {{0, 5}, {5, 0}, {5, 600}, {605, 256}, {861, 1}};
  const ChunkTable table = make_chunks(slices, 256);
  ASSERT_EQ(table.first_chunk, (std::vector<int64_t>{0, 1, 1, 4, 5, 6}));
  int64_t next = 0;
  for (size_t b = 0; b < table.chunks.size(); ++b) {
    const Chunk& chunk = table.chunks[b];
    const TensorSlice& slice = slices[static_cast<size_t>(chunk.tensor)];
    EXPECT_EQ(chunk.begin, next) << b;
    EXPECT_GT(chunk.end, chunk.begin) << b;
    EXPECT_LE(chunk.end - chunk.begin, 256) << b;
    EXPECT_GE(chunk.begin, slice.offset) << b;
    EXPECT_LE(chunk.end, slice.offset + slice.count) << b;
    EXPECT_GE(static_cast<int64_t>(b), table.first_chunk[static_cast<size_t>(chunk.tensor)]) << b;
    EXPECT_LT(static_cast<int64_t>(b), table.first_chunk[static_cast<size_t>(chunk.tensor) + 1]) << b;
    next = chunk.end;
  }
  EXPECT_EQ(next, 862);
}

TEST(CudaKernelBodies, SgdKerasStepsAreTheReferenceBits) {
  const FlatParams p;
  std::vector<float> w = random_floats(static_cast<size_t>(p.n), 110), velocity(static_cast<size_t>(p.n), 0.0f);
  std::vector<float> expected_w = w, expected_velocity = velocity;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = random_floats(static_cast<size_t>(p.n), 111 + static_cast<uint32_t>(step));
    const double lr = 0.01 * (step + 1), momentum = 0.9;
    const SgdScalars k = sgd_scalars(lr, momentum);
    each(p.n, [&](int64_t i) { sgd_keras_at(i, k, g.data(), velocity.data(), w.data()); });
    ref::sgd_keras_update(pool(), p.n, lr, momentum, g.data(), expected_velocity.data(), expected_w.data());
  }
  expect_same_bits(w, expected_w, "sgd_keras weights");
  expect_same_bits(velocity, expected_velocity, "sgd_keras velocity");
}

TEST(CudaKernelBodies, AdamAndAdamWStepsWithPerTensorDecayAreTheReferenceBits) {
  const FlatParams p;
  const sdk::program::AdamAttrs attrs{0.9, 0.999, 1e-8, 0.01, 1.0};
  for (bool decoupled : {false, true}) {
    std::vector<float> w = random_floats(static_cast<size_t>(p.n), 120), m(w.size(), 0.0f), v(w.size(), 0.0f);
    std::vector<float> expected_w = w, expected_m = m, expected_v = v;
    for (uint64_t t = 1; t <= 3; ++t) {
      const std::vector<float> g = random_floats(w.size(), 121 + static_cast<uint32_t>(t));
      const double lr = 1e-3 * static_cast<double>(t);
      std::vector<AdamScalars> scalars;
      for (size_t i = 0; i < p.slices.size(); ++i)
        scalars.push_back(adam_scalars(lr, attrs.beta1, attrs.beta2, attrs.eps, t,
                                       attrs.weight_decay * p.multipliers[i], decoupled));
      p.each_chunk([&](int64_t i, int32_t tensor) {
        adam_at(i, scalars[static_cast<size_t>(tensor)], g.data(), m.data(), v.data(), w.data());
      });
      for (size_t i = 0; i < p.slices.size(); ++i) {
        const size_t o = static_cast<size_t>(p.slices[i].offset);
        ref::adam_update(pool(), p.slices[i].count, lr, attrs, t, attrs.weight_decay * p.multipliers[i], decoupled,
                         g.data() + o, expected_m.data() + o, expected_v.data() + o, expected_w.data() + o);
      }
    }
    expect_same_bits(w, expected_w, decoupled ? "adamw weights" : "adam weights");
    expect_same_bits(m, expected_m, "adam m");
    expect_same_bits(v, expected_v, "adam v");
  }
}

// LAMB's clip and trust ratios come from sums of squares (the device sums per chunk): within kSumTolerance.
TEST(CudaKernelBodies, LambStepsWithClippingAndTrustRatiosMatchTheReference) {
  const FlatParams p;
  const sdk::program::AdamAttrs attrs{0.9, 0.999, 1e-6, 0.01, 0.5};  // max_grad_norm 0.5: the gradients are clipped
  std::vector<float> w = random_floats(static_cast<size_t>(p.n), 130), m(w.size(), 0.0f), v(w.size(), 0.0f);
  std::vector<float> expected_w = w, expected_m = m, expected_v = v, update(w.size()), scratch(w.size());
  for (uint64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_floats(w.size(), 131 + static_cast<uint32_t>(t));
    const double lr = 2e-3 * static_cast<double>(t);
    std::vector<LambScalars> scalars;
    for (size_t i = 0; i < p.slices.size(); ++i)
      scalars.push_back(lamb_scalars(lr, attrs.beta1, attrs.beta2, attrs.eps, t, attrs.weight_decay * p.multipliers[i]));

    // 1. the gradients' square sum (per chunk, chunks in order) and the clip;
    const std::vector<double> squares =
        test::chunk_sums<1>(p.table, [&](int64_t i, int32_t, double* s) { s[0] = square(g[static_cast<size_t>(i)]); });
    double square_sum = 0;
    for (double s : squares) square_sum += s;
    const float clip = lamb_clip(square_sum, attrs.max_grad_norm);
    // 2. moments and update, summing ||p||^2 and ||u||^2 per chunk; 3. per tensor the step; 4. apply.
    const std::vector<double> norms = test::chunk_sums<2>(p.table, [&](int64_t i, int32_t tensor, double* s) {
      lamb_moments_at(i, scalars[static_cast<size_t>(tensor)], clip, g.data(), m.data(), v.data(), w.data(),
                      update.data());
      s[0] = square(w[static_cast<size_t>(i)]), s[1] = square(update[static_cast<size_t>(i)]);
    });
    std::vector<float> steps;
    for (size_t i = 0; i < p.slices.size(); ++i) {
      double p_square = 0, u_square = 0;
      for (int64_t b = p.table.first_chunk[i]; b < p.table.first_chunk[i + 1]; ++b)
        p_square += norms[static_cast<size_t>(2 * b)], u_square += norms[static_cast<size_t>(2 * b + 1)];
      steps.push_back(lamb_step(scalars[i], p_square, u_square));
    }
    p.each_chunk([&](int64_t i, int32_t tensor) {
      lamb_apply_at(i, steps[static_cast<size_t>(tensor)], update.data(), w.data());
    });

    const double norm = ref::l2_norm(pool(), p.n, g.data());
    ASSERT_GT(norm, attrs.max_grad_norm) << "the test means to clip";
    const float expected_clip = static_cast<float>(norm / attrs.max_grad_norm);
    expect_near(clip, expected_clip, "lamb clip");
    for (size_t i = 0; i < p.slices.size(); ++i) {
      const size_t o = static_cast<size_t>(p.slices[i].offset);
      ref::lamb_update(pool(), p.slices[i].count, lr, attrs, t, attrs.weight_decay * p.multipliers[i], expected_clip,
                       g.data() + o, expected_m.data() + o, expected_v.data() + o, expected_w.data() + o,
                       scratch.data());
    }
  }
  expect_near(w, expected_w, "lamb weights");
  expect_near(m, expected_m, "lamb m");
  expect_near(v, expected_v, "lamb v");
}

TEST(CudaKernelBodies, L2GradientIsTheReferenceBitsAndPenaltyItsSum) {
  const FlatParams p;
  const std::vector<double> l2 = {1e-4, 0.0, 0.5, 2e-3};
  const std::vector<float> w = random_floats(static_cast<size_t>(p.n), 140);
  std::vector<float> dw = random_floats(w.size(), 141), expected_dw = dw;
  const std::vector<double> squares = test::chunk_sums<1>(p.table, [&](int64_t i, int32_t tensor, double* s) {
    const double l = l2[static_cast<size_t>(tensor)];
    s[0] = 0;
    if (l == 0) return;
    l2_gradient_at(i, l, w.data(), dw.data());
    s[0] = square(w[static_cast<size_t>(i)]);
  });
  double penalty = 0, expected_penalty = 0;
  for (size_t t = 0; t < p.slices.size(); ++t) {
    if (l2[t] == 0) continue;
    double sum = 0;
    for (int64_t b = p.table.first_chunk[t]; b < p.table.first_chunk[t + 1]; ++b) sum += squares[static_cast<size_t>(b)];
    penalty += l2[t] * sum;
    const size_t o = static_cast<size_t>(p.slices[t].offset);
    expected_penalty += ref::l2_penalty(pool(), p.slices[t].count, l2[t], w.data() + o);
    ref::l2_backward(pool(), p.slices[t].count, l2[t], w.data() + o, expected_dw.data() + o);
  }
  expect_same_bits(dw, expected_dw, "l2 gradient");
  EXPECT_NEAR(penalty, expected_penalty, 1e-12 * expected_penalty) << "l2 penalty (double sums, reordered)";
}

// ---- mixed precision -------------------------------------------------------------------------------

// The nearest of two neighbours, ties to the even one: what round-to-nearest-even must give. `up` may
// be one past the largest finite value, standing for the overflow to Inf.
template <class Bits>
Bits nearest_even(double value, Bits down, double down_value, Bits up, double up_value) {
  const double below = value - down_value, above = up_value - value;
  if (below < above) return down;
  if (above < below) return up;
  return (down & 1) ? up : down;
}

TEST(CudaKernelBodies, BFloat16RoundsToNearestEvenAndBackExactly) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000};
  for (uint32_t high = 0; high < 0x10000; ++high)
    for (uint32_t low : lows) {
      const uint32_t bits = high << 16 | low;
      const float f = std::bit_cast<float>(bits);
      const uint16_t h = float_to_bfloat16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(bfloat16_to_float(h))) << std::hex << bits;
        ASSERT_EQ(h & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
        continue;
      }
      // Magnitudes: truncation, and the next bfloat16 away from zero (2^128 past the largest finite).
      const uint16_t down = static_cast<uint16_t>(high);
      const double down_value = std::fabs(static_cast<double>(bfloat16_to_float(down)));
      const double up_value = (high & 0x7fff) == 0x7f7f ? std::ldexp(1.0, 128)
                                                         : std::fabs(static_cast<double>(bfloat16_to_float(
                                                               static_cast<uint16_t>(high + 1))));
      if ((high & 0x7fff) >= 0x7f80) {  // Inf stays Inf
        ASSERT_EQ(h, down) << std::hex << bits;
        continue;
      }
      const uint16_t expected =
          nearest_even(std::fabs(static_cast<double>(f)), down, down_value, static_cast<uint16_t>(high + 1), up_value);
      ASSERT_EQ(h, expected) << std::hex << bits;
      if (low == 0) {
        ASSERT_EQ(bfloat16_to_float(h), f) << std::hex << bits;  // exact values round-trip
      }
    }
}

#ifdef __FLT16_MANT_DIG__
// Against the compiler's IEEE binary16 conversions: every half, and around each midpoint between two.
TEST(CudaKernelBodies, Float16RoundsToNearestEvenLikeTheCompilersFloat16) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    const float next = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h + 1)));
    const float mid = h + 1 == 0x7c00 ? 65520.0f : (v + next) / 2;  // exact: 12 significant bits
    for (float f : {v, std::nextafter(v, 0.0f), std::nextafter(v, 1e30f), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e30f)})
      probes.push_back(f), probes.push_back(-f);
  }
  for (float f : {1e30f, 65519.99f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                  1e-8f, 2.98e-8f, 2.9802322e-8f, 2.9802326e-8f})
    probes.push_back(f), probes.push_back(-f);
  for (float f : probes) {
    const auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(float_to_half(f), expected) << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const float expected = static_cast<float>(std::bit_cast<_Float16>(half));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(half_to_float(half))) << h;
      ASSERT_TRUE(std::isnan(bits_float(float_bits(half_to_float(half))))) << h;
      ASSERT_EQ(float_to_half(half_to_float(half)) & 0x7e00, 0x7e00) << h;  // a NaN stays a (quiet) NaN
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(half_to_float(half)), std::bit_cast<uint32_t>(expected)) << h;
    }
  }
}
#endif

TEST(CudaKernelBodies, UnscaleCountsNonFiniteGradientsAndDividesByTheScale) {
  std::vector<float> g = random_floats(kN, 150, -1000.0f, 1000.0f);
  g[10] = std::numeric_limits<float>::infinity(), g[2000] = std::numeric_limits<float>::quiet_NaN();
  g[2999] = -std::numeric_limits<float>::infinity();
  const std::vector<float> before = g;
  const float scale = 1024.0f;
  const double nonfinite = test::flat_sums(UnscaleTerm{g.data(), &scale}, kN)[0];
  EXPECT_EQ(nonfinite, 3.0);
  for (size_t i = 0; i < g.size(); ++i)
    if (std::isfinite(before[i])) {
      ASSERT_EQ(g[i], before[i] / 1024.0f) << i;
    }
}

TEST(CudaKernelBodies, LossScaleBacksOffOnOverflowAndGrowsAfterTheInterval) {
  const LossScaleRule rule{2.0, 0.5, 3};
  float scale = 65536.0f;
  int32_t good = 0;
  loss_scale_step(rule, 1.0, &scale, &good);
  EXPECT_EQ(scale, 32768.0f);
  EXPECT_EQ(good, 0);
  loss_scale_step(rule, 0.0, &scale, &good);
  loss_scale_step(rule, 0.0, &scale, &good);
  EXPECT_EQ(scale, 32768.0f);
  EXPECT_EQ(good, 2);
  loss_scale_step(rule, 0.0, &scale, &good);  // the third good step in a row
  EXPECT_EQ(scale, 65536.0f);
  EXPECT_EQ(good, 0);
  scale = std::numeric_limits<float>::max();
  good = 2;
  loss_scale_step(rule, 0.0, &scale, &good);  // growing would overflow: kept
  EXPECT_EQ(scale, std::numeric_limits<float>::max());
  EXPECT_EQ(good, 0);
}

// The device's rule and the host's (plan::LossScaler, which keeps the state for checkpoints) are one
// rule: the same scale and count after every step of a long run with overflows, non-power-of-two
// factors included.
TEST(CudaKernelBodies, LossScaleStepIsThePlansLossScaler) {
  for (const LossScaleRule rule : {LossScaleRule{}, LossScaleRule{3.0, 0.3, 7}}) {
    plan::LossScaler host({65536.0f, rule.growth, rule.backoff, rule.interval});
    float scale = host.scale();
    int32_t good = 0;
    std::mt19937 gen(160);
    for (int step = 0; step < 20000; ++step) {
      const bool overflow = gen() % 500 == 0 || (step > 15000 && gen() % 3 == 0);
      host.update(overflow);
      loss_scale_step(rule, overflow ? 1.0 : 0.0, &scale, &good);
      ASSERT_EQ(std::bit_cast<uint32_t>(scale), std::bit_cast<uint32_t>(host.scale())) << step;
      ASSERT_EQ(good, host.good_steps()) << step;
    }
    EXPECT_NE(host.scale(), 65536.0f) << "the run means to move the scale";
  }
}

// ---- the reductions' shapes -----------------------------------------------------------------------

TEST(CudaKernelBodies, ReductionPartsDependOnSizesOnlyAndFitTheirWorkspace) {
  // DeepCAM-sized batch norms, a single channel, CosmoFlow's tiny loss.
  EXPECT_EQ(channel_parts(1, 2 * 768 * 1152, 64), 512);
  EXPECT_EQ(channel_parts(1, 2 * 48 * 72, 2048), 16);
  EXPECT_EQ(channel_parts(1, 100, 1), 1);
  EXPECT_EQ(channel_parts(1, int64_t{1} << 40, 1), 1024);
  EXPECT_EQ(flat_parts(4), 1);
  EXPECT_EQ(flat_parts(8193), 2);
  EXPECT_EQ(flat_parts(56'000'000), 1024);
  // The workspace holds the partials and the sums of K <= 3 terms.
  const int64_t parts = channel_parts(4, 1000, 40);
  EXPECT_EQ(channel_sums_workspace_bytes(4, 1000, 40), static_cast<size_t>((parts + 1) * 4 * 3 * 40) * sizeof(double));
  EXPECT_EQ(flat_sums_workspace_bytes(20000), static_cast<size_t>(4 * 3) * sizeof(double));
}

// ---- layout and types around cuDNN and cuBLASLt ---------------------------------------------------

TEST(CudaKernelBodies, ConvertsRoundToNearestEvenAndCastAndAddAddsTheRoundedValue) {
  const std::vector<float> x = special_floats(200, 31);
  for (FloatType to : {FloatType::bf16, FloatType::f16}) {
    std::vector<uint16_t> half(x.size());
    each(static_cast<int64_t>(x.size()), [&](int64_t i) { convert_at(i, FloatType::f32, x.data(), to, half.data()); });
    std::vector<float> back(x.size()), sum(x.size(), 1.0f), expected(x.size()), expected_sum(x.size());
    each(static_cast<int64_t>(x.size()), [&](int64_t i) {
      convert_at(i, to, half.data(), FloatType::f32, back.data());
      convert_add_at(i, to, half.data(), sum.data());
    });
    for (size_t i = 0; i < x.size(); ++i) {
      expected[i] = to == FloatType::bf16 ? bfloat16_to_float(float_to_bfloat16(x[i])) : half_to_float(float_to_half(x[i]));
      expected_sum[i] = 1.0f + expected[i];
    }
    expect_same_bits(back, expected, to == FloatType::bf16 ? "bf16 round trip" : "f16 round trip");
    expect_same_bits(sum, expected_sum, "cast and add");
  }
  std::vector<float> copy(x.size());  // f32 to f32: the same bits, NaN included
  each(static_cast<int64_t>(x.size()), [&](int64_t i) { convert_at(i, FloatType::f32, x.data(), FloatType::f32, copy.data()); });
  expect_same_bits(copy, x, "f32 copy");
}

// A deterministic pointwise-conv dw (plan::DensePlan's chunks): 3 partial products of 35 rows each,
// as cuBLASLt's strided batch writes them (fp32 [in, out] each), added to dw in chunk order: the
// fp32 sum in that order bit for bit, and within float rounding of the whole dw = x^T dy.
TEST(CudaKernelBodies, ChunkedWeightGradientPartialsAddInChunkOrder) {
  const int64_t rows = 105, in = 5, out = 3, chunks = 3, per = rows / chunks, count = in * out;
  const std::vector<float> x = random_floats(rows * in, 41), dy = random_floats(rows * out, 42);
  std::vector<float> partials(static_cast<size_t>(chunks * count));
  std::vector<double> exact(static_cast<size_t>(count), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0;
        for (int64_t r = c * per; r < (c + 1) * per; ++r)
          sum += static_cast<double>(x[static_cast<size_t>(r * in + i)]) * dy[static_cast<size_t>(r * out + o)];
        partials[static_cast<size_t>(c * count + i * out + o)] = static_cast<float>(sum);
        exact[static_cast<size_t>(i * out + o)] += sum;
      }
  const std::vector<float> start = random_floats(count, 43);
  std::vector<float> dw = start;
  each(count, [&](int64_t i) { chunk_sum_add_at(i, chunks, count, partials.data(), dw.data()); });
  for (int64_t i = 0; i < count; ++i) {
    const auto at = static_cast<size_t>(i);
    float in_order = partials[at];
    for (int64_t c = 1; c < chunks; ++c) in_order += partials[static_cast<size_t>(c * count + i)];
    ASSERT_EQ(dw[at], start[at] + in_order) << i;
    EXPECT_NEAR(dw[at], start[at] + exact[at], 1e-5 * (1 + std::fabs(exact[at]))) << i;
  }
}

// Padded channels (plan::ConvPlan::channels): CosmoFlow's 4 input channels cast into 8 with zeros
// past them, DeepCAM's 8-wide half output cropped to its 3 classes and cast up, a padded half weight
// gradient cropped and added into the fp32 one; 7 rows (odd), widths not multiples of 8 either way.
TEST(CudaKernelBodies, ChannelsPadWithZerosCropAndAddAcrossTypes) {
  const int64_t rows = 7;
  const std::vector<float> x4 = random_floats(rows * 4, 51);
  std::vector<uint16_t> x8(rows * 8, 0xffff);
  each(rows * 8, [&](int64_t i) { channels_copy_at(i, 4, 8, FloatType::f32, x4.data(), FloatType::bf16, x8.data(), false); });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 8; ++c)
      ASSERT_EQ(x8[static_cast<size_t>(r * 8 + c)], c < 4 ? float_to_bfloat16(x4[static_cast<size_t>(r * 4 + c)]) : 0) << r << " " << c;
  std::vector<float> y3(rows * 3, -1.0f);
  each(rows * 3, [&](int64_t i) { channels_copy_at(i, 8, 3, FloatType::bf16, x8.data(), FloatType::f32, y3.data(), false); });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 3; ++c)
      ASSERT_EQ(y3[static_cast<size_t>(r * 3 + c)], bfloat16_to_float(float_to_bfloat16(x4[static_cast<size_t>(r * 4 + c)])));
  std::vector<float> sum(rows * 3, 0.5f);
  each(rows * 3, [&](int64_t i) { channels_copy_at(i, 8, 3, FloatType::bf16, x8.data(), FloatType::f32, sum.data(), true); });
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], 0.5f + y3[i]) << i;
  std::vector<float> padded(rows * 5, -1.0f);  // fp32 to fp32, 3 -> 5
  each(rows * 5, [&](int64_t i) { channels_copy_at(i, 3, 5, FloatType::f32, y3.data(), FloatType::f32, padded.data(), false); });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 5; ++c)
      ASSERT_EQ(padded[static_cast<size_t>(r * 5 + c)], c < 3 ? y3[static_cast<size_t>(r * 3 + c)] : 0.0f);
}

TEST(CudaKernelBodies, BoxCopiesPadAnInputAndCropItsGradientBack) {
  // x [2, 3, 4, 2] (a 2-D input: depth 1) into a zeroed padded [2, 5, 5, 2] at offset (1, 0): one row
  // of padding above, one below, one column after.
  Box pad;
  pad.batch = 2, pad.channels = 2;
  pad.src[1] = 3, pad.src[2] = 4, pad.dst[1] = 5, pad.dst[2] = 5;
  pad.extent[1] = 3, pad.extent[2] = 4, pad.dst_offset[1] = 1, pad.dst_offset[2] = 0;
  const std::vector<float> x = random_floats(2 * 3 * 4 * 2, 33);
  std::vector<float> padded(2 * 5 * 5 * 2, 0.0f);
  each(pad.size(), [&](int64_t i) { box_copy_at(i, pad, FloatType::f32, x.data(), FloatType::f32, padded.data(), false); });
  auto at = [](int64_t n, int64_t h, int64_t w, int64_t c, int64_t H, int64_t W) { return static_cast<size_t>(((n * H + h) * W + w) * 2 + c); };
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 5; ++h)
      for (int64_t w = 0; w < 5; ++w)
        for (int64_t c = 0; c < 2; ++c) {
          const bool inside = h >= 1 && h < 4 && w < 4;
          ASSERT_EQ(padded[at(n, h, w, c, 5, 5)], inside ? x[at(n, h - 1, w, c, 3, 4)] : 0.0f) << n << h << w << c;
        }
  // Cropping is the same box read the other way, added into fp32 (from bf16 here).
  Box crop = pad;
  std::swap(crop.src[1], crop.dst[1]), std::swap(crop.src[2], crop.dst[2]);
  std::swap(crop.src_offset[1], crop.dst_offset[1]), std::swap(crop.src_offset[2], crop.dst_offset[2]);
  std::vector<uint16_t> padded_half(padded.size());
  each(static_cast<int64_t>(padded.size()), [&](int64_t i) { convert_at(i, FloatType::f32, padded.data(), FloatType::bf16, padded_half.data()); });
  std::vector<float> dx(x.size(), 0.5f);
  each(crop.size(), [&](int64_t i) { box_copy_at(i, crop, FloatType::bf16, padded_half.data(), FloatType::f32, dx.data(), true); });
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(dx[i], 0.5f + bfloat16_to_float(float_to_bfloat16(x[i]))) << i;
}

TEST(CudaKernelBodies, BiasForwardAddsPerChannelAndItsGradientIsTheChannelSum) {
  const int64_t rows = 700, channels = 5;
  const std::vector<float> b = random_floats(channels, 34), dy = random_floats(rows * channels, 35);
  std::vector<float> y = random_floats(rows * channels, 36), expected = y;
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) { bias_forward_at(r, c, channels, b.data(), y.data()); });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) expected[static_cast<size_t>(r * channels + c)] += b[static_cast<size_t>(c)];
  expect_same_bits(y, expected, "bias forward");
  const std::vector<double> sums = test::channel_sums(SumTerm{dy.data(), channels}, 1, rows, channels);
  std::vector<float> db(channels, 2.0f);
  each(channels, [&](int64_t c) { bias_backward_at(c, sums.data(), db.data()); });
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += dy[static_cast<size_t>(r * channels + c)];
    EXPECT_NEAR(db[static_cast<size_t>(c)], 2.0f + static_cast<float>(sum), kSumTolerance * (1 + std::fabs(sum))) << c;
  }
}

TEST(CudaKernelBodies, TheFirstBadLabelOfAnyStepStaysLatched) {
  const std::vector<int32_t> labels = {0, 1, 7, -3};
  int64_t latched[2] = {-1, 0};
  const int64_t none = -1, third = 2, fourth = 3;
  latch_bad_label(&none, labels.data(), latched);
  EXPECT_EQ(latched[0], -1);
  latch_bad_label(&third, labels.data(), latched);
  EXPECT_EQ(latched[0], 2);
  EXPECT_EQ(latched[1], 7);
  latch_bad_label(&fourth, labels.data(), latched);  // a later step's does not replace it
  latch_bad_label(&none, labels.data(), latched);
  EXPECT_EQ(latched[0], 2);
  EXPECT_EQ(latched[1], 7);
}

}  // namespace
}  // namespace mlph::cuda
