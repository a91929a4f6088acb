// The SVE kernels against plain scalar loops written straight from docs/ops.md (sums in double), on
// shapes chosen to hit every ragged edge at 128-, 256- and 512-bit vectors: channel counts around
// multiples of 4, 8 and 16 lanes, widths that are not multiples of the tile rows, strides, dilations,
// asymmetric padding, groups and depthwise. CTest runs this binary under QEMU at the three lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "mlph/test/random.hpp"
#include "kernels.hpp"
#include "mlph/common.h"

namespace mlph::a64fx {
namespace {

using Floats = std::vector<float>;

using ::mlph::test::random_floats;

// max |a - b| / max(1, max |b|): the error of a against the scalar result b.
double error(const Floats& a, const Floats& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
  }
  return diff / scale;
}

constexpr double kTolerance = 2e-5;  // float sums of a few thousand terms against double ones
const Threads kThreads{3};

TEST(SveKernels, VectorLengthIsTheEmulatedOne) {
  // CTest's runs at each vector length set MLPH_EXPECT_LANES: proof that the run really had that length.
  if (const char* expected = std::getenv("MLPH_EXPECT_LANES")) {
    EXPECT_EQ(vector_lanes(), std::atoll(expected));
  }
  EXPECT_GE(vector_lanes(), 4);
  EXPECT_EQ(vector_lanes() % 4, 0);
}

// ---- convolution -------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int spatial;  // 2 or 3
  int64_t batch, in_edge, ci, co, kernel, stride, dilation, pad_before, pad_after, groups;
  int64_t in_width = 0;  // 0: in_edge
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

Window window_of(const ConvCase& c) {
  Window g;
  g.batch = c.batch;
  for (int d = 3 - c.spatial; d < 3; ++d) {
    g.in[d] = d == 2 && c.in_width ? c.in_width : c.in_edge;
    g.kernel[d] = c.kernel, g.stride[d] = c.stride, g.dilation[d] = c.dilation;
    g.pad_before[d] = c.pad_before, g.pad_after[d] = c.pad_after;
    g.out[d] = (g.in[d] + c.pad_before + c.pad_after - c.dilation * (c.kernel - 1) - 1) / c.stride + 1;
  }
  g.in_channels = c.ci, g.out_channels = c.co, g.groups = c.groups;
  return g;
}

// f(n, o[3], i[3], tap) for every output position o and tap whose input position i lies inside.
template <class F>
void for_each_tap(const Window& g, F&& f) {
  int64_t o[3], k[3], i[3];
  for (int64_t n = 0; n < g.batch; ++n)
    for (o[0] = 0; o[0] < g.out[0]; ++o[0])
      for (o[1] = 0; o[1] < g.out[1]; ++o[1])
        for (o[2] = 0; o[2] < g.out[2]; ++o[2])
          for (k[0] = 0; k[0] < g.kernel[0]; ++k[0])
            for (k[1] = 0; k[1] < g.kernel[1]; ++k[1])
              for (k[2] = 0; k[2] < g.kernel[2]; ++k[2]) {
                bool inside = true;
                for (int d = 0; d < 3; ++d) {
                  i[d] = o[d] * g.stride[d] - g.pad_before[d] + k[d] * g.dilation[d];
                  inside = inside && i[d] >= 0 && i[d] < g.in[d];
                }
                if (!inside) continue;
                const int64_t in_pos = ((n * g.in[0] + i[0]) * g.in[1] + i[1]) * g.in[2] + i[2];
                const int64_t out_pos = ((n * g.out[0] + o[0]) * g.out[1] + o[1]) * g.out[2] + o[2];
                f(in_pos, out_pos, (k[0] * g.kernel[1] + k[1]) * g.kernel[2] + k[2]);
              }
}

// The three passes in double from the definition: y = conv(x, w) + b, dx, dw, db given dy.
struct ConvScalar {
  Floats y, dx, dw, db;
};
ConvScalar scalar_conv(const Window& g, const Floats& x, const Floats& w, const Floats& b, const Floats& dy) {
  const int64_t ci = g.in_channels, co = g.out_channels, cig = ci / g.groups, cog = co / g.groups;
  std::vector<double> y(static_cast<size_t>(g.out_positions() * co)), dx(x.size()), dw(w.size()), db(b.size());
  for (int64_t p = 0; p < g.out_positions(); ++p)
    for (int64_t o = 0; o < co; ++o) y[static_cast<size_t>(p * co + o)] = b[static_cast<size_t>(o)];
  for_each_tap(g, [&](int64_t in_pos, int64_t out_pos, int64_t tap) {
    for (int64_t o = 0; o < co; ++o) {
      const int64_t group = o / cog;
      for (int64_t c = 0; c < cig; ++c) {
        const size_t xi = static_cast<size_t>(in_pos * ci + group * cig + c), wi = static_cast<size_t>((tap * cig + c) * co + o);
        const size_t yi = static_cast<size_t>(out_pos * co + o);
        y[yi] += static_cast<double>(x[xi]) * w[wi];
        dx[xi] += static_cast<double>(dy[yi]) * w[wi];
        dw[wi] += static_cast<double>(dy[yi]) * x[xi];
      }
    }
  });
  for (int64_t p = 0; p < g.out_positions(); ++p)
    for (int64_t o = 0; o < co; ++o) db[static_cast<size_t>(o)] += dy[static_cast<size_t>(p * co + o)];
  auto to_float = [](const std::vector<double>& v) { return Floats(v.begin(), v.end()); };
  return {to_float(y), to_float(dx), to_float(dw), to_float(db)};
}

class SveConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(SveConv, MatchesTheScalarLoopsInEveryPass) {
  const ConvCase& c = GetParam();
  const Window g = window_of(c);
  const Floats x = random_floats(static_cast<size_t>(g.in_positions() * c.ci), 1);
  const Floats w = random_floats(static_cast<size_t>(g.taps() * (c.ci / c.groups) * c.co), 2);
  const Floats b = random_floats(static_cast<size_t>(c.co), 3);
  const Floats dy = random_floats(static_cast<size_t>(g.out_positions() * c.co), 4);
  const ConvScalar want = scalar_conv(g, x, w, b, dy);

