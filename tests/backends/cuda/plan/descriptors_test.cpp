// The lowering's cuDNN descriptors and cuBLASLt layouts (backends/cuda/plan/lowering.hpp), run by small
// emulations of the libraries' documented semantics against the ops' definitions (docs/ops.md): convs,
// conv_transpose, padded channels, dense layers and 1x1 convs as gemms.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "plan_fixtures.hpp"

namespace mlph::cuda::plan {
namespace {

using namespace fixtures;  // the folder's shared helpers (plan_fixtures.hpp)

// A tensor seen through a descriptor, its spatial dims right-aligned into 3 (as Window).
struct View {
  int64_t n = 1, c = 1, s[3] = {1, 1, 1};
  int64_t sn = 0, sc = 0, ss[3] = {0, 0, 0};
  View(const TensorDesc& t, int spatial) : n(t.dims[0]), c(t.dims[1]), sn(t.strides[0]), sc(t.strides[1]) {
    for (int d = 0; d < spatial; ++d) {
      s[3 - spatial + d] = t.dims[static_cast<size_t>(2 + d)];
      ss[3 - spatial + d] = t.strides[static_cast<size_t>(2 + d)];
    }
  }
  int64_t size() const { return n * c * s[0] * s[1] * s[2]; }
  int64_t at(int64_t in, int64_t ic, const int64_t p[3]) const {
    return in * sn + ic * sc + p[0] * ss[0] + p[1] * ss[1] + p[2] * ss[2];
  }
};

// For each position of `extent` (3 dims).
void for_each(const int64_t extent[3], const std::function<void(const int64_t*)>& f) {
  int64_t p[3];
  for (p[0] = 0; p[0] < extent[0]; ++p[0])
    for (p[1] = 0; p[1] < extent[1]; ++p[1])
      for (p[2] = 0; p[2] < extent[2]; ++p[2]) f(p);
}

// cuDNN's semantics on a ConvPlan, from its documentation: cross-correlation of `in` (N, C, spatial)
// with the NHWC filter [K, spatial..., C/groups], symmetric zero padding `pad`.
struct CudnnEmulation {
  const ConvPlan& c;
  View in, out;
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};

  explicit CudnnEmulation(const ConvPlan& plan)
      : c(plan), in(plan.explicit_padding ? plan.padded : plan.in, plan.spatial), out(plan.out, plan.spatial) {
    for (int d = 0; d < c.spatial; ++d) {
      const auto e = static_cast<size_t>(3 - c.spatial + d), i = static_cast<size_t>(d);
      kernel[e] = c.filter.dims[2 + i], stride[e] = c.stride[i], dilation[e] = c.dilation[i], pad[e] = c.pad[i];
    }
  }
  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t filter_at(int64_t k, int64_t ci, const int64_t r[3]) const {  // NHWC: [K, R..., C/g]
    return (k * taps() + (r[0] * kernel[1] + r[1]) * kernel[2] + r[2]) * c.filter.dims[1] + ci;
  }
  // Calls f(input offset, output offset, filter offset) for every product of the convolution.
  void products(const std::function<void(int64_t, int64_t, int64_t)>& f) const {
    const int64_t group_in = c.filter.dims[1], group_out = out.c / c.groups;
    for (int64_t n = 0; n < out.n; ++n)
      for (int64_t k = 0; k < out.c; ++k)
        for_each(out.s, [&](const int64_t* o) {
          for_each(kernel, [&](const int64_t* r) {
            int64_t i[3];
            for (int d = 0; d < 3; ++d) {
              i[d] = o[d] * stride[d] - pad[d] + r[d] * dilation[d];
              if (i[d] < 0 || i[d] >= in.s[d]) return;
            }
            for (int64_t ci = 0; ci < group_in; ++ci)
              f(in.at(n, k / group_out * group_in + ci, i), out.at(n, k, o), filter_at(k, ci, r));
          });
        });
  }
  // f(unpadded, padded) for each element the explicit padding copy moves: its index in the caller's
  // input and in the padded buffer (elements past `copied` no window reaches, and are not moved).
  template <class F>
  void for_each_copied(const View& unpadded, F f) const {
    for (int64_t n = 0; n < in.n; ++n)
      for (int64_t ch = 0; ch < in.c; ++ch)
        for_each(unpadded.s, [&](const int64_t* p) {
          int64_t q[3];
          for (int d = 0; d < 3; ++d) {
            const int64_t e = d - (3 - c.spatial);
            if (e >= 0 && p[d] >= c.copied[static_cast<size_t>(e)]) return;
            q[d] = p[d] + (e >= 0 ? c.offset[static_cast<size_t>(e)] : 0);
          }
          f(unpadded.at(n, ch, p), in.at(n, ch, q));
        });
  }
  // The explicit padding copy (identity when cuDNN pads).
  std::vector<float> pad_input(const std::vector<float>& x) const {
    if (!c.explicit_padding) return x;
    const View unpadded(c.in, c.spatial);
    std::vector<float> padded(static_cast<size_t>(in.size()), 0.0f);
    for_each_copied(unpadded, [&](int64_t from, int64_t to) { padded[static_cast<size_t>(to)] = x[static_cast<size_t>(from)]; });
    return padded;
  }
  std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& w) const {
    const std::vector<float> xp = pad_input(x);
    std::vector<float> y(static_cast<size_t>(out.size()), 0.0f);
    products([&](int64_t i, int64_t o, int64_t f) { y[static_cast<size_t>(o)] += xp[static_cast<size_t>(i)] * w[static_cast<size_t>(f)]; });
    return y;
  }
  // cudnnConvolutionBackwardData: the adjoint, into the (padded) input, cropped when padding is explicit.
  std::vector<float> backward_data(const std::vector<float>& dy, const std::vector<float>& w) const {
    std::vector<float> dx(static_cast<size_t>(in.size()), 0.0f);
    products([&](int64_t i, int64_t o, int64_t f) { dx[static_cast<size_t>(i)] += dy[static_cast<size_t>(o)] * w[static_cast<size_t>(f)]; });
    if (!c.explicit_padding) return dx;
    const View unpadded(c.in, c.spatial);
    std::vector<float> cropped(static_cast<size_t>(unpadded.size()), 0.0f);  // no window reaches the rest: 0
    for_each_copied(unpadded, [&](int64_t to, int64_t from) { cropped[static_cast<size_t>(to)] = dx[static_cast<size_t>(from)]; });
    return cropped;
  }
};

