// The fused kernels (kernels/fused.hpp), fp32 and bf16: batch-norm apply + ReLU, add + ReLU; and
// batch norm's passes in bf16 (kernels/batch_norm.hpp), which take the same training statistics.
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

// Each (r, c) of a V-channel body over [rows, C].
template <int V, class Body>
void each_row_vector(int64_t rows, int64_t channels, Body&& body) {
  test::each_row_channel(rows, channels / V, [&](int64_t r, int64_t v) { body(r, v * V); });
}

// The training forward's per-channel statistics as the launchers compute them (batch_norm.hpp).
struct Statistics {
  std::vector<float> saved, scale_shift;
};
Statistics training_statistics(const std::vector<float>& x, int64_t rows, int64_t channels,
                               const std::vector<float>& gamma, const std::vector<float>& beta) {
  std::vector<double> stats(static_cast<size_t>(2 * channels + 1));
  const std::vector<double> sums = test::channel_sums(SumTerm{x.data(), channels}, 1, rows, channels);
  std::copy(sums.begin(), sums.end(), stats.begin());
  stats[static_cast<size_t>(channels)] = static_cast<double>(rows);
  each(channels, [&](int64_t c) { batch_norm_mean_at(c, channels, stats.data()); });
  const std::vector<double> deviations =
      test::channel_sums(BatchNormDeviationTerm{x.data(), stats.data(), channels}, 1, rows, channels);
  std::copy(deviations.begin(), deviations.end(), stats.begin() + channels + 1);
  Statistics s{std::vector<float>(static_cast<size_t>(2 * channels)), std::vector<float>(static_cast<size_t>(2 * channels))};
  std::vector<float> rm(static_cast<size_t>(channels), 0.0f), rv(static_cast<size_t>(channels), 1.0f);
  each(channels, [&](int64_t c) {
    batch_norm_finalize_at(c, channels, 1e-5, 0.1, stats.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                           s.saved.data(), s.scale_shift.data());
  });
  return s;
}

// Evaluation (running statistics) is the reference's bits; the fused pass equals batch norm then ReLU.
template <int V>
void batch_norm_relu_forward_matches(int64_t channels) {
  const std::vector<float> x = special_floats(static_cast<size_t>(kRows * channels), 11);
  const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 12);
  const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 13);
  const std::vector<float> rm = random_floats(static_cast<size_t>(channels), 14);
  const std::vector<float> rv = random_floats(static_cast<size_t>(channels), 15, 0.5f, 2.0f);
  std::vector<float> scale_shift(static_cast<size_t>(2 * channels)), y(x.size(), -3.0f), normalized(x.size()),
      expected(x.size());
  each(channels, [&](int64_t c) {
    batch_norm_eval_coefficients_at(c, channels, 1e-5, gamma.data(), beta.data(), rm.data(), rv.data(), scale_shift.data());
  });
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    batch_norm_relu_apply_at<V>(r, c, channels, x.data(), scale_shift.data(), y.data());
  });
  ref::batch_norm_eval_forward(pool(), {kRows, channels}, {1e-5, 0.1, 1}, x.data(), gamma.data(), beta.data(), rm.data(),
                               rv.data(), normalized.data());
  ref::relu_forward(pool(), kRows * channels, normalized.data(), expected.data());
  expect_same_bits(y, expected, "batch norm + relu (evaluation), C " + std::to_string(channels) + ", V " + std::to_string(V));
}

TEST(CudaOwnKernels, BatchNormReluForwardIsBatchNormThenReluBits) {
  batch_norm_relu_forward_matches<1>(13);
  batch_norm_relu_forward_matches<1>(20);
  batch_norm_relu_forward_matches<4>(20);
}