  Scratch scratch;
  Floats y(want.y.size(), NAN);
  conv_forward(kThreads, scratch, g, x.data(), w.data(), b.data(), y.data());
  EXPECT_LT(error(y, want.y), kTolerance) << "forward";
  // Backward passes accumulate: start from ones and subtract them again.
  Floats dx(x.size(), 1.0f), dw(w.size(), 1.0f), db(b.size(), 1.0f);
  conv_backward_data(kThreads, scratch, g, w.data(), dy.data(), dx.data());
  conv_backward_weights(kThreads, scratch, g, x.data(), dy.data(), dw.data(), db.data());
  for (Floats* v : {&dx, &dw, &db})
    for (float& e : *v) e -= 1.0f;
  EXPECT_LT(error(dx, want.dx), kTolerance) << "backward data";
  EXPECT_LT(error(dw, want.dw), kTolerance) << "backward weights";
  EXPECT_LT(error(db, want.db), kTolerance) << "bias";

  // The forward and backward-data passes sum each element's terms in one order whatever the thread
  // count: bitwise the same on 1 thread. Backward weights cuts its rows into slices when it has fewer
  // items than threads: with 64 threads it does for every case here, and still matches.
  Floats y1(y.size()), dx1(x.size(), 1.0f), dw64(w.size(), 1.0f);
  conv_forward({1}, scratch, g, x.data(), w.data(), b.data(), y1.data());
  conv_backward_data({1}, scratch, g, w.data(), dy.data(), dx1.data());
  conv_backward_weights({64}, scratch, g, x.data(), dy.data(), dw64.data(), nullptr);
  for (float& e : dx1) e -= 1.0f;
  for (float& e : dw64) e -= 1.0f;
  EXPECT_EQ(y1, y);
  EXPECT_EQ(dx1, dx);
  EXPECT_LT(error(dw64, want.dw), kTolerance) << "backward weights in slices";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SveConv,
    ::testing::Values(
        // name, spatial, batch, edge, ci, co, kernel, stride, dilation, pad before, after, groups[, width]
        ConvCase{"cosmoflow_first", 3, 2, 6, 4, 16, 3, 1, 1, 1, 1, 1},
        ConvCase{"cosmoflow_deep", 3, 1, 4, 20, 36, 3, 1, 1, 1, 1, 1},
        ConvCase{"kernel2_keras_same", 3, 1, 5, 3, 7, 2, 1, 1, 0, 1, 1},
        ConvCase{"strided_3d", 3, 2, 7, 5, 9, 3, 2, 1, 1, 0, 1},
        ConvCase{"dilated_2d", 2, 2, 9, 6, 17, 3, 1, 2, 2, 2, 1},
        ConvCase{"strided_dilated_2d", 2, 1, 11, 3, 5, 3, 2, 2, 1, 2, 1, 14},
        ConvCase{"grouped_2d", 2, 2, 7, 12, 18, 3, 1, 1, 1, 1, 3},
        ConvCase{"depthwise_2d", 2, 1, 8, 19, 19, 3, 2, 1, 1, 1, 19},
        ConvCase{"pointwise_wide", 2, 1, 3, 33, 65, 1, 1, 1, 0, 0, 1, 29},
        ConvCase{"stride_over_kernel", 2, 1, 10, 2, 3, 2, 3, 1, 0, 0, 1},
        ConvCase{"width_one", 3, 1, 3, 4, 8, 3, 1, 1, 1, 1, 1, 1},
        ConvCase{"many_channels", 2, 1, 4, 150, 40, 3, 1, 1, 1, 1, 1}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// conv_transpose from its definition: y[n,o,co] = b[co] + sum over i,k,ci with o = i*s - p_before + k*d of
// x[n,i,ci] * w[k,co,ci]; `g` is the conv it is the adjoint of (g.in: y's spatial dims).
TEST(SveConvTranspose, MatchesItsDefinitionAndItsAdjoint) {
  for (const ConvCase& c : {ConvCase{"upsample", 2, 2, 9, 5, 3, 3, 2, 1, 1, 2, 1},
                            ConvCase{"dilated", 2, 1, 11, 6, 17, 3, 2, 2, 2, 1, 1},
                            ConvCase{"volume", 3, 1, 6, 4, 9, 2, 2, 1, 0, 0, 1},
                            // output_padding 1 with padding 0: the adjoint conv's padding after is -1
                            ConvCase{"output_padding", 2, 1, 8, 3, 4, 3, 2, 1, 0, -1, 1}}) {
    SCOPED_TRACE(c.name);
    const Window g = window_of(c);  // the adjoint conv: y (its input) has ci channels, x (its output) co
    const Floats x = random_floats(static_cast<size_t>(g.out_positions() * c.co), 5);
    const Floats w = random_floats(static_cast<size_t>(g.taps() * c.ci * c.co), 6);
    const Floats b = random_floats(static_cast<size_t>(c.ci), 7);
    const Floats dy = random_floats(static_cast<size_t>(g.in_positions() * c.ci), 8);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    for (int64_t p = 0; p < g.in_positions(); ++p)
      for (int64_t o = 0; o < c.ci; ++o) y[static_cast<size_t>(p * c.ci + o)] = b[static_cast<size_t>(o)], db[static_cast<size_t>(o)] += dy[static_cast<size_t>(p * c.ci + o)];
    for_each_tap(g, [&](int64_t out_pos, int64_t in_pos, int64_t tap) {  // the transpose's output is the conv's input
      for (int64_t o = 0; o < c.ci; ++o)
        for (int64_t i = 0; i < c.co; ++i) {
          const size_t yi = static_cast<size_t>(out_pos * c.ci + o), xi = static_cast<size_t>(in_pos * c.co + i);
          const size_t wi = static_cast<size_t>((tap * c.ci + o) * c.co + i);
          y[yi] += static_cast<double>(x[xi]) * w[wi];
          dx[xi] += static_cast<double>(dy[yi]) * w[wi];
          dw[wi] += static_cast<double>(dy[yi]) * x[xi];
        }
    });
    Scratch scratch;
    Floats got(y.size(), NAN), gdx(dx.size(), 0.0f), gdw(dw.size(), 0.0f), gdb(db.size(), 0.0f);
    conv_transpose_forward(kThreads, scratch, g, x.data(), w.data(), b.data(), got.data());
    conv_transpose_backward(kThreads, scratch, g, x.data(), w.data(), dy.data(), gdx.data(), gdw.data(), gdb.data());
    EXPECT_LT(error(got, Floats(y.begin(), y.end())), kTolerance);
    EXPECT_LT(error(gdx, Floats(dx.begin(), dx.end())), kTolerance);
    EXPECT_LT(error(gdw, Floats(dw.begin(), dw.end())), kTolerance);
    EXPECT_LT(error(gdb, Floats(db.begin(), db.end())), kTolerance);
  }
}

// ---- pooling ------------------------------------------------------------------------------------

TEST(SveMaxPool, FirstMaximumWinsAndNanPropagates) {
  for (const ConvCase& c : {ConvCase{"cosmoflow", 3, 2, 6, 19, 19, 2, 2, 1, 0, 0, 1},
                            ConvCase{"overlapping", 2, 2, 9, 35, 35, 3, 2, 1, 0, 0, 1},
                            ConvCase{"stride_over_kernel", 2, 1, 10, 5, 5, 2, 3, 1, 0, 0, 1}}) {
    SCOPED_TRACE(c.name);
    const Window g = window_of(c);
    Floats x = random_floats(static_cast<size_t>(g.in_positions() * c.ci), 9);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.5f;  // ties: the first in window order wins
    x[3] = NAN;
    const Floats dy = random_floats(static_cast<size_t>(g.out_positions() * c.ci), 10);
    Floats want_y(dy.size(), -INFINITY), want_dx(x.size(), 0.0f);
    std::vector<int64_t> winner(dy.size(), -1);
    for_each_tap(g, [&](int64_t in_pos, int64_t out_pos, int64_t) {
      for (int64_t ch = 0; ch < c.ci; ++ch) {
        const size_t o = static_cast<size_t>(out_pos * c.ci + ch);
        const float v = x[static_cast<size_t>(in_pos * c.ci + ch)];
        const bool beats = winner[o] < 0 || v > want_y[o] || (std::isnan(v) && !std::isnan(want_y[o]));
        if (beats) want_y[o] = v, winner[o] = in_pos * c.ci + ch;
      }
    });
    for (size_t o = 0; o < dy.size(); ++o) want_dx[static_cast<size_t>(winner[o])] += dy[o];
    Floats y(dy.size()), dx(x.size(), 0.0f);
    max_pool_forward(kThreads, g, x.data(), y.data());
    max_pool_backward(kThreads, g, x.data(), dy.data(), dx.data());
    EXPECT_LT(error(y, want_y), 1e-7);
    EXPECT_LT(error(dx, want_dx), 1e-6);
    EXPECT_TRUE(std::isnan(y[3]));  // x[3] is channel 3 of the first window
  }
}

// ---- dense -----------------------------------------------------------------------------------------

TEST(SveDense, MatchesTheScalarLoops) {
  for (const DenseShape s : {DenseShape{4, 300, 37}, DenseShape{13, 33, 65}, DenseShape{1, 1000, 4}, DenseShape{2, 5, 1}}) {
    SCOPED_TRACE(std::to_string(s.batch) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out));
    const Floats x = random_floats(static_cast<size_t>(s.batch * s.in), 11), w = random_floats(static_cast<size_t>(s.in * s.out), 12);
    const Floats b = random_floats(static_cast<size_t>(s.out), 13), dy = random_floats(static_cast<size_t>(s.batch * s.out), 14);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    for (int64_t n = 0; n < s.batch; ++n)
      for (int64_t o = 0; o < s.out; ++o) {
        const size_t yi = static_cast<size_t>(n * s.out + o);
        y[yi] = b[static_cast<size_t>(o)];
        db[static_cast<size_t>(o)] += dy[yi];
        for (int64_t j = 0; j < s.in; ++j) {
          const size_t xi = static_cast<size_t>(n * s.in + j), wi = static_cast<size_t>(j * s.out + o);
          y[yi] += static_cast<double>(x[xi]) * w[wi];
          dx[xi] += static_cast<double>(dy[yi]) * w[wi];
          dw[wi] += static_cast<double>(dy[yi]) * x[xi];
        }
      }
    Scratch scratch;
    Floats gy(y.size(), NAN), gdx(dx.size(), 0.0f), gdw(dw.size(), 0.0f), gdb(db.size(), 0.0f);
    dense_forward(kThreads, scratch, s, x.data(), w.data(), b.data(), gy.data());
    dense_backward(kThreads, s, x.data(), w.data(), dy.data(), gdx.data(), gdw.data(), gdb.data());
    EXPECT_LT(error(gy, Floats(y.begin(), y.end())), kTolerance);
    EXPECT_LT(error(gdx, Floats(dx.begin(), dx.end())), kTolerance);
    EXPECT_LT(error(gdw, Floats(dw.begin(), dw.end())), kTolerance);
    EXPECT_LT(error(gdb, Floats(db.begin(), db.end())), kTolerance);
  }
}

// ---- element-wise --------------------------------------------------------------------------------

TEST(SveEltwise, EveryOpAndItsGradient) {
  const int64_t n = 1037;  // not a multiple of any vector length
  Floats x = random_floats(static_cast<size_t>(n), 15, -2.0f, 2.0f);
  x[5] = NAN, x[6] = 0.0f;
  const Floats dy = random_floats(static_cast<size_t>(n), 16), base = random_floats(static_cast<size_t>(n), 17);
  auto check = [&](const char* what, auto kernel, auto scalar) {
    SCOPED_TRACE(what);
    Floats got(base), want(base);
    kernel(got.data());
    for (size_t i = 0; i < want.size(); ++i) want[i] = scalar(i, want[i]);
    EXPECT_LT(error(got, want), 1e-6);
  };
  const float alpha = 0.3f;
  check("leaky_relu", [&](float* y) { leaky_relu_forward(kThreads, n, alpha, x.data(), y); },
        [&](size_t i, float) { return x[i] > 0 ? x[i] : alpha * x[i]; });
  check("leaky_relu'", [&](float* d) { leaky_relu_backward(kThreads, n, alpha, x.data(), dy.data(), d); },
        [&](size_t i, float d) { return d + (x[i] > 0 ? dy[i] : alpha * dy[i]); });
  check("relu", [&](float* y) { relu_forward(kThreads, n, x.data(), y); },
        [&](size_t i, float) { return std::isnan(x[i]) ? x[i] : std::max(x[i], 0.0f); });
  check("relu'", [&](float* d) { relu_backward(kThreads, n, x.data(), dy.data(), d); },
        [&](size_t i, float d) { return d + (x[i] > 0 ? dy[i] : 0.0f); });
  check("tanh", [&](float* y) { tanh_forward(kThreads, n, x.data(), y); }, [&](size_t i, float) { return std::tanh(x[i]); });
  check("tanh'", [&](float* d) { tanh_backward(kThreads, n, base.data(), dy.data(), d); },
        [&](size_t i, float d) { return d + dy[i] * (1.0f - base[i] * base[i]); });
  check("scale", [&](float* y) { scale_forward(kThreads, n, 1.2f, x.data(), y); }, [&](size_t i, float) { return 1.2f * x[i]; });
  check("scale'", [&](float* d) { scale_backward(kThreads, n, 1.2f, dy.data(), d); },
        [&](size_t i, float d) { return d + 1.2f * dy[i]; });
  check("add", [&](float* y) { add_forward(kThreads, n, x.data(), dy.data(), y); }, [&](size_t i, float) { return x[i] + dy[i]; });
  check("log1p", [&](float* y) { log1p_forward(kThreads, n, base.data(), y); },
        [&](size_t i, float) { return std::log1p(base[i]); });
  std::vector<int16_t> counts(static_cast<size_t>(n));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int16_t>(static_cast<int>(i * 37) % 65536 - 32768);
  check("int16", [&](float* y) { int16_to_float(kThreads, n, counts.data(), y); },
        [&](size_t i, float) { return static_cast<float>(counts[i]); });
  Floats mask(static_cast<size_t>(n));
  dropout_mask(kThreads, n, 0.25, 42, 7, 3, mask.data());
  for (size_t i = 0; i < mask.size(); ++i)
    ASSERT_EQ(mask[i], static_cast<double>(mlph_uniform(42, 7, 3, i)) >= 0.25 ? 1.0f / 0.75f : 0.0f) << i;
  check("dropout", [&](float* y) { mask_forward(kThreads, n, mask.data(), x.data(), y); },
        [&](size_t i, float) { return x[i] * mask[i]; });
  check("dropout'", [&](float* d) { mask_backward(kThreads, n, mask.data(), dy.data(), d); },
        [&](size_t i, float d) { return d + dy[i] * mask[i]; });
}

// log1p is a series on SVE: every float class against the C library, to a few ulps.
TEST(SveEltwise, Log1pAgreesWithTheCLibrary) {
  Floats x{0.0f, -0.0f, 1e-30f, -1e-30f, 1e-10f, 3e-8f, 6e-8f, 1e-7f, 1e-4f, -1e-4f, 0.4142f, 0.4143f, 0.5f, 1.0f,
           2.0f, 3.0f, 255.0f, 32767.0f, 1e20f, 3e38f, -0.5f, -0.9f, -0.999999f, -1.0f, -1.5f, -2.0f, INFINITY, -INFINITY,
           NAN, -1.0f + 1e-7f, 1.17549435e-38f};
  std::mt19937 gen(5);
  for (int i = 0; i < 2000; ++i) x.push_back(std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(gen), i % 80 - 60));
  for (int i = 0; i < 500; ++i) x.push_back(-std::uniform_real_distribution<float>(0.0f, 1.0f)(gen));
  for (int i = 0; i < 500; ++i) x.push_back(static_cast<float>(i * 61 % 32768));  // CosmoFlow's counts
  Floats y(x.size());
  log1p_forward(kThreads, static_cast<int64_t>(x.size()), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::log1p(x[i]);
    if (std::isnan(want) || std::isinf(want)) {
      EXPECT_TRUE(std::isnan(want) ? std::isnan(y[i]) : y[i] == want) << "log1p(" << x[i] << ") = " << y[i];
      continue;
    }
    EXPECT_LE(std::fabs(y[i] - want), 4e-7f * std::fabs(want) + 1e-45f) << "log1p(" << x[i] << ") = " << y[i] << ", libm " << want;
  }
}

// ---- per-channel ops and batch norm ----------------------------------------------------------------

TEST(SveChannel, ConcatBroadcastPoolingAffine) {
  const int64_t rows = 37;
  const std::vector<int64_t> widths{3, 17, 8};
  std::vector<Floats> parts;
  for (size_t k = 0; k < widths.size(); ++k) parts.push_back(random_floats(static_cast<size_t>(rows * widths[k]), 20 + static_cast<uint32_t>(k)));
  Floats y(static_cast<size_t>(rows * 28));
  concat_forward(kThreads, rows, {parts[0].data(), parts[1].data(), parts[2].data()}, widths, y.data());
  EXPECT_EQ(y[28 * 5 + 3 + 4], parts[1][17 * 5 + 4]);
  std::vector<Floats> grads{Floats(parts[0].size(), 1.0f), Floats(), Floats(parts[2].size(), 1.0f)};
  concat_backward(kThreads, rows, {grads[0].data(), nullptr, grads[2].data()}, widths, y.data());
  EXPECT_EQ(grads[2][8 * 36 + 7], 1.0f + parts[2][8 * 36 + 7]);

  // [2, 3, 5, 21] pooled to [2, 1, 1, 21], broadcast back.
  const int64_t batch = 2, positions = 15, channels = 21;
  const Floats x = random_floats(static_cast<size_t>(batch * positions * channels), 24);
  Floats pooled(static_cast<size_t>(batch * channels)), want(pooled.size(), 0.0f);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0;
      for (int64_t p = 0; p < positions; ++p) sum += x[static_cast<size_t>((n * positions + p) * channels + c)];
      want[static_cast<size_t>(n * channels + c)] = static_cast<float>(sum / positions);
    }
  global_avg_pool_forward(kThreads, batch, positions, channels, x.data(), pooled.data());
  EXPECT_LT(error(pooled, want), 1e-6);
  Floats spread(x.size(), 0.0f);
  global_avg_pool_backward(kThreads, batch, positions, channels, pooled.data(), spread.data());
  EXPECT_FLOAT_EQ(spread[static_cast<size_t>((1 * positions + 4) * channels + 9)], pooled[channels + 9] / positions);
  Floats tiled(x.size());
  broadcast_forward(kThreads, {batch, 1, 1, channels}, {batch, 3, 5, channels}, pooled.data(), tiled.data());
  EXPECT_EQ(tiled[static_cast<size_t>((1 * positions + 13) * channels + 20)], pooled[channels + 20]);
  Floats summed(pooled.size(), 0.0f);
  broadcast_backward(kThreads, {batch, 1, 1, channels}, {batch, 3, 5, channels}, x.data(), summed.data());
  for (size_t i = 0; i < summed.size(); ++i) EXPECT_NEAR(summed[i], want[i] * positions, 1e-5);