struct ConvCase {
  Shape x;  // [N, S..., Ci]
  int64_t co, kernel, stride, dilation, groups;
  std::vector<int64_t> pad_before, pad_after, output_padding;  // per spatial dim
  bool expect_explicit;
};

std::vector<double> padding_attr(const ConvCase& t) {
  std::vector<double> p(t.pad_before.begin(), t.pad_before.end());
  p.insert(p.end(), t.pad_after.begin(), t.pad_after.end());
  return p;
}

// docs/ops.md conv on channels-last x and [K..., Ci/g, Co] weights, spatial dims right-aligned into 3.
std::vector<float> graph_conv(const ConvCase& t, const Shape& out, const std::vector<float>& x, const std::vector<float>& w) {
  const size_t spatial = t.x.size() - 2;
  int64_t in_s[3] = {1, 1, 1}, out_s[3] = {1, 1, 1}, k[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  for (size_t d = 0; d < spatial; ++d) {
    in_s[3 - spatial + d] = t.x[1 + d], out_s[3 - spatial + d] = out[1 + d];
    k[3 - spatial + d] = t.kernel, pb[3 - spatial + d] = t.pad_before[d];
  }
  const int64_t ci = t.x.back(), cig = ci / t.groups, cog = t.co / t.groups;
  std::vector<float> y(static_cast<size_t>(count(out)), 0.0f);
  for (int64_t n = 0; n < t.x[0]; ++n)
    for_each(out_s, [&](const int64_t* o) {
      for (int64_t co = 0; co < t.co; ++co) {
        double sum = 0;
        for_each(k, [&](const int64_t* r) {
          int64_t i[3];
          for (int d = 0; d < 3; ++d) {
            const bool real = d >= static_cast<int>(3 - spatial);
            i[d] = real ? o[d] * t.stride - pb[d] + r[d] * t.dilation : 0;
            if (i[d] < 0 || i[d] >= in_s[d]) return;
          }
          const int64_t tap = (r[0] * k[1] + r[1]) * k[2] + r[2];
          for (int64_t c = 0; c < cig; ++c)
            sum += x[static_cast<size_t>((((n * in_s[0] + i[0]) * in_s[1] + i[1]) * in_s[2] + i[2]) * ci + co / cog * cig + c)] *
                   w[static_cast<size_t>((tap * cig + c) * t.co + co)];
        });
        y[static_cast<size_t>((((n * out_s[0] + o[0]) * out_s[1] + o[1]) * out_s[2] + o[2]) * t.co + co)] = static_cast<float>(sum);
      }
    });
  return y;
}

// docs/ops.md conv_transpose: y[n,o,co] = sum over i,k,ci with o = i*s - p_before + k*d of x[n,i,ci]*w[k,co,ci].
std::vector<float> graph_conv_transpose(const ConvCase& t, const Shape& out, const std::vector<float>& x,
                                        const std::vector<float>& w) {
  const size_t spatial = t.x.size() - 2;
  int64_t in_s[3] = {1, 1, 1}, out_s[3] = {1, 1, 1}, k[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  for (size_t d = 0; d < spatial; ++d) {
    in_s[3 - spatial + d] = t.x[1 + d], out_s[3 - spatial + d] = out[1 + d];
    k[3 - spatial + d] = t.kernel, pb[3 - spatial + d] = t.pad_before[d];
  }
  const int64_t ci = t.x.back();
  std::vector<float> y(static_cast<size_t>(count(out)), 0.0f);
  for (int64_t n = 0; n < t.x[0]; ++n)
    for_each(in_s, [&](const int64_t* i) {
      for_each(k, [&](const int64_t* r) {
        int64_t o[3];
        for (int d = 0; d < 3; ++d) {
          const bool real = d >= static_cast<int>(3 - spatial);
          o[d] = real ? i[d] * t.stride - pb[d] + r[d] * t.dilation : 0;
          if (o[d] < 0 || o[d] >= out_s[d]) return;
        }
        const int64_t tap = (r[0] * k[1] + r[1]) * k[2] + r[2];
        for (int64_t co = 0; co < t.co; ++co)
          for (int64_t c = 0; c < ci; ++c)
            y[static_cast<size_t>((((n * out_s[0] + o[0]) * out_s[1] + o[1]) * out_s[2] + o[2]) * t.co + co)] +=
                x[static_cast<size_t>((((n * in_s[0] + i[0]) * in_s[1] + i[1]) * in_s[2] + i[2]) * ci + c)] *
                w[static_cast<size_t>((tap * t.co + co) * ci + c)];
      });
    });
  return y;
}

Shape conv_output(const ConvCase& t) {
  Shape out{t.x[0]};
  for (size_t d = 0; d + 2 < t.x.size(); ++d)
    out.push_back((t.x[1 + d] + t.pad_before[d] + t.pad_after[d] - t.dilation * (t.kernel - 1) - 1) / t.stride + 1);
  out.push_back(t.co);
  return out;
}
Shape conv_transpose_output(const ConvCase& t) {
  Shape out{t.x[0]};
  for (size_t d = 0; d + 2 < t.x.size(); ++d)
    out.push_back((t.x[1 + d] - 1) * t.stride - t.pad_before[d] - t.pad_after[d] + t.dilation * (t.kernel - 1) +
                  t.output_padding[d] + 1);
  out.push_back(t.co);
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << what << " at " << i;
}

// Every conv of the workloads' kinds, and asymmetric padding: the plan's descriptors, filter layout and
// padding, run with cuDNN's semantics, give the graph's conv.
TEST(CudaPlanConv, DescriptorsComputeTheGraphsConvolution) {
  const ConvCase cases[] = {
      {{2, 7, 6, 3}, 4, 3, 1, 1, 1, {1, 1}, {1, 1}, {}, false},        // DeepCAM 3x3 'same'
      {{1, 9, 8, 4}, 6, 3, 2, 1, 1, {1, 1}, {1, 1}, {}, false},        // strided (xception.conv1)
      {{1, 9, 9, 6}, 6, 3, 1, 2, 6, {2, 2}, {2, 2}, {}, false},        // depthwise, dilated (xception.conv3)
      {{1, 5, 6, 4}, 6, 3, 1, 1, 2, {1, 1}, {1, 1}, {}, false},        // grouped
      {{1, 7, 7, 5}, 3, 1, 2, 1, 1, {0, 0}, {0, 0}, {}, false},        // 1x1 strided skip
      {{2, 6, 5, 4, 4}, 5, 3, 1, 1, 1, {1, 1, 1}, {1, 1, 1}, {}, false},  // CosmoFlow 3x3x3
      {{1, 6, 6, 5, 2}, 3, 2, 1, 1, 1, {0, 0, 0}, {1, 1, 1}, {}, true},   // Keras 'same', even kernel
      {{1, 7, 6, 3}, 2, 3, 2, 1, 1, {0, 1}, {2, 1}, {}, true},            // uneven padding, strided
      {{1, 8, 8, 2}, 2, 3, 2, 1, 1, {1, 1}, {0, 0}, {}, false},           // less after, same windows
  };
  int explicit_count = 0;
  for (const ConvCase& t : cases) {
    Net net;
    const size_t spatial = t.x.size() - 2;
    Shape wshape(spatial, t.kernel);
    wshape.push_back(t.x.back() / t.groups), wshape.push_back(t.co);
    const Shape out = conv_output(t);
    const int32_t y = net.op("conv", "conv", {net.input("x", t.x), net.param("w", wshape)}, out,
                             {{"stride", std::vector<double>(spatial, static_cast<double>(t.stride))},
                              {"dilation", std::vector<double>(spatial, static_cast<double>(t.dilation))},
                              {"padding", padding_attr(t)},
                              {"groups", static_cast<double>(t.groups)}});
    const Program p = net.lower(y);
    const ConvPlan c = plan_conv(p, node_named(p, "conv"));
    EXPECT_EQ(c.explicit_padding, t.expect_explicit) << "case " << &t - cases;
    explicit_count += c.explicit_padding;
    const std::vector<float> xs = random_floats(static_cast<size_t>(count(t.x)), 1);
    const std::vector<float>& ws = p.params[0].init;
    const CudnnEmulation cudnn(c);
    expect_near(cudnn.forward(xs, device_filter(c.filter, ws)), graph_conv(t, out, xs, ws),
                "conv case " + std::to_string(&t - cases));
  }
  EXPECT_EQ(explicit_count, 2);
}

// conv_transpose as cuDNN's backward-data of its adjoint conv: DeepCAM's upsampling, and padding that
// cuDNN cannot take symmetrically.
TEST(CudaPlanConv, TransposeIsTheAdjointsBackwardData) {
  const ConvCase cases[] = {
      {{2, 3, 4, 5}, 3, 3, 2, 1, 1, {1, 1}, {1, 1}, {1, 1}, false},  // DeepCAM deconv (k3 s2 p1 op1)
      {{1, 4, 3, 2}, 3, 2, 2, 1, 1, {0, 0}, {0, 0}, {0, 0}, false},
      {{1, 5, 4, 2}, 2, 3, 1, 1, 1, {0, 0}, {1, 1}, {0, 0}, true},   // padding after only
      {{1, 3, 3, 2, 2}, 2, 3, 2, 1, 1, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, false},  // symmetric 1 is exact
      {{1, 3, 3, 2, 2}, 2, 3, 2, 1, 1, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, true},
      {{1, 4, 4, 2}, 2, 3, 1, 2, 1, {2, 2}, {2, 2}, {0, 0}, false},  // dilated
      {{1, 4, 4, 2}, 2, 3, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, true},   // the last row and column: no window
  };
  for (const ConvCase& t : cases) {
    Net net;
    const int32_t x = net.input("x", t.x);
    Shape wshape(t.x.size() - 2, t.kernel);
    wshape.push_back(t.co), wshape.push_back(t.x.back());  // [K..., Co, Ci]
    const int32_t w = net.param("w", wshape);
    const size_t spatial = t.x.size() - 2;
    const Shape out = conv_transpose_output(t);
    const int32_t y = net.op("conv_transpose", "up", {x, w}, out,
                             {{"stride", std::vector<double>(spatial, static_cast<double>(t.stride))},
                              {"dilation", std::vector<double>(spatial, static_cast<double>(t.dilation))},
                              {"padding", padding_attr(t)},
                              {"output_padding", std::vector<double>(t.output_padding.begin(), t.output_padding.end())}});
    const Program p = net.lower(y);
    const ConvPlan c = plan_conv(p, node_named(p, "up"));
    EXPECT_TRUE(c.transpose);
    EXPECT_EQ(c.explicit_padding, t.expect_explicit) << "case " << &t - cases;
    const std::vector<float> xs = random_floats(static_cast<size_t>(count(t.x)), 2);
    const std::vector<float>& ws = p.params[0].init;
    const CudnnEmulation cudnn(c);
    expect_near(cudnn.backward_data(xs, device_filter(c.filter, ws)), graph_conv_transpose(t, out, xs, ws),
                "conv_transpose case " + std::to_string(&t - cases));
  }
}

TEST(CudaPlanConv, FilterIsCudnnNhwcWithGroupsAndTheTransposeOfTheGraphsLayout) {
  Net net;
  const int32_t x = net.input("x", {1, 6, 6, 8});
  const int32_t w = net.param("w", {3, 3, 2, 12});  // groups 4: Ci/g = 2
  const int32_t y = net.op("conv", "conv", {x, w}, {1, 6, 6, 12}, {{"padding", {1, 1}}, {"groups", 4}});
  const Program p = net.lower(y);
  const ConvPlan c = plan_conv(p, node_named(p, "conv"));
  EXPECT_EQ(c.filter.rank, 4);
  EXPECT_EQ((std::array<int64_t, 4>{c.filter.dims[0], c.filter.dims[1], c.filter.dims[2], c.filter.dims[3]}),
            (std::array<int64_t, 4>{12, 2, 3, 3}));
  EXPECT_EQ(c.filter.rows, 18);
  EXPECT_EQ(c.filter.cols, 12);
  EXPECT_EQ(c.groups, 4);
  EXPECT_EQ(c.pad[0], 1);
  EXPECT_EQ(c.pad[1], 1);
  EXPECT_FALSE(c.bias);
}

// [rows, width] rows widened to `padded` with zeros.
std::vector<float> pad_rows(const std::vector<float>& v, int64_t width, int64_t padded) {
  std::vector<float> out(v.size() / static_cast<size_t>(width) * static_cast<size_t>(padded), 0.0f);
  for (size_t r = 0; r < v.size() / static_cast<size_t>(width); ++r)
    for (int64_t c = 0; c < width; ++c) out[r * static_cast<size_t>(padded) + static_cast<size_t>(c)] = v[r * static_cast<size_t>(width) + static_cast<size_t>(c)];
  return out;
}

// A conv with 4 input channels padded to 8 (x with zeros in 4-7, zero weight rows) is the graph's conv,
// and a conv_transpose with 3 output channels padded to 8 gives the graph's output in its first 3.
TEST(CudaPlanPadding, PaddedDescriptorsComputeTheGraphsConvAndConvTranspose) {
  {
    const ConvCase t{{2, 5, 4, 3, 4}, 6, 3, 1, 1, 1, {1, 1, 1}, {1, 1, 1}, {}, false};  // CosmoFlow conv1's shape
    Net net;
    const Shape out = conv_output(t);
    const int32_t y = net.op("conv", "conv1", {net.input("x", t.x), net.param("w", {3, 3, 3, 4, 6})}, out, {{"padding", {1, 1, 1}}});
    const Program p = net.lower(y);
    ConvPlan c = plan_conv(p, node_named(p, "conv1"));
    const ConvPlan plain = c;
    ASSERT_TRUE(pads_channels(c, true, false));
    EXPECT_FALSE(pads_channels(c, false, false));  // fp32, tf32: no tensor cores to feed
    EXPECT_FALSE(pads_channels(c, true, true));    // a padded dx would need cropping
    pad_channels(c, false);
    EXPECT_EQ(c.channels, 4);
    EXPECT_EQ(c.in.dims[1], 8);
    EXPECT_EQ(c.in.strides[0], 5 * 4 * 3 * 8);
    EXPECT_EQ(c.filter.dims[1], 8);
    EXPECT_EQ(c.filter.rows, 27 * 8);
    const std::vector<float> x = random_floats(static_cast<size_t>(count(t.x)), 61);
    const std::vector<float>& w = p.params[0].init;
    // The weights' half copy: the masters (cuDNN's layout, Ci innermost) with each row of Ci padded.
    expect_near(CudnnEmulation(c).forward(pad_rows(x, 4, 8), pad_rows(device_filter(plain.filter, w), 4, 8)),
                graph_conv(t, out, x, w), "padded conv");
  }
  {
    const ConvCase t{{2, 3, 4, 16}, 3, 3, 2, 1, 1, {1, 1}, {1, 1}, {1, 1}, false};  // DeepCAM last_deconv's shape
    Net net;
    const Shape out = conv_transpose_output(t);
    const int32_t y = net.op("conv_transpose", "up", {net.input("x", t.x), net.param("w", {3, 3, 3, 16})}, out,
                             {{"stride", {2, 2}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
    const Program p = net.lower(y);
    ConvPlan c = plan_conv(p, node_named(p, "up"));
    const ConvPlan plain = c;
    ASSERT_TRUE(pads_channels(c, true, true));
    pad_channels(c, true);  // a conv_transpose folds nothing
    EXPECT_EQ(c.taps, 1);
    EXPECT_EQ(c.channels, 3);
    EXPECT_EQ(c.in.dims[1], 8);  // the adjoint's input: the node's output
    const std::vector<float> x = random_floats(static_cast<size_t>(count(t.x)), 62);
    const std::vector<float>& w = p.params[0].init;
    const std::vector<float> y8 = CudnnEmulation(c).backward_data(x, pad_rows(device_filter(plain.filter, w), 3, 8));
    std::vector<float> y3;
    for (size_t r = 0; r < y8.size() / 8; ++r) y3.insert(y3.end(), y8.begin() + static_cast<long>(r * 8), y8.begin() + static_cast<long>(r * 8 + 3));
    expect_near(y3, graph_conv_transpose(t, out, x, w), "padded conv_transpose, cropped");
    for (size_t r = 0; r < y8.size() / 8; ++r) EXPECT_EQ(y8[r * 8 + 5], 0.0f);  // zero rows write zeros
  }
}

// x [lines, width, C] as [lines, out_width, taps * C] padded to `padded`: row (l, p) holds x's
// positions p + t - pad of line l side by side, zeros outside x (ConvPlan::taps, written out).
std::vector<float> fold_taps(const std::vector<float>& x, int64_t width, int64_t channels, int64_t out_width,
                             int64_t taps, int64_t pad, int64_t padded) {
  const int64_t lines = static_cast<int64_t>(x.size()) / (width * channels);
  std::vector<float> y(static_cast<size_t>(lines * out_width * padded), 0.0f);
  for (int64_t l = 0; l < lines; ++l)
    for (int64_t p = 0; p < out_width; ++p)
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t at = p + t - pad;
        if (at < 0 || at >= width) continue;
        for (int64_t c = 0; c < channels; ++c)
          y[static_cast<size_t>((l * out_width + p) * padded + t * channels + c)] = x[static_cast<size_t>((l * width + at) * channels + c)];
      }
  return y;
}

// CosmoFlow conv1's shape with its 3 taps along w folded into the channels (4 x 3 = 12, padded to 16):
// a 3x3x1 conv over x's shifted copies, with the graph's weights as they lie, is the graph's conv,
// with cuDNN's padding ('same') and without it ('valid': the copies at the output's 1 position).
// Where folding pads no less (6 channels: 18 -> 24 against 8 x 3) or the conv strides along w, the
// conv is padded only.
TEST(CudaPlanPadding, FoldedTapsComputeTheGraphsConv) {
  for (const int64_t pad : {1, 0}) {
    SCOPED_TRACE("padding " + std::to_string(pad));
    const ConvCase t{{2, 5, 4, 3, 4}, 6, 3, 1, 1, 1, {pad, pad, pad}, {pad, pad, pad}, {}, false};
    Net net;
    const Shape out = conv_output(t);
    const int32_t y = net.op("conv", "conv1", {net.input("x", t.x), net.param("w", {3, 3, 3, 4, 6})}, out,
                             {{"padding", padding_attr(t)}});
    const Program p = net.lower(y);
    ConvPlan c = plan_conv(p, node_named(p, "conv1"));
    const ConvPlan plain = c;
    pad_channels(c, true);
    EXPECT_EQ(c.taps, 3);
    EXPECT_EQ(c.tap_pad, pad);
    EXPECT_EQ(c.channels, 12);
    EXPECT_EQ(c.padded_channels, 16);
    EXPECT_EQ((std::array<int64_t, 5>{c.in.dims[0], c.in.dims[1], c.in.dims[2], c.in.dims[3], c.in.dims[4]}),
              (std::array<int64_t, 5>{2, 16, 5, 4, out[3]}));
    EXPECT_EQ((std::array<int64_t, 5>{c.filter.dims[0], c.filter.dims[1], c.filter.dims[2], c.filter.dims[3], c.filter.dims[4]}),
              (std::array<int64_t, 5>{6, 16, 3, 3, 1}));
    EXPECT_EQ(c.filter.rows, 9 * 16);
    EXPECT_EQ(c.pad[2], 0);
    EXPECT_EQ(c.pad[1], pad);
    const std::vector<float> x = random_floats(static_cast<size_t>(count(t.x)), 63);
    const std::vector<float>& w = p.params[0].init;
    expect_near(CudnnEmulation(c).forward(fold_taps(x, 3, 4, out[3], 3, pad, 16), pad_rows(device_filter(plain.filter, w), 12, 16)),
                graph_conv(t, out, x, w), "conv with folded taps");
  }
  for (const auto& [channels, stride] : {std::pair<int64_t, int64_t>{6, 1}, {4, 2}}) {
    const ConvCase t{{2, 5, 4, 6, channels}, 6, 3, 1, 1, 1, {1, 1, 1}, {1, 1, 1}, {}, false};
    Shape out = conv_output(t);
    out[3] = (6 + 2 - 3) / stride + 1;  // the stride along w alone
    Net net;
    const int32_t y = net.op("conv", "conv1", {net.input("x", t.x), net.param("w", {3, 3, 3, channels, 6})}, out,
                             {{"padding", padding_attr(t)}, {"stride", {1.0, 1.0, double(stride)}}});
    const Program p = net.lower(y);
    ConvPlan c = plan_conv(p, node_named(p, "conv1"));
    ASSERT_TRUE(pads_channels(c, true, false));
    pad_channels(c, true);
    EXPECT_EQ(c.taps, 1) << channels << " channels, stride " << stride;
    EXPECT_EQ(c.padded_channels, 8);
    EXPECT_EQ(c.filter.dims[4], 3);
  }
}

// cuBLASLt's column-major D = op(A) op(B), leading dimensions as stored.
// cuBLASLt's matmul as documented (column-major, strided batch), each product rounded to fp32 once.
std::vector<float> gemm(const Gemm& g, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(static_cast<size_t>(g.ldd * g.n + (g.batch - 1) * g.stride_d), 0.0f);
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    const float* pa = a.data() + batch * g.stride_a;
    const float* pb = b.data() + batch * g.stride_b;
    float* pd = d.data() + batch * g.stride_d;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < g.k; ++k) {
          const float av = g.transpose_a ? pa[i * g.lda + k] : pa[k * g.lda + i];
          const float bv = g.transpose_b ? pb[k * g.ldb + j] : pb[j * g.ldb + k];
          sum += av * bv;
        }
        pd[j * g.ldd + i] = static_cast<float>(sum);
      }
  }
  return d;
}

TEST(CudaPlanDense, GemmsComputeForwardAndBothGradientsOnRowMajorBuffers) {
  const int64_t batch = 3, in = 5, out = 4;
  Node node;
  node.dense = {batch, in, out};
  node.inputs = {0, 1, 2};
  const DensePlan d = plan_dense(node);
  EXPECT_TRUE(d.bias);
  const std::vector<float> x = random_floats(batch * in, 3), w = random_floats(in * out, 4), dy = random_floats(batch * out, 5);
  std::vector<float> y(batch * out, 0.0f), dx(batch * in, 0.0f), dw(in * out, 0.0f);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) {
        y[static_cast<size_t>(n * out + o)] += x[static_cast<size_t>(n * in + i)] * w[static_cast<size_t>(i * out + o)];
        dx[static_cast<size_t>(n * in + i)] += dy[static_cast<size_t>(n * out + o)] * w[static_cast<size_t>(i * out + o)];
        dw[static_cast<size_t>(i * out + o)] += x[static_cast<size_t>(n * in + i)] * dy[static_cast<size_t>(n * out + o)];
      }
  expect_near(gemm(d.forward, w, x), y, "forward");
  expect_near(gemm(d.backward_data, w, dy), dx, "backward data");
  expect_near(gemm(d.backward_weights, dy, x), dw, "backward weights");
}

