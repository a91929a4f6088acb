// Batch normalization (kernels/batch_norm.hpp): training forward, evaluation, backward alone and in
// a group.
#include "math_fixtures.hpp"

namespace mlph::cuda {
namespace {

struct BatchNormRun {
  std::vector<float> y, saved, running_mean, running_var;
};

// The training forward as the launchers run it: sum, [allreduce], mean, variance, [allreduce], finalize,
// apply; or (`one_pass`, backend.batch_norm=one_pass) moments, [allreduce], finalize from them, apply.
// `ranks` > 1 splits the rows among that many ranks and sums their stats between the passes, as a
// SyncBatchNorm group's allreduce would; each rank keeps (identical) running statistics.
BatchNormRun batch_norm_forward(const std::vector<float>& x, int64_t rows, int64_t channels, int ranks,
                                const std::vector<float>& gamma, const std::vector<float>& beta,
                                const std::vector<float>& running_mean, const std::vector<float>& running_var,
                                double eps, double momentum, bool one_pass = false) {
  const int64_t mine = rows / ranks;
  std::vector<std::vector<double>> stats(static_cast<size_t>(ranks), std::vector<double>(2 * channels + 1));
  auto allreduce = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double sum = 0;
      for (auto& s : stats) sum += s[static_cast<size_t>(i)];
      for (auto& s : stats) s[static_cast<size_t>(i)] = sum;
    }
  };
  for (int k = 0; k < ranks && one_pass; ++k) {  // [0, C) sum x, [C, 2C) sum x^2, [2C] rows
    const float* xk = x.data() + k * mine * channels;
    const std::vector<double> moments = test::channel_sums(BatchNormMomentsTerm{xk, channels}, 1, mine, channels);
    std::copy(moments.begin(), moments.end(), stats[static_cast<size_t>(k)].begin());
    stats[static_cast<size_t>(k)][static_cast<size_t>(2 * channels)] = static_cast<double>(mine);
  }
  if (one_pass && ranks > 1) allreduce(0, 2 * channels + 1);
  for (int k = 0; k < ranks && !one_pass; ++k) {
    const float* xk = x.data() + k * mine * channels;
    const std::vector<double> sums = test::channel_sums(SumTerm{xk, channels}, 1, mine, channels);
    std::copy(sums.begin(), sums.end(), stats[static_cast<size_t>(k)].begin());
    stats[static_cast<size_t>(k)][static_cast<size_t>(channels)] = static_cast<double>(mine);
  }
  if (!one_pass && ranks > 1) allreduce(0, channels + 1);
  for (int k = 0; k < ranks && !one_pass; ++k) {
    double* sk = stats[static_cast<size_t>(k)].data();
    each(channels, [&](int64_t c) { batch_norm_mean_at(c, channels, sk); });
    const std::vector<double> deviations =
        test::channel_sums(BatchNormDeviationTerm{x.data() + k * mine * channels, sk, channels}, 1, mine, channels);
    std::copy(deviations.begin(), deviations.end(), sk + channels + 1);
  }
  if (!one_pass && ranks > 1) allreduce(channels + 1, 2 * channels + 1);
  BatchNormRun run{std::vector<float>(x.size()), std::vector<float>(2 * channels), running_mean, running_var};
  for (int k = 0; k < ranks; ++k) {
    std::vector<float> scale_shift(2 * channels), rm = running_mean, rv = running_var;
    each(channels, [&](int64_t c) {
      (one_pass ? batch_norm_finalize_moments_at : batch_norm_finalize_at)(
          c, channels, eps, momentum, stats[static_cast<size_t>(k)].data(), gamma.data(), beta.data(), rm.data(),
          rv.data(), run.saved.data(), scale_shift.data());
    });
    each_row_channel(mine, channels, [&](int64_t r, int64_t c) {
      batch_norm_apply_at(r, c, channels, x.data() + k * mine * channels, scale_shift.data(),
                          run.y.data() + k * mine * channels);
    });
    run.running_mean = rm, run.running_var = rv;
  }
  return run;
}

// Two passes (the reference's arithmetic) and one (backend.batch_norm=one_pass), on data whose mean is
// small and large against its spread (1 to 4, and 1000 to 1004: sum x^2 - mean * sum x cancels 20 of
// double's bits there, and the float results must not see it).
TEST(CudaKernelBodies, BatchNormTrainingForwardMatchesTheReference) {
  const int64_t rows = 400, channels = 37;
  for (const float offset : {0.0f, 1000.0f}) {
    std::vector<float> x = random_floats(static_cast<size_t>(rows * channels), 50, 1.0f, 4.0f);
    for (float& v : x) v += offset;
    const std::vector<float> gamma = random_floats(channels, 51), beta = random_floats(channels, 52);
    const std::vector<float> rm = random_floats(channels, 53), rv = random_floats(channels, 54, 0.5f, 2.0f);
    const sdk::program::BatchNormAttrs a{1e-3, 0.1, 1};
    std::vector<float> expected_y(x.size()), expected_saved(2 * channels), expected_rm = rm, expected_rv = rv;
    ref::batch_norm_train_forward(pool(), {rows, channels}, a, x.data(), gamma.data(), beta.data(), expected_rm.data(),
                                  expected_rv.data(), expected_saved.data(), expected_y.data());
    // One rank, and a SyncBatchNorm group of 4 whose batches together are the reference's.
    for (const bool one_pass : {false, true})
      for (int ranks : {1, 4}) {
        SCOPED_TRACE(std::string(one_pass ? "one pass, " : "two passes, ") + std::to_string(ranks) + " ranks, offset " +
                     std::to_string(offset));
        const BatchNormRun run =
            batch_norm_forward(x, rows, channels, ranks, gamma, beta, rm, rv, a.eps, a.momentum, one_pass);
        expect_near(run.y, expected_y, "batch_norm y (statistics summed over rows)");
        expect_near(run.saved, expected_saved, "batch_norm saved mean and inverse std");
        expect_near(run.running_mean, expected_rm, "batch_norm running_mean");
        expect_near(run.running_var, expected_rv, "batch_norm running_var (unbiased)");
      }
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

}  // namespace
}  // namespace mlph::cuda