  const RowsByChannels s{batch * positions, channels};
  const Floats w = random_floats(static_cast<size_t>(channels), 25), b = random_floats(static_cast<size_t>(channels), 26);
  const Floats dy = random_floats(x.size(), 27);
  Floats affine(x.size()), dx(x.size(), 0.0f), dw(w.size(), 0.0f), db(b.size(), 0.0f), shifted(x.size());
  channel_affine_forward(kThreads, s, x.data(), w.data(), b.data(), affine.data());
  channel_affine_backward(kThreads, s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  shift_scale_forward(kThreads, s, x.data(), w.data(), b.data(), shifted.data());
  Floats want_dw(w.size(), 0.0f), want_db(b.size(), 0.0f);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < channels; ++c) {
      const size_t i = static_cast<size_t>(r * channels + c), k = static_cast<size_t>(c);
      EXPECT_NEAR(affine[i], x[i] * w[k] + b[k], 1e-6);
      EXPECT_NEAR(dx[i], dy[i] * w[k], 1e-6);
      EXPECT_NEAR(shifted[i], (x[i] - w[k]) * b[k], 1e-6);
      want_dw[k] += dy[i] * x[i], want_db[k] += dy[i];
    }
  EXPECT_LT(error(dw, want_dw), 1e-5);
  EXPECT_LT(error(db, want_db), 1e-5);
}