// A 1x1 stride-1 conv (2-D and 3-D, with a bias, channels not a multiple of 8) lowered to cuBLASLt:
// its forward is the graph's conv, its data and weight gradients the conv's adjoints, and a
// deterministic dw in 3 chunks (a strided batch and the partials summed in chunk order) is the same dw.
TEST(CudaPlanPointwise, GemmsComputeThe1x1ConvAndItsGradientsOnChannelsLastRows) {
  for (const Shape& xshape : {Shape{2, 3, 5, 7}, Shape{1, 3, 2, 4, 5}}) {
    const int64_t ci = xshape.back(), co = 6, rows = count(xshape) / ci;
    Net net;
    const size_t spatial = xshape.size() - 2;
    Shape wshape(spatial, 1);
    wshape.push_back(ci), wshape.push_back(co);
    Shape yshape = xshape;
    yshape.back() = co;
    const int32_t y = net.op("conv", "pw", {net.input("x", xshape), net.param("w", wshape), net.param("b", {co})}, yshape);
    const Program p = net.lower(y);
    const NodeLowering l = lower_nodes(p)[index_of(p, "pw")];
    ASSERT_EQ(l.engine, Engine::cublaslt_dense);
    ASSERT_TRUE(l.dense && !l.conv);
    const DensePlan& d = *l.dense;
    EXPECT_TRUE(d.bias);
    EXPECT_EQ(d.weight_chunks, 1);
    const std::vector<float> x = random_floats(static_cast<size_t>(count(xshape)), 11);
    const std::vector<float>& w = p.params[0].init;
    const std::vector<float> dy = random_floats(static_cast<size_t>(rows * co), 12);
    const ConvCase t{xshape, co, 1, 1, 1, 1, std::vector<int64_t>(spatial, 0), std::vector<int64_t>(spatial, 0), {}, false};
    expect_near(gemm(d.forward, w, x), graph_conv(t, yshape, x, w), "forward");
    std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o) {
          dx[static_cast<size_t>(r * ci + i)] += dy[static_cast<size_t>(r * co + o)] * w[static_cast<size_t>(i * co + o)];
          dw[static_cast<size_t>(i * co + o)] += x[static_cast<size_t>(r * ci + i)] * dy[static_cast<size_t>(r * co + o)];
        }
    expect_near(gemm(d.backward_data, w, dy), dx, "backward data");
    expect_near(gemm(d.backward_weights, dy, x), dw, "backward weights");

    ASSERT_EQ(rows % 3, 0);
    const DensePlan chunked = plan_matmul(rows, ci, co, true, 3);
    EXPECT_EQ(chunked.backward_weights.batch, 3);
    EXPECT_EQ(chunked.partial_bytes(), static_cast<size_t>(3 * ci * co) * sizeof(float));
    const std::vector<float> partials = gemm(chunked.backward_weights, dy, x);
    std::vector<float> summed(w.size(), 0.0f);
    for (size_t i = 0; i < summed.size(); ++i)
      for (int64_t c = 0; c < 3; ++c) summed[i] += partials[static_cast<size_t>(c) * summed.size() + i];
    expect_near(summed, dw, "chunked backward weights");
  }
}

