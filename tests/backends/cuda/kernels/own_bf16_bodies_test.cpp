// ---- every body between DeepCAM's convs in bf16 (issue 33 item 4): its fp32 body on the widened ----
// inputs, each stored result rounded once. The arithmetic is the same, so the bits are: sums (doubles of
// the same terms in the same order) equal, outputs and accumulated gradients equal after one rounding.
//
// The element-wise bodies and concat (kernels/eltwise.hpp, channel.hpp); batch norm's passes: own_fused_test.cpp.
#include "own_fixtures.hpp"

namespace mlph::cuda {
namespace {

// relu, add, accumulate: the scalar T body and its V-element body (V = 8 bf16: 16 bytes), over an odd n.
template <int V>
void eltwise_bf16_matches(size_t n) {
  const Stored x(n, 71), b(n, 72), dy(n, 73), dx(n, 74, false);
  std::vector<Bf16> y(n), sum(n), d_relu = dx.half, d_acc = dx.half;
  std::vector<float> expected_y(n), expected_sum(n), expected_relu = dx.wide, expected_acc = dx.wide;
  const auto vectors = static_cast<int64_t>(n) / V;
  for (int64_t v = 0; v < vectors; ++v) {
    relu_forward_vec_at<V>(v * V, x.half.data(), y.data());
    add_forward_vec_at<V>(v * V, x.half.data(), b.half.data(), sum.data());
    relu_backward_vec_at<V>(v * V, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_vec_at<V>(v * V, dy.half.data(), d_acc.data());
  }
  for (int64_t i = vectors * V; i < static_cast<int64_t>(n); ++i) {  // the launcher's tail: the scalar body
    relu_forward_at(i, x.half.data(), y.data());
    add_forward_at(i, x.half.data(), b.half.data(), sum.data());
    relu_backward_at(i, x.half.data(), dy.half.data(), d_relu.data());
    accumulate_at(i, dy.half.data(), d_acc.data());
  }
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    relu_forward_at(i, x.wide.data(), expected_y.data());
    add_forward_at(i, x.wide.data(), b.wide.data(), expected_sum.data());
    relu_backward_at(i, x.wide.data(), dy.wide.data(), expected_relu.data());
    accumulate_at(i, dy.wide.data(), expected_acc.data());
  }
  const std::string what = "bf16 n " + std::to_string(n) + ", V " + std::to_string(V);
  expect_same_bits(y, expected_y, what + " relu");
  expect_same_bits(sum, expected_sum, what + " add");
  expect_same_bits(d_relu, expected_relu, what + " relu backward");
  expect_same_bits(d_acc, expected_acc, what + " accumulate");
}

TEST(CudaOwnKernels, EltwiseBodiesInBf16AreTheFp32BodiesOnWidenedInputsRoundedOnce) {
  eltwise_bf16_matches<1>(1001);
  eltwise_bf16_matches<8>(1003);
}

// concat's column copies: a copy is exact; the backward adds dy's band into a bf16 gradient, rounded once.
TEST(CudaOwnKernels, ConcatInBf16IsTheFp32BodyOnWidenedInputsRoundedOnce) {
  const int64_t widths[2] = {13, 6}, total = 19;
  std::vector<Bf16> y(static_cast<size_t>(kRows * total));
  std::vector<float> expected_y(y.size());
  const Stored dy(y.size(), 81);
  int64_t offset = 0;
  for (const int64_t width : widths) {
    const size_t n = static_cast<size_t>(kRows * width);
    const Stored x(n, 82 + static_cast<uint32_t>(width)), dx(n, 84 + static_cast<uint32_t>(width), false);
    std::vector<Bf16> d_half = dx.half;
    std::vector<float> d_wide = dx.wide;
    test::each_row_channel(kRows, width, [&](int64_t r, int64_t c) {
      copy_columns_at(r, c, width, x.half.data(), total, offset, y.data());
      copy_columns_at(r, c, width, x.wide.data(), total, offset, expected_y.data());
      add_columns_at(r, c, width, dy.half.data(), total, offset, d_half.data());
      add_columns_at(r, c, width, dy.wide.data(), total, offset, d_wide.data());
    });
    expect_same_bits(d_half, d_wide, "bf16 concat backward, width " + std::to_string(width));
    offset += width;
  }
  expect_same_bits(y, expected_y, "bf16 concat");
}

}  // namespace
}  // namespace mlph::cuda
