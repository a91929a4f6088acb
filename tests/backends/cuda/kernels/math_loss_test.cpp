// Losses and metrics (kernels/loss.hpp): mse and absolute error, weighted softmax cross entropy,
// labels out of range, IoU.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

std::vector<int32_t> random_labels(size_t n, int32_t classes, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, classes - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

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

// The losses as their input's first writer (plan::first_writer_overwrites): over whatever the
// gradient held, the bits of a memset and the adding body, a row with a bad label included (zeros).
TEST(CudaKernelBodies, LossesAsFirstWritersAreAMemsetAndAnAdd) {
  const int64_t n = 1001;
  const std::vector<float> p = random_floats(n, 84), t = random_floats(n, 85);
  const float dloss = 0.75f;
  for (unsigned first : {1u, 2u, 3u}) {
    std::vector<float> dp = random_floats(n, 86), dt = random_floats(n, 87), expected_dp = dp, expected_dt = dt;
    if (first & 1u) std::fill(expected_dp.begin(), expected_dp.end(), 0.0f);
    if (first & 2u) std::fill(expected_dt.begin(), expected_dt.end(), 0.0f);
    each(n, [&](int64_t i) { mse_backward_at(i, n, &dloss, p.data(), t.data(), expected_dp.data(), expected_dt.data()); });
    each(n, [&](int64_t i) { mse_backward_at(i, n, &dloss, p.data(), t.data(), dp.data(), dt.data(), first); });
    expect_same_bits(dp, expected_dp, "mse backward, prediction written first");
    expect_same_bits(dt, expected_dt, "mse backward, target written first");
  }

  const int64_t rows = 501, classes = 3;
  const std::vector<float> logits = random_floats(static_cast<size_t>(rows * classes), 96, -6.0f, 6.0f);
  std::vector<int32_t> labels = random_labels(static_cast<size_t>(rows), static_cast<int32_t>(classes), 97);
  labels[7] = 3, labels[400] = -1;  // bad: no gradient, so zeros in a gradient written first
  const std::vector<float> weights = random_floats(static_cast<size_t>(classes), 98, 0.1f, 5.0f);
  std::vector<float> dz = random_floats(logits.size(), 99), expected(logits.size(), 0.0f);
  each(rows, [&](int64_t r) {
    softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &dloss,
                                      expected.data());
    softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &dloss, dz.data(),
                                      false);
  });
  expect_same_bits(dz, expected, "softmax_cross_entropy backward written first");
  EXPECT_EQ(dz[7 * classes + 1], 0.0f);
  EXPECT_NE(dz[8 * classes + 1], 0.0f);
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

}  // namespace
}  // namespace mlph::cuda