// Backward with the mask recomputed from x: the reference's relu backward (into a zeroed gradient) then
// its batch-norm backward, on the same statistics; sums reordered, so within kSumTolerance.
TEST(CudaOwnKernels, BatchNormReluBackwardIsReluThenBatchNormBackward) {
  for (const int64_t channels : {13, 20}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(kRows * channels), 21);
    const std::vector<float> dy = random_floats(x.size(), 22);
    const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 23);
    const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 24);
    const Statistics st = training_statistics(x, kRows, channels, gamma, beta);
    // Ours, fused: sums, parameters, data.
    const std::vector<double> sums = [&] {
      std::vector<double> s = test::channel_sums(
          BatchNormReluBackwardTerm{x.data(), dy.data(), st.saved.data(), st.scale_shift.data(), channels}, 1, kRows,
          channels);
      s.push_back(static_cast<double>(kRows));
      return s;
    }();
    std::vector<float> dgamma(static_cast<size_t>(channels), 0.5f), dbeta(dgamma), dx = random_floats(x.size(), 25);
    std::vector<float> coefficients(static_cast<size_t>(3 * channels));
    std::vector<float> expected_dgamma = dgamma, expected_dbeta = dbeta, expected_dx = dx;
    each(channels, [&](int64_t c) { batch_norm_backward_params_at(c, channels, sums.data(), dgamma.data(), dbeta.data()); });
    each(channels, [&](int64_t c) {
      batch_norm_backward_coefficients_at(c, channels, sums.data(), gamma.data(), st.saved.data(), coefficients.data());
    });
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_relu_backward_data_at(r, c, channels, x.data(), dy.data(), st.saved.data(), st.scale_shift.data(),
                                       coefficients.data(), dx.data());
    });
    // The reference's two ops on the same statistics: ReLU's input is the forward's normalized x.
    std::vector<float> normalized(x.size()), d_normalized(x.size(), 0.0f);
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.data(), st.scale_shift.data(), normalized.data());
    });
    ref::relu_backward(pool(), kRows * channels, normalized.data(), dy.data(), d_normalized.data());
    ref::batch_norm_backward(pool(), {kRows, channels}, x.data(), gamma.data(), st.saved.data(), d_normalized.data(),
                             expected_dx.data(), expected_dgamma.data(), expected_dbeta.data());
    const std::string what = "batch norm + relu backward, C " + std::to_string(channels);
    expect_near(dx, std::vector<double>(expected_dx.begin(), expected_dx.end()), kSumTolerance, what + " dx");
    expect_near(dgamma, std::vector<double>(expected_dgamma.begin(), expected_dgamma.end()), kSumTolerance, what + " dgamma");
    expect_near(dbeta, std::vector<double>(expected_dbeta.begin(), expected_dbeta.end()), kSumTolerance, what + " dbeta");
  }
}

template <int V>
void add_relu_matches(int64_t channels) {
  const std::vector<float> a = special_floats(static_cast<size_t>(kRows * channels), 31);
  const std::vector<float> b = special_floats(a.size(), 32);
  const std::vector<float> dy = special_floats(a.size(), 33);
  std::vector<float> y(a.size(), -1.0f), sum(a.size()), expected(a.size());
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) { add_relu_forward_at<V>(r, c, channels, a.data(), b.data(), y.data()); });
  ref::add_forward(pool(), kRows * channels, a.data(), b.data(), sum.data());
  ref::relu_forward(pool(), kRows * channels, sum.data(), expected.data());
  const std::string what = "add + relu, C " + std::to_string(channels) + ", V " + std::to_string(V);
  expect_same_bits(y, expected, what);
  // Backward from y: da, db accumulate; a null gradient is skipped.
  std::vector<float> da = random_floats(a.size(), 34), db = random_floats(a.size(), 35), d_sum(a.size(), 0.0f);
  std::vector<float> expected_da = da, expected_db = db, untouched = db;
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, y.data(), dy.data(), da.data(), db.data());
  });
  ref::relu_backward(pool(), kRows * channels, sum.data(), dy.data(), d_sum.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_db.data());
  expect_same_bits(da, expected_da, what + " da");
  expect_same_bits(db, expected_db, what + " db");
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, y.data(), dy.data(), da.data(), static_cast<float*>(nullptr));
  });
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  expect_same_bits(da, expected_da, what + " da, db not needed");
}