TEST(SveBatchNorm, TrainingEvaluationAndGradients) {
  const RowsByChannels s{301, 19};
  const BatchNormAttrs a{1e-3, 0.1};
  Floats x = random_floats(static_cast<size_t>(s.size()), 30, 99.0f, 101.0f);  // far from 0: two passes needed
  const Floats gamma = random_floats(static_cast<size_t>(s.channels), 31), beta = random_floats(static_cast<size_t>(s.channels), 32);
  const Floats dy = random_floats(x.size(), 33);
  Floats running_mean(gamma.size(), 0.5f), running_var(gamma.size(), 2.0f), saved(2 * gamma.size()), y(x.size());
  batch_norm_train_forward(kThreads, s, a, x.data(), gamma.data(), beta.data(), running_mean.data(), running_var.data(),
                           saved.data(), y.data());
  Floats dx(x.size(), 0.0f), dgamma(gamma.size(), 0.0f), dbeta(beta.size(), 0.0f);
  batch_norm_backward(kThreads, s, x.data(), gamma.data(), saved.data(), dy.data(), dx.data(), dgamma.data(), dbeta.data());
  const double m = static_cast<double>(s.rows);
  for (int64_t c = 0; c < s.channels; ++c) {
    double mean = 0, var = 0, sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t r = 0; r < s.rows; ++r) mean += x[static_cast<size_t>(r * s.channels + c)];
    mean /= m;
    for (int64_t r = 0; r < s.rows; ++r) var += std::pow(x[static_cast<size_t>(r * s.channels + c)] - mean, 2);
    var /= m;
    const double inverse_std = 1 / std::sqrt(var + a.eps);
    const size_t k = static_cast<size_t>(c);
    EXPECT_NEAR(running_mean[k], 0.9 * 0.5 + 0.1 * mean, 1e-4);
    EXPECT_NEAR(running_var[k], 0.9 * 2.0 + 0.1 * var * m / (m - 1), 1e-5);
    for (int64_t r = 0; r < s.rows; ++r) {
      const size_t i = static_cast<size_t>(r * s.channels + c);
      const double xhat = (x[i] - mean) * inverse_std;
      EXPECT_NEAR(y[i], gamma[k] * xhat + beta[k], 2e-4);
      sum_dy += dy[i], sum_dy_xhat += dy[i] * xhat;
    }
    EXPECT_NEAR(dbeta[k], sum_dy, 1e-4);
    EXPECT_NEAR(dgamma[k], sum_dy_xhat, 1e-3);
    for (int64_t r = 0; r < s.rows; ++r) {
      const size_t i = static_cast<size_t>(r * s.channels + c);
      const double xhat = (x[i] - mean) * inverse_std;
      EXPECT_NEAR(dx[i], gamma[k] * inverse_std * (dy[i] - sum_dy / m - xhat * sum_dy_xhat / m), 2e-3);
    }
  }
  batch_norm_eval_forward(kThreads, s, a, x.data(), gamma.data(), beta.data(), running_mean.data(), running_var.data(), y.data());
  EXPECT_NEAR(y[20], gamma[1] * (x[20] - running_mean[1]) / std::sqrt(running_var[1] + a.eps) + beta[1], 1e-3);
}

