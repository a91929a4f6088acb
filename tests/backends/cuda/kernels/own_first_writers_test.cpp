// A gradient's first writer writes (issue 33 item 4) across the families (eltwise, fused,
// batch_norm, depthwise, channel): the bits of adding into zeros.
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

// ---- a gradient's first writer writes (issue 33 item 4): no memset, no read -----------------------

// body(dx, accumulate) over a buffer of n: written into NaNs (accumulate false) it gives the bits of
// adding into zeros, -0 terms becoming +0 as 0 + -0 does.
template <class T, class Body>
void expect_written_as_added_into_zeros(size_t n, const std::string& what, Body&& body) {
  std::vector<T> added(n, from_float<T>(0.0f)), written(n, from_float<T>(std::numeric_limits<float>::quiet_NaN()));
  body(added.data(), true);
  body(written.data(), false);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(to_float(written[i])), std::bit_cast<uint32_t>(to_float(added[i]))) << what << " at " << i;
}

template <class T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out;
  for (float f : v) out.push_back(from_float<T>(f));
  return out;
}

template <class T>
void first_writers_write() {
  const int64_t rows = 7, c = 24, n = rows * c;
  std::vector<float> xf = special_floats(static_cast<size_t>(n), 951), dyf = random_floats(static_cast<size_t>(n), 952);
  for (size_t i = 0; i < dyf.size(); i += 5) dyf[i] = -0.0f;  // terms of -0: written +0
  const std::vector<T> x = stored<T>(xf), dy = stored<T>(dyf);
  const std::string type = sizeof(T) == 4 ? " (fp32)" : " (bf16)";
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "relu_backward" + type, [&](T* dx, bool a) {
    each(n, [&](int64_t i) { relu_backward_at(i, x.data(), dy.data(), dx, a); });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "relu_backward_vec" + type, [&](T* dx, bool a) {
    for (int64_t i = 0; i < n; i += 8) relu_backward_vec_at<8>(i, x.data(), dy.data(), dx, a);
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "accumulate" + type, [&](T* dx, bool a) {
    each(n, [&](int64_t i) { accumulate_at(i, dy.data(), dx, a); });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "accumulate_vec" + type, [&](T* dx, bool a) {
    for (int64_t i = 0; i < n; i += 8) accumulate_vec_at<8>(i, dy.data(), dx, a);
  });
  const std::vector<float> saved = random_floats(static_cast<size_t>(2 * c), 953, 0.5f, 2.0f);
  const std::vector<float> coefficients = random_floats(static_cast<size_t>(3 * c), 954);
  const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * c), 955);
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "batch_norm_backward_data" + type, [&](T* dx, bool a) {
    each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_backward_data_at(r, ch, c, x.data(), dy.data(), saved.data(), coefficients.data(), dx, a);
    });
  });
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "batch_norm_relu_backward_data" + type, [&](T* dx, bool a) {
    each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_relu_backward_data_at(r, ch, c, x.data(), dy.data(), saved.data(), scale_shift.data(), coefficients.data(),
                                       dx, a);
    });
  });
  // add + relu: da written (bit 0) while db adds into what da's write left (add(a, a): one buffer)
  expect_written_as_added_into_zeros<T>(static_cast<size_t>(n), "add_relu_backward" + type, [&](T* d, bool a) {
    each_channel_vector<8>(rows, c, [&](int64_t r, int64_t ch) {
      add_relu_backward_at<8>(r, ch, c, x.data(), dy.data(), d, d, a ? 0u : 1u);
    });
  });
  for (const DepthwiseCase& t : depthwise_cases()) {
    const DepthwiseShape sh = depthwise_shape(t.g, t.bias);
    const int64_t ch_count = t.g.in_channels;
    const std::vector<float> w = random_floats(static_cast<size_t>(sh.taps() * ch_count), 956);
    const std::vector<T> g = stored<T>(random_floats(static_cast<size_t>(sh.out_positions() * ch_count), 957));
    expect_written_as_added_into_zeros<T>(static_cast<size_t>(sh.in_positions() * ch_count),
                                          std::string("depthwise_backward_data, ") + t.what + type, [&](T* dx, bool a) {
                                            each_channel_vector<1>(sh.in_positions(), ch_count, [&](int64_t p, int64_t ch) {
                                              depthwise_backward_data_at<1>(p, ch, sh, w.data(), g.data(), dx, a);
                                            });
                                          });
  }
}

TEST(CudaOwnKernels, FirstGradientWritersWriteTheBitsOfAddingIntoZeros) {
  first_writers_write<float>();
  first_writers_write<Bf16>();
}

}  // namespace
}  // namespace mlph::cuda