TEST(CudaPlanPointwise, OnlyUnpaddedUngroupedStrideOne1x1ConvsAreGemmsAndTheOptionKeepsThemOnCudnn) {
  Net net;
  const int32_t x = net.input("x", {2, 6, 6, 4});
  int32_t h = net.op("conv", "pw", {x, net.param("w0", {1, 1, 4, 4})}, {2, 6, 6, 4});
  h = net.op("conv", "strided", {h, net.param("w1", {1, 1, 4, 4})}, {2, 3, 3, 4}, {{"stride", {2, 2}}});
  h = net.op("conv", "grouped", {h, net.param("w2", {1, 1, 2, 4})}, {2, 3, 3, 4}, {{"groups", 2.0}});
  h = net.op("conv", "padded", {h, net.param("w3", {1, 1, 4, 4})}, {2, 5, 5, 4}, {{"padding", {1, 1}}});
  h = net.op("conv", "k3", {h, net.param("w4", {3, 3, 4, 4})}, {2, 5, 5, 4}, {{"padding", {1, 1}}});
  h = net.op("conv_transpose", "up", {h, net.param("w5", {1, 1, 4, 4})}, {2, 5, 5, 4});
  const Program p = net.lower(h);
  const std::vector<NodeLowering> gemm = lower_nodes(p), cudnn = lower_nodes(p, {Pointwise::cudnn});
  for (const char* name : {"pw", "strided", "grouped", "padded", "k3", "up"}) {
    const bool pointwise = std::string(name) == "pw";
    EXPECT_EQ(is_pointwise(node_named(p, name)), pointwise) << name;
    EXPECT_EQ(gemm[index_of(p, name)].engine == Engine::cublaslt_dense, pointwise) << name;
    EXPECT_NE(cudnn[index_of(p, name)].engine, Engine::cublaslt_dense) << name;
  }
  // In bf16 cuBLASLt writes the pointwise conv's y (and dx) in the half type where y is stored in it (the
  // next conv reads it as stored: bf16 end to end; no scratch, no cast up); on cuDNN, half as always.
  EXPECT_EQ(plan_precision(p, Precision::bf16, gemm).nodes[index_of(p, "pw")].writes, DType::bf16);
  EXPECT_EQ(plan_precision(p, Precision::bf16, gemm).values[static_cast<size_t>(p.nodes[index_of(p, "pw")].output)], DType::bf16);
  EXPECT_EQ(plan_precision(p, Precision::bf16, cudnn).nodes[index_of(p, "pw")].writes, DType::bf16);
  // Its weights are the matrix: in fp32 no device copy, no weight-gradient scratch (cuBLASLt adds dw in place).
  const DevicePlan plan = make_plan(p, {});
  const NodeMemory& m = plan.memory.nodes[index_of(p, "pw")];
  EXPECT_FALSE(plan.memory.weights[static_cast<size_t>(value_named(p, "w0"))]);
  EXPECT_FALSE(m.weight_gradient);
  EXPECT_EQ(plan.memory.regions[static_cast<size_t>(m.reads[1].region)].kind, RegionKind::masters);
  EXPECT_EQ(plan.memory.regions[static_cast<size_t>(m.gradients[1].region)].kind, RegionKind::gradients);
  Options on_cudnn;  // bf16 on cuDNN: a half copy, and dw written in half then cast and added
  on_cudnn.pointwise = Pointwise::cudnn;
  on_cudnn.precision = Precision::bf16;
  EXPECT_TRUE(make_plan(p, on_cudnn).memory.nodes[index_of(p, "pw")].weight_gradient);
  EXPECT_TRUE(make_plan(p, on_cudnn).memory.weights[static_cast<size_t>(value_named(p, "w0"))]);
}