// ---- losses and optimizers ------------------------------------------------------------------------

TEST(SveLoss, ReductionsAndSegmentation) {
  const int64_t n = 4099;
  const Floats p = random_floats(static_cast<size_t>(n), 40), t = random_floats(static_cast<size_t>(n), 41);
  double sse = 0, sae = 0;
  for (size_t i = 0; i < p.size(); ++i) sse += std::pow(double(p[i]) - t[i], 2), sae += std::fabs(double(p[i]) - t[i]);
  EXPECT_NEAR(mse_forward(kThreads, n, p.data(), t.data()), sse / n, 1e-6);
  EXPECT_NEAR(abs_error_sum(kThreads, n, p.data(), t.data()), sae, 1e-6 * sae);
  Floats dp(p.size(), 0.0f), dt(t.size(), 0.0f);
  mse_backward(kThreads, n, p.data(), t.data(), 0.5f, dp.data(), dt.data());
  EXPECT_FLOAT_EQ(dp[17], 2 * 0.5f / n * (p[17] - t[17]));
  EXPECT_FLOAT_EQ(dt[17], -dp[17]);

  const RowsByChannels s{50, 3};
  const Floats logits = random_floats(static_cast<size_t>(s.size()), 42, -3.0f, 3.0f), weights{0.5f, 1.0f, 2.0f};
  std::vector<int32_t> labels(static_cast<size_t>(s.rows));
  for (size_t r = 0; r < labels.size(); ++r) labels[r] = static_cast<int32_t>(r % 3);
  double loss = 0;
  Floats want(logits.size(), 0.0f), got(logits.size(), 0.0f);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* z = logits.data() + r * 3;
    const double lse = std::log(std::exp(double(z[0])) + std::exp(double(z[1])) + std::exp(double(z[2])));
    const size_t l = static_cast<size_t>(labels[static_cast<size_t>(r)]);
    loss += weights[l] * (lse - z[l]);
    for (size_t c = 0; c < 3; ++c) want[static_cast<size_t>(r * 3) + c] = static_cast<float>(weights[l] / s.rows * (std::exp(z[c] - lse) - (c == l)));
  }
  EXPECT_NEAR(softmax_cross_entropy_forward(kThreads, s, logits.data(), labels.data(), weights.data()), loss / s.rows, 1e-9);
  softmax_cross_entropy_backward(kThreads, s, logits.data(), labels.data(), weights.data(), 1.0f, got.data());
  EXPECT_LT(error(got, want), 1e-6);
  float iou[2];
  iou_forward(kThreads, s, 2, logits.data(), labels.data(), iou);
  EXPECT_GT(iou[0], 0.0f);
  EXPECT_LE(iou[1], 1.0f);
}

