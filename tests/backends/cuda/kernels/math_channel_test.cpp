// The per-channel bodies (kernels/channel.hpp): affine and shift-scale, concat bands, global average
// pool, broadcast.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

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

}  // namespace
}  // namespace mlph::cuda
