// The element-wise bodies (kernels/eltwise.hpp): log1p, activations, the 16-byte vector bodies,
// dropout masks.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

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

}  // namespace
}  // namespace mlph::cuda