TEST(CudaOwnKernels, AddReluForwardAndBackwardAreAddThenReluBits) {
  add_relu_matches<1>(13);
  add_relu_matches<1>(20);
  add_relu_matches<4>(20);
}

template <int V>
void fused_bf16_matches(int64_t channels) {
  const size_t n = static_cast<size_t>(kRows * channels);
  const std::vector<Bf16> x = to_bf16(special_floats(n, 51)), a2 = to_bf16(special_floats(n, 52));
  const std::vector<Bf16> dy = to_bf16(special_floats(n, 53));
  const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * channels), 54);
  const std::vector<float> xf = to_floats(x), a2f = to_floats(a2), dyf = to_floats(dy);
  std::vector<Bf16> y(n), sum_y(n), da = to_bf16(random_floats(n, 55)), db = to_bf16(random_floats(n, 56));
  std::vector<float> expected_y(n), sum(n), expected_sum_y(n), d_sum(n, 0.0f), expected_da = to_floats(da),
      expected_db = to_floats(db);
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    batch_norm_relu_apply_at<V>(r, c, channels, x.data(), scale_shift.data(), y.data());
    add_relu_forward_at<V>(r, c, channels, x.data(), a2.data(), sum_y.data());
  });
  each_row_vector<V>(kRows, channels, [&](int64_t r, int64_t c) {
    add_relu_backward_at<V>(r, c, channels, sum_y.data(), dy.data(), da.data(), db.data());
  });
  test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {  // batch norm's apply: the reference's expression
    const size_t i = static_cast<size_t>(r * channels + c);
    expected_y[i] = xf[i] * scale_shift[static_cast<size_t>(c)] + scale_shift[static_cast<size_t>(channels + c)];
  });
  ref::relu_forward(pool(), kRows * channels, expected_y.data(), expected_y.data());
  ref::add_forward(pool(), kRows * channels, xf.data(), a2f.data(), sum.data());
  ref::relu_forward(pool(), kRows * channels, sum.data(), expected_sum_y.data());
  // The ReLU's mask from the stored (rounded) output, as a bf16 model's relu backward would read it.
  const std::vector<float> sum_yf = to_floats(sum_y);
  ref::relu_backward(pool(), kRows * channels, sum_yf.data(), dyf.data(), d_sum.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_da.data());
  ref::copy_backward(pool(), kRows * channels, d_sum.data(), expected_db.data());
  const std::string what = "bf16, C " + std::to_string(channels) + ", V " + std::to_string(V);
  expect_same_bits(y, expected_y, what + " batch norm + relu");
  expect_same_bits(sum_y, expected_sum_y, what + " add + relu");
  expect_same_bits(da, expected_da, what + " add + relu da");
  expect_same_bits(db, expected_db, what + " add + relu db");
}

TEST(CudaOwnKernels, FusedKernelsInBf16AreTheReferenceOnRoundedInputsRoundedOnce) {
  fused_bf16_matches<1>(13);
  fused_bf16_matches<1>(24);
  fused_bf16_matches<8>(24);
}

