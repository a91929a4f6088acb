// Layout and types around cuDNN and cuBLASLt (kernels/layout.hpp): converts, chunked weight
// gradient partials, padded channels, box copies, bias, the latched bad label.
#include "math_fixtures.hpp"
#include "padded_input.hpp"

namespace mlph::cuda {
namespace {

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

// A padded conv's input with its taps along the last axis folded into its channels (plan::ConvPlan::taps):
// x [lines 3, width 5, 4 channels] fp32 into bf16 rows of 16 (3 taps x 4, then zeros), each row
// holding x's positions p - 1, p, p + 1 (zeros past the line's ends, not the next line's values);
// 'valid' (shift 0, 3 output positions); one tap is channels_copy's zero padding.
TEST(CudaKernelBodies, TapsFoldIntoChannelsWithZerosPastTheLine) {
  const int64_t lines = 3, width = 5, channels = 4;
  const std::vector<float> x = random_floats(lines * width * channels, 52);
  for (const auto& [shift, out_width] : {std::pair<int64_t, int64_t>{1, 5}, {0, 3}}) {
    TapsFold f;
    f.lines = lines, f.in_width = width, f.out_width = out_width, f.channels = channels, f.taps = 3, f.shift = shift,
    f.width = 16;
    std::vector<uint16_t> y(static_cast<size_t>(f.size()), 0xffff);
    each(f.size(), [&](int64_t i) { taps_fold_at(i, f, FloatType::f32, x.data(), FloatType::bf16, y.data()); });
    for (int64_t l = 0; l < lines; ++l)
      for (int64_t p = 0; p < out_width; ++p)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t t = j / channels, at = p + t - shift;
          const bool inside = j < 12 && at >= 0 && at < width;
          const float want = inside ? x[static_cast<size_t>((l * width + at) * channels + j % channels)] : 0.0f;
          ASSERT_EQ(y[static_cast<size_t>((l * out_width + p) * 16 + j)], float_to_bfloat16(want)) << l << " " << p << " " << j;
        }
    // The launcher's 16-byte path (8 elements a thread, x read 4 channels at a time): the same bits.
    std::vector<uint16_t> vec(y.size(), 0xffff);
    for (int64_t i = 0; i < f.size(); i += 8) taps_fold_vec_at<8>(i, f, FloatType::f32, x.data(), FloatType::bf16, vec.data());
    EXPECT_EQ(vec, y) << "shift " << shift;
  }
  TapsFold one;  // no taps folded: x's 4 channels padded to 8, as channels_copy pads them
  one.lines = lines, one.in_width = one.out_width = width, one.channels = channels, one.width = 8;
  std::vector<float> folded(static_cast<size_t>(one.size()), -1.0f), padded(folded.size(), -2.0f);
  each(one.size(), [&](int64_t i) { taps_fold_at(i, one, FloatType::f32, x.data(), FloatType::f32, folded.data()); });
  each(one.size(), [&](int64_t i) { channels_copy_at(i, 4, 8, FloatType::f32, x.data(), FloatType::f32, padded.data(), false); });
  EXPECT_EQ(folded, padded);
}

// The fold's geometry from the plan (padded_input.hpp, what the model and the probe launch): a conv of
// x [2, 3, 4, 5, 4] with kernel 3 and padding 1, its 3 taps along w folded in, 12 channels padded to 16.
TEST(CudaKernelBodies, TapsFoldGeometryComesFromThePaddedPlan) {
  plan::ConvPlan c;
  c.spatial = 3;
  c.in = plan::channels_last({2, 3, 4, 5, 4}), c.out = plan::channels_last({2, 3, 4, 5, 6});
  c.filter.rank = 5, c.filter.dims = {6, 4, 3, 3, 3}, c.filter.rows = 27 * 4, c.filter.cols = 6;
  c.pad = {1, 1, 1}, c.stride = {1, 1, 1}, c.dilation = {1, 1, 1};
  plan::pad_channels(c, true);
  const TapsFold f = taps_fold_of(c, 5);
  EXPECT_EQ((std::array<int64_t, 7>{f.lines, f.in_width, f.out_width, f.channels, f.taps, f.shift, f.width}),
            (std::array<int64_t, 7>{2 * 3 * 4, 5, 5, 4, 3, 1, 16}));
  EXPECT_EQ(f.size(), c.in.dims[0] * c.in.strides[0]);  // every element of the padded side, once
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

// A conv's bias on its half y (bf16, fp16) in place: the bits the fp32 path gave, casting cuDNN's half y
// up, adding the bias in fp32 and casting down for the next reader.
TEST(CudaKernelBodies, BiasForwardOnAHalfOutputIsTheCastUpAddAndCastDown) {
  const int64_t rows = 300, channels = 7;
  const std::vector<float> b = random_floats(channels, 37), y0 = special_floats(rows * channels, 38);
  for (FloatType type : {FloatType::bf16, FloatType::f16}) {
    std::vector<uint16_t> y(y0.size()), expected(y0.size());
    std::vector<float> wide(y0.size());
    each(static_cast<int64_t>(y0.size()), [&](int64_t i) {
      convert_at(i, FloatType::f32, y0.data(), type, y.data());
      convert_at(i, type, y.data(), FloatType::f32, wide.data());
    });
    each_row_channel(rows, channels, [&](int64_t r, int64_t c) { bias_forward_at(r, c, channels, b.data(), wide.data()); });
    each(static_cast<int64_t>(y0.size()), [&](int64_t i) { convert_at(i, FloatType::f32, wide.data(), type, expected.data()); });
    each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
      if (type == FloatType::bf16)
        bias_forward_at(r, c, channels, b.data(), reinterpret_cast<Bf16*>(y.data()));
      else
        bias_forward_at(r, c, channels, b.data(), reinterpret_cast<F16*>(y.data()));
    });
    EXPECT_EQ(y, expected) << (type == FloatType::bf16 ? "bf16" : "f16");
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
