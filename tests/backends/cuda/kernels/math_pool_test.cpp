// Max pooling (kernels/pool.hpp): ties, NaNs and overlapping windows.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

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

}  // namespace
}  // namespace mlph::cuda