TEST(CudaOwnKernels, BatchNormPassesInBf16AreTheFp32BodiesOnWidenedInputsRoundedOnce) {
  for (const int64_t channels : {13, 24}) {
    const size_t n = static_cast<size_t>(kRows * channels);
    const Stored x(n, 61, false), dy(n, 62), dx(n, 63, false);
    const std::vector<float> gamma = random_floats(static_cast<size_t>(channels), 64);
    const std::vector<float> beta = random_floats(static_cast<size_t>(channels), 65);
    const std::string what = "bf16 batch norm, C " + std::to_string(channels);
    // Statistics: the same terms, so the same doubles.
    expect_same_sums(test::channel_sums(SumTerm<Bf16>{x.half.data(), channels}, 1, kRows, channels),
                     test::channel_sums(SumTerm<float>{x.wide.data(), channels}, 1, kRows, channels), what + " sum");
    const Statistics st = training_statistics(x.wide, kRows, channels, gamma, beta);
    std::vector<double> mean(st.saved.begin(), st.saved.begin() + channels);
    expect_same_sums(test::channel_sums(BatchNormDeviationTerm<Bf16>{x.half.data(), mean.data(), channels}, 1, kRows, channels),
                     test::channel_sums(BatchNormDeviationTerm<float>{x.wide.data(), mean.data(), channels}, 1, kRows, channels),
                     what + " deviations");
    // Apply, plain and with the ReLU.
    std::vector<Bf16> y(n), y_relu(n);
    std::vector<float> expected(n), expected_relu(n);
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.half.data(), st.scale_shift.data(), y.data());
      batch_norm_apply_at(r, c, channels, x.wide.data(), st.scale_shift.data(), expected.data());
    });
    each_row_vector<1>(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_relu_apply_at<1>(r, c, channels, x.half.data(), st.scale_shift.data(), y_relu.data());
      batch_norm_relu_apply_at<1>(r, c, channels, x.wide.data(), st.scale_shift.data(), expected_relu.data());
    });
    expect_same_bits(y, expected, what + " apply");
    expect_same_bits(y_relu, expected_relu, what + " apply + relu");
    // Backward: sums, then dx accumulated into a bf16 gradient (read, added in fp32, rounded once).
    const BatchNormBackwardTerm<Bf16> half_term{x.half.data(), dy.half.data(), st.saved.data(), channels};
    const BatchNormBackwardTerm<float> wide_term{x.wide.data(), dy.wide.data(), st.saved.data(), channels};
    std::vector<double> sums = test::channel_sums(half_term, 1, kRows, channels);
    expect_same_sums(sums, test::channel_sums(wide_term, 1, kRows, channels), what + " backward sums");
    const BatchNormReluBackwardTerm<Bf16> half_relu{x.half.data(), dy.half.data(), st.saved.data(), st.scale_shift.data(), channels};
    const BatchNormReluBackwardTerm<float> wide_relu{x.wide.data(), dy.wide.data(), st.saved.data(), st.scale_shift.data(), channels};
    expect_same_sums(test::channel_sums(half_relu, 1, kRows, channels), test::channel_sums(wide_relu, 1, kRows, channels),
                     what + " + relu backward sums");
    sums.push_back(static_cast<double>(kRows));
    std::vector<float> coefficients(static_cast<size_t>(3 * channels));
    each(channels, [&](int64_t c) {
      batch_norm_backward_coefficients_at(c, channels, sums.data(), gamma.data(), st.saved.data(), coefficients.data());
    });
    std::vector<Bf16> d_half = dx.half, d_relu_half = dx.half;
    std::vector<float> d_wide = dx.wide, d_relu_wide = dx.wide;
    test::each_row_channel(kRows, channels, [&](int64_t r, int64_t c) {
      batch_norm_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), st.saved.data(), coefficients.data(),
                                  d_half.data());
      batch_norm_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), st.saved.data(), coefficients.data(),
                                  d_wide.data());
      batch_norm_relu_backward_data_at(r, c, channels, x.half.data(), dy.half.data(), st.saved.data(),
                                       st.scale_shift.data(), coefficients.data(), d_relu_half.data());
      batch_norm_relu_backward_data_at(r, c, channels, x.wide.data(), dy.wide.data(), st.saved.data(),
                                       st.scale_shift.data(), coefficients.data(), d_relu_wide.data());
    });
    expect_same_bits(d_half, d_wide, what + " dx");
    expect_same_bits(d_relu_half, d_relu_wide, what + " + relu dx");
  }
}

}  // namespace
}  // namespace mlph::cuda