// A deterministic dw fills the GPU with equal slices of the rows; without determinism cuBLASLt's split-K decides.
TEST(CudaPlanPointwise, DeterministicWeightGradientsTakeEqualChunksThatFillTheGpu) {
  const size_t cap = size_t{1} << 30;
  EXPECT_EQ(weight_chunks(1769472, 256, 48, false, cap), 1);     // split-K's business
  EXPECT_EQ(weight_chunks(1769472, 256, 48, true, cap), 64);      // 2 tiles: as many chunks as allowed
  EXPECT_EQ(weight_chunks(27648, 728, 728, true, cap), 8);        // 36 tiles: 264/36 -> 8
  EXPECT_EQ(weight_chunks(27648, 2048, 2048, true, cap), 2);      // 256 tiles: two products reach 264
  EXPECT_EQ(weight_chunks(27648, 4096, 4096, true, cap), 1);      // 1024 tiles fill it alone
  EXPECT_EQ(weight_chunks(4096, 64, 64, true, cap), 2);           // at least kChunkRows rows each
  EXPECT_EQ(weight_chunks(2047, 64, 64, true, cap), 1);
  EXPECT_EQ(weight_chunks(3 * 7 * 2048, 64, 64, true, cap), 21);  // a divisor of the rows: 21, not 64
  EXPECT_EQ(weight_chunks(1 << 20, 1024, 1024, true, size_t{16} << 20), 1);  // 4 MiB partials, a quarter of 16 MiB
  EXPECT_EQ(weight_chunks(1 << 20, 128, 128, true, size_t{1} << 20), 4);   // 64 KiB each, 256 KiB in all
  for (int64_t rows : {4096L, 27648L, 1769472L, 3L * 7 * 2048}) {
    const int64_t chunks = weight_chunks(rows, 100, 30, true, cap);
    EXPECT_EQ(rows % chunks, 0) << rows;
    EXPECT_GE(rows / chunks, kChunkRows) << rows;
  }
  // In the plan: deterministic runs chunk a long dw, others do not.
  Net net;
  const int32_t x = net.input("x", {2, 64, 64, 8});
  const Program p = net.lower(net.op("conv", "pw", {x, net.param("w", {1, 1, 8, 4})}, {2, 64, 64, 4}));
  Options deterministic;
  deterministic.deterministic = true;
  EXPECT_EQ(make_plan(p, {}).nodes[0].dense->weight_chunks, 1);
  const DensePlan& d = *make_plan(p, deterministic).nodes[0].dense;
  EXPECT_EQ(d.weight_chunks, 4);  // 8192 rows: slices of kChunkRows
  EXPECT_EQ(d.backward_weights.k * d.weight_chunks, 2 * 64 * 64);
  EXPECT_EQ(d.backward_weights.stride_b, 8 * d.backward_weights.k);
}

}  // namespace
}  // namespace mlph::cuda::plan