TEST(SveOptimizer, UpdatesFollowTheFormulas) {
  const int64_t n = 1029;
  const Floats g = random_floats(static_cast<size_t>(n), 50), w0 = random_floats(static_cast<size_t>(n), 51);
  double squares = 0;
  for (float v : w0) squares += double(v) * v;
  EXPECT_NEAR(sum_of_squares(kThreads, n, w0.data()), squares, 1e-6 * squares);

  Floats w = w0, velocity(static_cast<size_t>(n), 0.25f);
  sgd_keras_update(kThreads, n, 0.1, 0.9, g.data(), velocity.data(), w.data());
  EXPECT_FLOAT_EQ(velocity[9], 0.9f * 0.25f - 0.1f * g[9]);
  EXPECT_FLOAT_EQ(w[9], w0[9] + velocity[9]);

  Floats dw(static_cast<size_t>(n), 1.0f);
  l2_backward(kThreads, n, 0.01, w0.data(), dw.data());
  EXPECT_FLOAT_EQ(dw[3], 1.0f + 0.02f * w0[3]);

  const AdamAttrs a{0.9, 0.999, 1e-6, 0.05, 1.0};
  for (bool decoupled : {false, true}) {
    Floats m(static_cast<size_t>(n), 0.1f), v(static_cast<size_t>(n), 0.2f), p = w0;
    adam_update(kThreads, n, 1e-3, a, 3, 0.05, decoupled, g.data(), m.data(), v.data(), p.data());
    const double bc1 = 1 - std::pow(0.9, 3), bc2 = 1 - std::pow(0.999, 3);
    for (size_t i : {size_t{0}, size_t{500}, size_t{1028}}) {
      const double shrunk = decoupled ? w0[i] * (1 - 1e-3 * 0.05) : w0[i];
      const double grad = g[i] + (decoupled ? 0.0 : 0.05 * w0[i]);
      const double mi = 0.9 * 0.1 + 0.1 * grad, vi = 0.999 * 0.2 + 0.001 * grad * grad;
      EXPECT_NEAR(m[i], mi, 1e-6);
      EXPECT_NEAR(v[i], vi, 1e-6);
      EXPECT_NEAR(p[i], shrunk - 1e-3 / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + 1e-6), 1e-6);
    }
  }
  Floats m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f), p = w0, update(static_cast<size_t>(n));
  lamb_update(kThreads, n, 1e-2, a, 1, 0.05, 2.0f, g.data(), m.data(), v.data(), p.data(), update.data());
  double p_square = 0, u_square = 0;
  std::vector<double> u(static_cast<size_t>(n));
  for (size_t i = 0; i < u.size(); ++i) {
    const double grad = g[i] / 2.0, mi = 0.1 * grad, vi = 0.001 * grad * grad;
    u[i] = (mi / 0.1) / (std::sqrt(vi / 0.001) + 1e-6) + 0.05 * w0[i];
    p_square += double(w0[i]) * w0[i], u_square += u[i] * u[i];
  }
  const double ratio = std::sqrt(p_square) / std::sqrt(u_square);
  for (size_t i : {size_t{1}, size_t{700}}) EXPECT_NEAR(p[i], w0[i] - 1e-2 * ratio * u[i], 1e-5);
}

}  // namespace
}  // namespace mlph::a64fx
