// The cuda backend's plans (backends/cuda/plan), on the CPU: the lowering's cuDNN descriptors and
// cuBLASLt layouts, run by small emulations of the libraries' documented semantics against the
// ops' definitions (docs/ops.md); the precision plan; the memory plan's lives and placement (no
// two regions live at one step share a byte, brute force); the buckets; the loss scaler; the
// algorithm rule; and the plans of the real CosmoFlow and DeepCAM graphs, with their peak bytes.
#include <gtest/gtest.h>

#include <map>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <set>

#include "mlph/sdk/graph/graph.hpp"
#include "mlph/sdk/program/lower.hpp"
#include "mlph/test/error_of.hpp"
#include "mlph/test/random.hpp"
#include "plan/plan.hpp"

#ifdef MLPH_HAVE_COSMOFLOW
#include "../../../../workloads/cosmoflow/model.hpp"
#endif
#ifdef MLPH_HAVE_DEEPCAM
#include "../../../../workloads/deepcam/model.hpp"
#endif

namespace mlph::cuda::plan {
namespace {

using Shape = std::vector<int64_t>;

using ::mlph::test::random_floats;

int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A graph built op by op, with an mse loss on its last value.
struct Net {
  sdk::GraphBuilder g;
  std::vector<int32_t> inputs;

  int32_t input(const std::string& name, Shape shape, MLPH_DType dtype = MLPH_DTYPE_F32) {
    const int32_t v = g.value(name, dtype, std::move(shape));
    inputs.push_back(v);
    return v;
  }
  int32_t param(const std::string& name, Shape shape, uint32_t flags = MLPH_PARAM_TRAINABLE) {
    const int32_t v = g.value(name, MLPH_DTYPE_F32, shape);
    g.parameter(v, random_floats(static_cast<size_t>(count(shape)), static_cast<uint32_t>(v)), 0.0, 1.0, flags);
    return v;
  }
  int32_t op(const std::string& op, const std::string& name, std::vector<int32_t> in, Shape shape,
             std::vector<sdk::AttrInit> attrs = {}) {
    const int32_t y = g.value(name, MLPH_DTYPE_F32, std::move(shape));
    g.node(op, name, std::move(in), {y}, std::move(attrs));
    return y;
  }
  Shape shape(int32_t v) { return {g.value_info(v).shape, g.value_info(v).shape + g.value_info(v).ndim}; }
  // mse against a target input, sgd_keras.
  Program lower(int32_t prediction, sdk::Implements implements = implemented()) {
    const int32_t target = input("target", shape(prediction));
    g.loss(op("mse", "loss", {prediction, target}, {}));
    g.inputs(inputs);
    g.optimizer("sgd_keras", {{"momentum", 0.9}});
    return sdk::program::lower_graph(*g.graph(), implements);
  }
};

const Node& node_named(const Program& p, const std::string& name) {
  for (const Node& n : p.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}
size_t index_of(const Program& p, const std::string& name) { return static_cast<size_t>(&node_named(p, name) - p.nodes.data()); }
int32_t value_named(const Program& p, const std::string& name) {
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.values[v].name == name) return static_cast<int32_t>(v);
  throw std::runtime_error("no value " + name);
}

using ::mlph::test::error_of;

// ---- descriptors ---------------------------------------------------------------------------------

TEST(CudaPlanLowering, ChannelsLastTensorsHaveCudnnDimsAndNdhwcStrides) {
  const TensorDesc t4 = channels_last({2, 3, 4, 5});  // [N, H, W, C]
  EXPECT_EQ(t4.rank, 4);
  EXPECT_EQ((std::array<int64_t, 4>{t4.dims[0], t4.dims[1], t4.dims[2], t4.dims[3]}), (std::array<int64_t, 4>{2, 5, 3, 4}));
  EXPECT_EQ((std::array<int64_t, 4>{t4.strides[0], t4.strides[1], t4.strides[2], t4.strides[3]}),
            (std::array<int64_t, 4>{60, 1, 20, 5}));
  const TensorDesc t5 = channels_last({2, 3, 4, 5, 6});  // [N, D, H, W, C]
  EXPECT_EQ(t5.dims, (std::array<int64_t, 5>{2, 6, 3, 4, 5}));
  EXPECT_EQ(t5.strides, (std::array<int64_t, 5>{360, 1, 120, 30, 6}));
}

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

// The graph's [rows, cols] weights as the device keeps them: [cols, rows].
std::vector<float> device_filter(const FilterDesc& f, const std::vector<float>& w) {
  std::vector<float> t(w.size());
  for (int64_t r = 0; r < f.rows; ++r)
    for (int64_t c = 0; c < f.cols; ++c) t[static_cast<size_t>(c * f.rows + r)] = w[static_cast<size_t>(r * f.cols + c)];
  return t;
}

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

// ---- the parameters' device layout -----------------------------------------------------------------

// Conv weights on cuDNN live as its NHWC filter (the emulation above reads that), in the masters, the
// gradient buffer and the optimizer slots alike; every other parameter as the model has it. The model's
// layout comes back whole (read_parameter, read_state, checkpoints).
TEST(CudaPlanWeights, ConvMastersAreCudnnsFilterAndTheModelsLayoutComesBack) {
  Net net;
  const int32_t x = net.input("x", {2, 5, 4, 3, 6});
  int32_t h = net.op("conv", "c3", {x, net.param("w3", {3, 3, 3, 3, 4}), net.param("b3", {4})}, {2, 5, 4, 3, 4},
                     {{"padding", {1, 1, 1}}, {"groups", 2.0}});
  h = net.op("conv", "pw", {h, net.param("wp", {1, 1, 1, 4, 5})}, {2, 5, 4, 3, 5});
  h = net.op("conv_transpose", "up", {h, net.param("wt", {2, 2, 2, 3, 5})}, {2, 10, 8, 6, 3}, {{"stride", {2, 2, 2}}});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  ASSERT_EQ(plan.params.size(), 4u);
  for (size_t i = 0; i < p.params.size(); ++i) {
    const std::string name = p.value(p.params[i].value).name;
    const std::vector<float>& w = p.params[i].init;
    const auto n = static_cast<int64_t>(w.size());
    std::vector<float> device(w.size()), back(w.size());
    to_device(plan.params[i], w.data(), device.data(), n);
    to_model(plan.params[i], device.data(), back.data(), n);
    EXPECT_EQ(back, w) << name;
    if (name == "w3" || name == "wt") {
      const Node& reader = node_named(p, name == "w3" ? "c3" : "up");
      EXPECT_EQ(device, device_filter(plan.nodes[index_of(p, reader.name)].conv->filter, w)) << name;
      EXPECT_NE(device, w) << name;
    } else {
      EXPECT_TRUE(plan.params[i].identity()) << name;  // the bias, the pointwise conv's (cuBLASLt) weights
    }
  }
  EXPECT_FALSE(make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, kBucketBytes, Pointwise::cudnn}).params[2].identity());  // wp on cuDNN
}

TEST(CudaPlanWeights, AWeightReadInTwoLayoutsFailsNamingBothNodes) {
  Net net;
  const int32_t x = net.input("x", {1, 4, 4, 2});
  const int32_t w = net.param("w", {1, 1, 2, 2});
  const int32_t a = net.op("conv", "gemm", {x, w}, {1, 4, 4, 2});
  const int32_t b = net.op("conv", "strided", {a, w}, {1, 2, 2, 2}, {{"stride", {2, 2}}});
  const Program p = net.lower(b);
  EXPECT_EQ(error_of([&] { make_plan(p, {}); }),
            "cuda backend: node 'strided' (conv): it reads parameter 'w' in another layout than node 'gemm' does; "
            "the cuda backend keeps one");
  EXPECT_EQ(error_of([&] { make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, kBucketBytes, Pointwise::cudnn}); }), "");
}

// ---- padded channels ------------------------------------------------------------------------------

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
    pad_channels(c);
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
    pad_channels(c);
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

// ---- dense -------------------------------------------------------------------------------------------

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

// ---- pointwise convs as gemms ----------------------------------------------------------------------

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

// ---- lowering ------------------------------------------------------------------------------------

TEST(CudaPlanLowering, EachOpGoesToItsEngine) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  int32_t h = net.op("conv", "conv", {x, net.param("w", {3, 3, 3, 4})}, {2, 4, 4, 4}, {{"padding", {1, 1}}});
  const auto bn = [&](int32_t in, const std::string& name, double group) {
    return net.op("batch_norm", name,
                  {in, net.param(name + ".g", {4}), net.param(name + ".b", {4}), net.param(name + ".m", {4}, 0),
                   net.param(name + ".v", {4}, 0)},
                  {2, 4, 4, 4}, {{"eps", 1e-3}, {"momentum", 0.01}, {"group_size", group}});
  };
  h = bn(h, "bn", 1);
  h = bn(h, "syncbn", 2);
  h = net.op("conv", "depthwise", {h, net.param("wdw", {3, 3, 1, 4})}, {2, 4, 4, 4},
             {{"padding", {2, 2}}, {"dilation", {2, 2}}, {"groups", 4.0}});
  h = net.op("conv", "pointwise", {h, net.param("wpw", {1, 1, 4, 4})}, {2, 4, 4, 4});
  h = net.op("max_pool", "pool", {h}, {2, 2, 2, 4}, {{"kernel", {2, 2}}});
  h = net.op("conv_transpose", "up", {h, net.param("wt", {2, 2, 4, 4})}, {2, 4, 4, 4}, {{"stride", {2, 2}}});
  h = net.op("reshape", "flat", {h}, {2, 64});
  h = net.op("dense", "dense", {h, net.param("wd", {64, 2}), net.param("bd", {2})}, {2, 2});
  const Program p = net.lower(h);
  const std::vector<NodeLowering> own = lower_nodes(p);  // by default batch norm and depthwise on our kernels
  EXPECT_EQ(own[index_of(p, "bn")].engine, Engine::kernel);
  EXPECT_EQ(own[index_of(p, "depthwise")].engine, Engine::depthwise);
  EXPECT_FALSE(own[index_of(p, "depthwise")].conv);  // no cuDNN descriptors, no weight copy
  EXPECT_EQ(own[index_of(p, "pointwise")].engine, Engine::cublaslt_dense);  // and 1x1 convs on cuBLASLt
  // The options are independent: each moves its own ops only.
  const std::vector<NodeLowering> pointwise_on_cudnn = lower_nodes(p, {.pointwise = Pointwise::cudnn});
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "pointwise")].engine, Engine::cudnn_conv);
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "depthwise")].engine, Engine::depthwise);
  EXPECT_EQ(pointwise_on_cudnn[index_of(p, "bn")].engine, Engine::kernel);
  const std::vector<NodeLowering> own_on_cudnn = lower_nodes(p, {.own = {false, false}});
  EXPECT_EQ(own_on_cudnn[index_of(p, "pointwise")].engine, Engine::cublaslt_dense);
  EXPECT_EQ(own_on_cudnn[index_of(p, "depthwise")].engine, Engine::cudnn_conv);
  const std::vector<NodeLowering> l =
      lower_nodes(p, {.pointwise = Pointwise::cudnn, .own = {false, false}});  // backend.*=cudnn
  auto engine = [&](const std::string& name) { return l[index_of(p, name)].engine; };
  EXPECT_EQ(engine("conv"), Engine::cudnn_conv);
  EXPECT_EQ(engine("bn"), Engine::cudnn_batch_norm);
  EXPECT_EQ(engine("syncbn"), Engine::kernel);  // SyncBatchNorm has no cuDNN path
  EXPECT_EQ(engine("depthwise"), Engine::cudnn_conv);
  EXPECT_EQ(engine("pointwise"), Engine::cudnn_conv);
  EXPECT_EQ(engine("pool"), Engine::kernel);
  EXPECT_EQ(engine("up"), Engine::cudnn_conv_transpose);
  EXPECT_EQ(engine("flat"), Engine::alias);
  EXPECT_EQ(engine("dense"), Engine::cublaslt_dense);
  EXPECT_EQ(engine("loss"), Engine::kernel);
  const BatchNormPlan& b = *l[index_of(p, "bn")].batch_norm;
  EXPECT_EQ(b.channels, 4);
  EXPECT_DOUBLE_EQ(b.eps, 1e-3);
  EXPECT_DOUBLE_EQ(b.momentum, 0.01);  // cuDNN's exponentialAverageFactor
  EXPECT_EQ(b.x.dims, (std::array<int64_t, 5>{2, 4, 16, 1, 0}));  // [N, C, P, 1]
  EXPECT_EQ(b.x.strides[1], 1);
  EXPECT_EQ(b.x.strides[2], 4);
  EXPECT_EQ(b.x.strides[0], 64);
}

TEST(CudaPlanLowering, SpatialOpsAndComputedWeightsFailNamingTheNode) {
  Net net;
  const int32_t x = net.input("x", {1, 4, 4, 2});
  const int32_t h = net.op("halo_exchange", "halo", {x}, {1, 6, 6, 2}, {{"grid", {1, 1}}, {"halo", {1, 1}}});
  const int32_t y = net.op("conv", "conv3", {h, net.param("w", {3, 3, 2, 2})}, {1, 4, 4, 2});
  const std::string refused = error_of([&] { net.lower(y); });
  EXPECT_NE(refused.find("node 'halo' (halo_exchange)"), std::string::npos) << refused;

  Net all;  // lowered for a backend with every op: the plan still refuses, in one line
  const int32_t x2 = all.input("x", {1, 4, 4, 2});
  const int32_t h2 = all.op("halo_exchange", "halo", {x2}, {1, 6, 6, 2}, {{"grid", {1, 1}}, {"halo", {1, 1}}});
  const int32_t y2 = all.op("conv", "conv3", {h2, all.param("w", {3, 3, 2, 2})}, {1, 4, 4, 2});
  const Program p = all.lower(y2, sdk::Implements::everything());
  EXPECT_EQ(error_of([&] { lower_nodes(p); }),
            "cuda backend: node 'halo' (halo_exchange): spatial parallelism is not implemented by the cuda backend yet");

  Net computed;  // weights that a node computes
  const int32_t x3 = computed.input("x", {2, 3});
  const int32_t w = computed.op("scale", "w2", {computed.param("w", {3, 2})}, {3, 2}, {{"factor", 2.0}});
  const Program q = computed.lower(computed.op("dense", "dense1", {x3, w}, {2, 2}));
  const std::string message = error_of([&] { lower_nodes(q); });
  EXPECT_EQ(message.rfind("cuda backend: node 'dense1' (dense): its weights 'w2' are computed", 0), 0u) << message;
}

TEST(CudaPlanLowering, TensorsPastCudnns32BitIndexingFailNamingTheNode) {
  // A 1x1 conv from [4, 16384, 16384, 1] (2^30 elements) to 2 channels: 2^31 output elements, one
  // past int. Built by hand: a graph would hold gigabytes of nothing.
  Program p;
  p.values.resize(3);
  p.values[0].shape = {4, 16384, 16384, 1};
  Node node;
  node.kind = OpKind::conv, node.name = "wide", node.inputs = {0, 1}, node.output = 2;
  node.window.batch = 4;
  node.window.in[1] = node.window.in[2] = node.window.out[1] = node.window.out[2] = 16384;
  node.window.in_channels = 1, node.window.out_channels = 2;
  EXPECT_EQ(error_of([&] { plan_conv(p, node); }),
            "cuda backend: node 'wide' (conv): its output has 2147483648 elements, more than cuDNN indexes "
            "(2^31 - 1): use a smaller batch");
  node.window.out_channels = 1;
  EXPECT_EQ(error_of([&] { plan_conv(p, node); }), "");
}


// ---- precision -------------------------------------------------------------------------------------

#ifdef MLPH_HAVE_COSMOFLOW
// A CosmoFlow of edge 16 with two conv blocks of 4 and 8 filters.
Program mini_cosmoflow(int kernel = 3) {
  cosmoflow::ModelSettings m;
  m.edge = 16, m.n_conv_layers = 2, m.conv_size = 4, m.fc1_size = 8, m.fc2_size = 4, m.kernel_size = kernel;
  sdk::GraphBuilder g;
  cosmoflow::build_model(g, m, 0.9, 2, 7);
  return sdk::program::lower_graph(*g.graph(), implemented());
}

TEST(CudaPlanPrecision, Bf16ComputesConvAndDenseInHalfAndEverythingElseInFp32) {
  const Program p = mini_cosmoflow();
  for (Precision precision : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
    const PrecisionPlan plan = plan_precision(p, precision, lower_nodes(p));
    // Every value as declared (int16 data, fp32 activations) but, under bf16, the first conv block's z
    // and pooled y (a cuDNN conv and a pool chain at both ends: bf16 end to end); the second block's y
    // feeds the dense layers.
    const std::set<std::string> half = {"conv1", "conv1.pool"};
    for (size_t v = 0; v < p.values.size(); ++v)
      EXPECT_EQ(plan.values[v], compute_dtype(precision) != DType::f32 && half.count(p.values[v].name)
                                    ? compute_dtype(precision)  // bf16 or fp16 alike (issue 33 item 4)
                                    : dtype_of(p.values[v].dtype))
          << p.values[v].name << " " << name_of(precision);
    EXPECT_EQ(plan.loss_scaling, precision == Precision::fp16);
  }
  const PrecisionPlan plan = plan_precision(p, Precision::bf16, lower_nodes(p));
  EXPECT_EQ(plan.values[static_cast<size_t>(value_named(p, "x"))], DType::i16);
  const NodePrecision& conv1 = plan.nodes[index_of(p, "conv1")];
  EXPECT_EQ(conv1.reads, (std::vector<DType>{DType::bf16, DType::bf16, DType::f32}));  // x cast, weights' copy, bias
  EXPECT_EQ(conv1.data, DType::bf16);
  EXPECT_EQ(conv1.writes, DType::bf16);  // cuDNN writes y in x's type: cast up after
  EXPECT_EQ(conv1.math, MathMode::tensor_op);
  const NodePrecision& dense1 = plan.nodes[index_of(p, "dense1")];
  EXPECT_EQ(dense1.reads, (std::vector<DType>{DType::bf16, DType::bf16, DType::f32}));
  EXPECT_EQ(dense1.writes, DType::f32);  // cuBLASLt writes D in fp32
  // Our kernels read and write as stored: the first pool chain in bf16 (its T), the rest in fp32.
  EXPECT_EQ(plan.nodes[index_of(p, "conv1.pool")].data, DType::bf16);
  EXPECT_EQ(plan.nodes[index_of(p, "conv1.pool")].writes, DType::bf16);
  for (const char* node : {"log1p", "conv1.act", "conv2.pool", "dense1.act", "dense1.dropout", "loss", "abs_error_sum"}) {
    const NodePrecision& n = plan.nodes[index_of(p, node)];
    EXPECT_EQ(n.data, DType::f32) << node;
    EXPECT_EQ(n.writes, DType::f32) << node;
  }
  EXPECT_EQ(plan.nodes[index_of(p, "loss")].reads, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "log1p")].reads, (std::vector<DType>{DType::i16}));
  EXPECT_EQ(plan_precision(p, Precision::fp16, lower_nodes(p)).nodes[index_of(p, "conv2")].writes, DType::f16);
  for (Precision precision : {Precision::fp32, Precision::tf32}) {
    const PrecisionPlan full = plan_precision(p, precision, lower_nodes(p));
    EXPECT_EQ(full.nodes[index_of(p, "conv1")].math, precision == Precision::fp32 ? MathMode::fma : MathMode::tf32);
    EXPECT_EQ(full.nodes[index_of(p, "dense1")].reads[0], DType::f32);
    EXPECT_EQ(full.nodes[index_of(p, "conv1")].writes, DType::f32);
  }
}
#endif

TEST(CudaPlanPrecision, BatchNormAndEveryOtherKernelOpStayFp32InHalfPrecisions) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  const int32_t c = net.op("conv", "conv", {x, net.param("w", {1, 1, 3, 3})}, {2, 4, 4, 3});
  const int32_t bn = net.op("batch_norm", "bn",
                            {c, net.param("g", {3}), net.param("b", {3}), net.param("m", {3}, 0), net.param("v", {3}, 0)},
                            {2, 4, 4, 3});
  const int32_t sum = net.op("add", "add", {bn, net.param("bias_map", {2, 4, 4, 3})}, {2, 4, 4, 3});
  const int32_t y = net.op("relu", "relu", {sum}, {2, 4, 4, 3});
  const Program p = net.lower(y);
  const PrecisionPlan plan = plan_precision(p, Precision::fp16, lower_nodes(p));
  EXPECT_EQ(plan.nodes[index_of(p, "conv")].reads, (std::vector<DType>{DType::f16, DType::f16}));
  EXPECT_EQ(plan.values[static_cast<size_t>(c)], DType::f32);  // the conv's output, cast up
  EXPECT_EQ(plan.nodes[index_of(p, "bn")].data, DType::f32);
  EXPECT_EQ(plan.nodes[index_of(p, "bn")].reads,
            (std::vector<DType>{DType::f32, DType::f32, DType::f32, DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "add")].reads, (std::vector<DType>{DType::f32, DType::f32}));
  EXPECT_EQ(plan.nodes[index_of(p, "relu")].data, DType::f32);
}

// ---- loss scaling -------------------------------------------------------------------------------------

TEST(CudaPlanLossScaler, GrowsAfter2000FiniteStepsAndBacksOffAndSkipsOnInfOrNan) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inverse(), 1.0f / 65536.0f);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.good_steps(), 1999);
  EXPECT_TRUE(s.update(false));  // the 2000th
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 1500; ++i) s.update(false);
  EXPECT_FALSE(s.update(true));  // skipped, halved, count restarted
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 32768.0f);  // 2000 good steps count from the last overflow
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
}

TEST(CudaPlanLossScaler, NeverGrowsToInfinityAndHasNoFloor) {
  LossScaler s({0x1p127f, 2.0, 0.5, 2});
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 0x1p127f);  // 2^128 is not a float: kept, count restarted (as PyTorch)
  EXPECT_EQ(s.good_steps(), 0);
  LossScaler tiny({0x1p-148f, 2.0, 0.5, 2000});
  tiny.update(true);
  EXPECT_EQ(tiny.scale(), 0x1p-149f);
  s.restore(1024.0f, 1);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0f);
}

// ---- algorithms --------------------------------------------------------------------------------------

TEST(CudaPlanAlgorithms, DeterminismMathAndWorkspaceCapDecideTheChoice) {
  const std::vector<Candidate> found = {
      {0, true, 3.0f, 0, true, false, false},         // FMA, deterministic, slow
      {1, true, 1.0f, 64, false, true, false},        // tensor cores, nondeterministic, fastest
      {2, true, 0.8f, 2u << 30, true, true, false},   // fastest, but past the default cap
      {3, true, 1.5f, 16, true, true, false},         // tensor cores, deterministic
      {4, true, 0.5f, 0, true, true, true},           // down-converts fp32 to fp16
      {5, false, 0.1f, 0, true, false, false},        // failed
  };
  EXPECT_EQ(choose(algorithm_rule(Precision::fp32, false), found), 0);  // no tensor cores: TF32 off
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false), found), 1);
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, false), found), 4);  // half data: no candidate dropped for its math
  EXPECT_EQ(choose(algorithm_rule(Precision::fp16, false), {found[1], found[4]}), 1);
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false), {found[1], found[4]}), 0);  // would round fp32 to fp16
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, true), found), 0);  // first listed, deterministic
  EXPECT_EQ(choose(algorithm_rule(Precision::bf16, true), {found.begin() + 1, found.end()}), 2);  // algo 3
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false, size_t{4} << 30), found), 2);
  EXPECT_EQ(choose(algorithm_rule(Precision::tf32, false, 32), {found[1], found[3]}), 1);  // 64 bytes > 32
  EXPECT_EQ(choose(algorithm_rule(Precision::fp32, true), {found[1], found[4], found[5]}), -1);
  const AlgorithmRule timed = algorithm_rule(Precision::fp16, false, size_t{1} << 30, size_t{1} << 29);
  EXPECT_EQ(timed.workspace_cap, (size_t{1} << 29) / 10 * 9);  // at most 90% of what is free
  EXPECT_EQ(timed.selection, Selection::fastest);
  EXPECT_TRUE(timed.cublaslt_split_k);
  const AlgorithmRule fixed = algorithm_rule(Precision::fp16, true, size_t{1} << 30, size_t{1} << 29);
  EXPECT_EQ(fixed.workspace_cap, size_t{1} << 30);  // the same choice whatever else runs
  EXPECT_EQ(fixed.selection, Selection::first_listed);
  EXPECT_FALSE(fixed.cublaslt_split_k);
}

// Compile once per shape: the key holds every descriptor field and nothing else.
struct KeyCase {
  int64_t edge = 8, stride = 1, dilation = 1, pad = 1;
  bool bias = false, transpose = false;
};
ConvKey key_of(const KeyCase& t, DType data = DType::f32, MathMode math = MathMode::fma, int pass = 0) {
  Net net;
  const int32_t x = net.input("x", {2, t.edge, t.edge, 4});
  std::vector<int32_t> inputs{x, net.param("w", {3, 3, 4, 4})};
  if (t.bias) inputs.push_back(net.param("b", {4}));
  const std::vector<sdk::AttrInit> attrs = {{"stride", {double(t.stride), double(t.stride)}},
                                            {"dilation", {double(t.dilation), double(t.dilation)}},
                                            {"padding", {double(t.pad), double(t.pad)}}};
  const int64_t out = t.transpose ? (t.edge - 1) * t.stride - 2 * t.pad + t.dilation * 2 + 1
                                  : (t.edge + 2 * t.pad - t.dilation * 2 - 1) / t.stride + 1;
  const Program p = net.lower(net.op(t.transpose ? "conv_transpose" : "conv", "c", inputs, {2, out, out, 4}, attrs));
  return conv_key(*lower_nodes(p)[index_of(p, "c")].conv, data, math, pass);
}

TEST(CudaPlanAlgorithms, ConvKeysDifferInEveryDescriptorFieldAndOnlyThere) {
  const ConvKey base = key_of({});
  EXPECT_EQ(base, key_of({.bias = true}));  // a bias is our kernel's, not the search's business
  // Stride 4 with padding 1: dilation 1 and 2 give the same output size, only the dilation differs.
  EXPECT_NE(key_of({.stride = 4, .dilation = 1}), key_of({.stride = 4, .dilation = 2}));
  EXPECT_NE(base, key_of({.stride = 2}));
  EXPECT_NE(base, key_of({.edge = 10}));
  // A conv_transpose 4 -> 7 is the backward data of the conv 7 -> 4: the same descriptors, the same search.
  EXPECT_EQ(key_of({.edge = 7, .stride = 2}, DType::f32, MathMode::fma, 1), key_of({.edge = 4, .stride = 2, .transpose = true}, DType::f32, MathMode::fma, 1));
  EXPECT_NE(base, key_of({}, DType::bf16, MathMode::fma));
  EXPECT_NE(key_of({}, DType::bf16, MathMode::tensor_op), key_of({}, DType::bf16, MathMode::fma));
  EXPECT_NE(base, key_of({}, DType::f32, MathMode::fma, 2));
}

// ---- memory ----------------------------------------------------------------------------------------------

// No two regions live at one step share a byte: every pair, every step. Offsets aligned, inside the arena.
void expect_no_overlap(const MemoryPlan& m, const Schedule& s) {
  for (const Region& r : m.regions) {
    ASSERT_EQ(r.offset % kAlignment, 0u) << r.name;
    ASSERT_EQ(r.bytes % kAlignment, 0u) << r.name;
    ASSERT_LE(r.offset + r.bytes, m.arena_bytes) << r.name;
    ASSERT_LE(r.first, r.last) << r.name;
  }
  for (int step = 0; step < static_cast<int>(s.steps.size()); ++step) {
    std::vector<const Region*> live;
    for (const Region& r : m.regions)
      if (r.live_at(step)) live.push_back(&r);
    for (size_t i = 0; i < live.size(); ++i)
      for (size_t j = i + 1; j < live.size(); ++j)
        ASSERT_TRUE(live[i]->offset + live[i]->bytes <= live[j]->offset || live[j]->offset + live[j]->bytes <= live[i]->offset)
            << "step " << step << ": '" << live[i]->name << "' and '" << live[j]->name << "' overlap";
  }
}

const Region& region_at(const MemoryPlan& m, const Location& at) { return m.regions[static_cast<size_t>(at.region)]; }

// x -> conv -> relu -> reshape -> dense -> mse: each region's life, step by step.
// Issue 33 item 5: a batch norm on our kernels (or an add) whose output only the next relu reads writes
// that relu's output in one pass and runs its backward from the relu's output gradient; the relu does
// nothing.
TEST(CudaPlanMemory, BatchNormOrAddFollowedByItsOnlyReaderReluIsFused) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 3});
  const auto bn = [&](int32_t in, const std::string& name) {
    return net.op("batch_norm", name,
                  {in, net.param(name + ".g", {3}), net.param(name + ".b", {3}), net.param(name + ".m", {3}, 0),
                   net.param(name + ".v", {3}, 0)},
                  {2, 4, 4, 3});
  };
  int32_t h = net.op("conv", "c", {x, net.param("w", {1, 1, 3, 3})}, {2, 4, 4, 3});
  h = net.op("relu", "r1", {bn(h, "bn1")}, {2, 4, 4, 3});
  const int32_t b2 = bn(h, "bn2");  // read by its relu and by the add: not fused
  h = net.op("add", "add", {net.op("relu", "r2", {b2}, {2, 4, 4, 3}), b2}, {2, 4, 4, 3});
  h = net.op("relu", "r3", {h}, {2, 4, 4, 3});  // add -> relu, its only reader: fused too
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  const size_t bn1 = index_of(p, "bn1"), r1 = index_of(p, "r1");
  EXPECT_EQ(plan.nodes[bn1].fused_relu, static_cast<int64_t>(r1));
  EXPECT_EQ(plan.nodes[r1].engine, Engine::fused);
  EXPECT_EQ(plan.nodes[index_of(p, "bn2")].fused_relu, -1);
  EXPECT_EQ(plan.nodes[index_of(p, "r2")].engine, Engine::kernel);
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(region_at(m, m.nodes[bn1].statistics).bytes, align_up(4 * 3 * sizeof(float), kAlignment));  // + scale, shift
  EXPECT_EQ(region_at(m, m.nodes[index_of(p, "bn2")].statistics).bytes, align_up(2 * 3 * sizeof(float), kAlignment));
  const Region& relu_y = region_at(m, m.values[static_cast<size_t>(value_named(p, "r1"))]);
  EXPECT_LE(relu_y.first, plan.schedule.forward[bn1]);  // written by the batch norm's step
  const Region& relu_dy = region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "r1"))]);
  EXPECT_GE(relu_dy.last, plan.schedule.backward[bn1]);  // read by the batch norm's backward
  EXPECT_EQ(m.nodes[r1].output_gradient.region, m.value_gradients[static_cast<size_t>(value_named(p, "r1"))].region);
  EXPECT_EQ(plan.schedule.backward[r1], -1);  // no step of its own: the relu's output dies with its last reader
  EXPECT_LE(relu_y.last, plan.schedule.backward[index_of(p, "bn2")]);  // bn2 keeps its x (r1) to its backward, no longer
  EXPECT_FALSE(m.values[static_cast<size_t>(value_named(p, "bn1"))]);  // the batch norm's own output: never stored
  EXPECT_FALSE(m.value_gradients[static_cast<size_t>(value_named(p, "bn1"))]);
  EXPECT_FALSE(m.nodes[bn1].output);
  const size_t add = index_of(p, "add"), r3 = index_of(p, "r3");
  EXPECT_EQ(plan.nodes[add].fused_relu, static_cast<int64_t>(r3));
  EXPECT_EQ(plan.nodes[r3].engine, Engine::fused);
  const Region& r3_y = region_at(m, m.values[static_cast<size_t>(value_named(p, "r3"))]);
  EXPECT_LE(r3_y.first, plan.schedule.forward[add]);
  EXPECT_GE(r3_y.last, plan.schedule.backward[add]);  // the mask of add's backward
  EXPECT_GE(region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "r3"))]).last, plan.schedule.backward[add]);
  expect_no_overlap(m, plan.schedule);
  Options cudnn;  // cuDNN's batch norm: nothing fused
  cudnn.own.batch_norm = false;
  EXPECT_EQ(make_plan(p, cudnn).nodes[r1].engine, Engine::kernel);
}

TEST(CudaPlanMemory, LivesFollowForwardReadsAndWhatBackwardKeeps) {
  Net net;
  const int32_t x = net.input("x", {2, 4, 4, 2});
  int32_t h = net.op("conv", "c", {x, net.param("w", {3, 3, 2, 3})}, {2, 4, 4, 3}, {{"padding", {1, 1}}});
  h = net.op("relu", "r", {h}, {2, 4, 4, 3});
  h = net.op("reshape", "f", {h}, {2, 48});
  h = net.op("dense", "d", {h, net.param("wd", {48, 2}), net.param("bd", {2})}, {2, 2});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  const Schedule& s = plan.schedule;
  ASSERT_EQ(s.steps.size(), 10u);  // forward c r f d loss, backward loss d r c (f is an alias), update
  EXPECT_EQ(s.backward[index_of(p, "f")], -1);
  EXPECT_EQ(s.backward[index_of(p, "c")], 8);
  const MemoryPlan& m = plan.memory;
  auto life = [&](const std::string& v, bool gradient = false) {
    const Region& r = region_at(m, (gradient ? m.value_gradients : m.values)[static_cast<size_t>(value_named(p, v))]);
    return std::pair{r.first, r.last};
  };
  EXPECT_EQ(life("x"), std::pair(0, 8));       // conv keeps its input for dw
  EXPECT_EQ(life("c"), std::pair(0, 1));       // relu keeps its output, not its input
  EXPECT_EQ(life("r"), std::pair(1, 7));       // dense (through the reshape) and relu keep it
  EXPECT_EQ(life("f"), life("r"));             // the alias is its input
  EXPECT_EQ(life("d"), std::pair(3, 5));       // mse keeps its inputs
  EXPECT_EQ(life("target"), std::pair(0, 5));
  EXPECT_EQ(life("loss"), std::pair(4, 9));    // read after the step
  EXPECT_EQ(life("loss", true), std::pair(5, 5));
  EXPECT_EQ(life("d", true), std::pair(5, 6));
  EXPECT_EQ(life("r", true), std::pair(6, 7));
  EXPECT_EQ(life("c", true), std::pair(7, 8));
  EXPECT_FALSE(m.value_gradients[static_cast<size_t>(x)]);  // data gets none
  const NodeMemory& conv = m.nodes[index_of(p, "c")];
  EXPECT_FALSE(conv.weight_gradient);  // fp32: cuDNN adds dw into the gradient buffer, in the masters' layout
  EXPECT_EQ(region_at(m, conv.reads[1]).kind, RegionKind::masters);  // the masters are cuDNN's filter (weights.hpp)
  EXPECT_EQ(region_at(m, conv.gradients[1]).kind, RegionKind::gradients);
  const NodeMemory& dense = m.nodes[index_of(p, "d")];
  EXPECT_EQ(region_at(m, dense.reads[1]).kind, RegionKind::masters);  // fp32 dense reads the master
  EXPECT_EQ(region_at(m, dense.gradients[1]).kind, RegionKind::gradients);
  EXPECT_EQ(dense.accumulate, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(region_at(m, m.values[static_cast<size_t>(value_named(p, "wd"))]).kind, RegionKind::masters);
  // The arena reuses: "c" (dead after step 1) and d "d" (from step 5) could share.
  size_t total = 0;
  for (const Region& r : m.regions) total += r.bytes;
  EXPECT_LT(m.arena_bytes, total);
  EXPECT_GE(m.arena_bytes, m.live_bytes_peak);
  expect_no_overlap(m, s);
}

TEST(CudaPlanMemory, TheFirstGradientWriterOverwritesAndLaterOnesAdd) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  const int32_t h = net.op("dense", "d", {x, net.param("w", {3, 3})}, {2, 3});
  const int32_t a = net.op("scale", "a", {h}, {2, 3}, {{"factor", 2.0}});
  const int32_t b = net.op("scale", "b", {h}, {2, 3}, {{"factor", 3.0}});
  const int32_t twice = net.op("add", "twice", {a, a}, {2, 3});
  const int32_t y = net.op("add", "sum", {twice, b}, {2, 3});
  const Program p = net.lower(y);
  const DevicePlan plan = make_plan(p, {});
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(m.nodes[index_of(p, "b")].accumulate, (std::vector<bool>{false}));  // b's backward runs before a's
  EXPECT_EQ(m.nodes[index_of(p, "a")].accumulate, (std::vector<bool>{true}));
  EXPECT_EQ(m.nodes[index_of(p, "twice")].accumulate, (std::vector<bool>{false, true}));
  EXPECT_EQ(m.address(m.nodes[index_of(p, "a")].gradients[0]), m.address(m.nodes[index_of(p, "b")].gradients[0]));
  expect_no_overlap(m, plan.schedule);
}

TEST(CudaPlanMemory, ParametersAreAlignedInGraphOrderWithGradientsAndSlotsAtTheSameOffsets) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  int32_t h = net.op("dense", "d1", {x, net.param("w1", {3, 5}), net.param("b1", {5})}, {2, 5});
  h = net.op("batch_norm", "bn",
             {h, net.param("g", {5}), net.param("be", {5}), net.param("m", {5}, 0), net.param("v", {5}, 0)}, {2, 5});
  const Program p = net.lower(h);
  const ParamLayout layout = layout_params(p);
  ASSERT_EQ(layout.params.size(), 6u);
  const size_t offsets[] = {0, 64, 128, 192, 0, 64};  // w1 15, b1 5, g 5, be 5 | m 5, v 5 (state)
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(layout.params[i].offset, offsets[i]) << i;
  EXPECT_EQ(layout.trainable_floats, 256u);
  EXPECT_EQ(layout.state_floats, 128u);
  const DevicePlan plan = make_plan(p, {});
  const MemoryPlan& m = plan.memory;
  EXPECT_EQ(region_at(m, m.value_gradients[static_cast<size_t>(value_named(p, "g"))]).kind, RegionKind::gradients);
  EXPECT_EQ(m.value_gradients[static_cast<size_t>(value_named(p, "g"))].offset, 128 * sizeof(float));
  EXPECT_EQ(m.values[static_cast<size_t>(value_named(p, "v"))].offset, 64 * sizeof(float));
  EXPECT_EQ(region_at(m, m.values[static_cast<size_t>(value_named(p, "v"))]).kind, RegionKind::state);
  ASSERT_EQ(m.optimizer_slots.size(), 1u);  // sgd_keras: velocity
  EXPECT_EQ(m.regions[static_cast<size_t>(m.optimizer_slots[0])].bytes, 256 * sizeof(float));
  const NodeMemory& bn = m.nodes[index_of(p, "bn")];
  EXPECT_EQ(region_at(m, bn.statistics).bytes, kAlignment);
  EXPECT_EQ(region_at(m, bn.statistics).first, plan.schedule.forward[index_of(p, "bn")]);
  EXPECT_EQ(region_at(m, bn.statistics).last, plan.schedule.backward[index_of(p, "bn")]);
}

TEST(CudaPlanMemory, WorkspacesLiveOnlyAtTheirStep) {
  Net net;
  const int32_t x = net.input("x", {1, 8, 8, 2});
  int32_t h = net.op("conv", "c1", {x, net.param("w1", {3, 3, 2, 2})}, {1, 8, 8, 2}, {{"padding", {1, 1}}});
  h = net.op("conv", "c2", {h, net.param("w2", {3, 3, 2, 2})}, {1, 8, 8, 2}, {{"padding", {1, 1}}});
  const Program p = net.lower(h);
  const std::vector<NodeLowering> l = lower_nodes(p);
  const Schedule s = plan_schedule(p, l);
  const PrecisionPlan precision = plan_precision(p, Precision::fp32, l);
  Workspaces w;
  w.forward = {size_t{1} << 20, size_t{1} << 20, 0};
  w.backward = {size_t{3} << 20, size_t{2} << 20, 0};
  w.update = size_t{1} << 20;
  const MemoryPlan m = plan_memory(p, l, precision, s, w);
  const Region& f1 = region_at(m, m.nodes[0].forward_workspace);
  const Region& f2 = region_at(m, m.nodes[1].forward_workspace);
  EXPECT_EQ(f1.first, 0);
  EXPECT_EQ(f1.last, 0);
  EXPECT_EQ(f1.offset, f2.offset);  // never live together: the same bytes
  EXPECT_EQ(region_at(m, m.nodes[0].backward_workspace).bytes, size_t{3} << 20);
  EXPECT_FALSE(m.nodes[2].forward_workspace);
  const Region& u = region_at(m, m.update_workspace);
  EXPECT_EQ(std::pair(u.first, u.last), std::pair(s.update, s.update));
  EXPECT_EQ(u.offset, f1.offset);  // the update's scratch reuses what forward used
  EXPECT_FALSE(m.lamb_update);     // sgd_keras
  const MemoryPlan without = plan_memory(p, l, precision, s);
  EXPECT_GE(m.arena_bytes, size_t{3} << 20);
  EXPECT_LE(m.arena_bytes, without.arena_bytes + (size_t{3} << 20));  // one workspace at a time
  expect_no_overlap(m, s);
}

TEST(CudaPlanMemory, LambsUpdateIsScratchOfTheUpdateStepAsLargeAsTheParameters) {
  Net net;
  const int32_t x = net.input("x", {2, 3});
  const int32_t h = net.op("dense", "d", {x, net.param("w", {3, 70}), net.param("b", {70})}, {2, 70});
  const int32_t target = net.input("target", {2, 70});
  net.g.loss(net.op("mse", "loss", {h, target}, {}));
  net.g.inputs(net.inputs);
  net.g.optimizer("lamb", {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-6}, {"weight_decay", 0.01}, {"max_grad_norm", 1.0}});
  const Program p = sdk::program::lower_graph(*net.g.graph(), implemented());
  const DevicePlan plan = make_plan(p, {});
  const Region& update = region_at(plan.memory, plan.memory.lamb_update);
  EXPECT_EQ(update.kind, RegionKind::optimizer_scratch);
  EXPECT_EQ(update.bytes, (256 + 128) * sizeof(float));  // w: 210 floats padded to 256, b: 70 padded to 128
  EXPECT_EQ(std::pair(update.first, update.last), std::pair(plan.schedule.update, plan.schedule.update));
  EXPECT_EQ(plan.memory.optimizer_slots.size(), 2u);  // m, v
  expect_no_overlap(plan.memory, plan.schedule);
}

#ifdef MLPH_HAVE_COSMOFLOW
// fp16 and bf16 keep the first conv block in half end to end (Bf16KeepsCosmoFlowsConvBlocksInBf16EndToEnd);
// conv2, whose pooled y the dense layers read in fp32, casts around it.
TEST(CudaPlanMemory, CastsAndScratchOfMixedPrecisionLiveWhereTheyAreRead) {
  const Program p = mini_cosmoflow();
  const DevicePlan plan = make_plan(p, {Precision::fp16});
  const MemoryPlan& m = plan.memory;
  const Schedule& s = plan.schedule;
  const size_t c1 = index_of(p, "conv1"), c2 = index_of(p, "conv2"), d1 = index_of(p, "dense1");
  const NodeMemory& conv1 = m.nodes[c1];
  const Region& cast = region_at(m, conv1.reads[0]);
  EXPECT_EQ(cast.kind, RegionKind::cast);
  EXPECT_EQ(cast.name, std::string("log1p as ") + name_of(DType::f16) + ", channels padded");  // 4 channels cast into 8 (pad_channels)
  EXPECT_EQ(cast.bytes, align_up(2 * 16 * 16 * 16 * 8 * 2, kAlignment));
  EXPECT_EQ(conv1.makes_cast, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(cast.first, s.forward[c1]);
  EXPECT_EQ(cast.last, s.backward[c1]);  // conv keeps what it read
  const Region& log1p = region_at(m, m.values[static_cast<size_t>(value_named(p, "log1p"))]);
  EXPECT_EQ(log1p.last, s.forward[c1]);
  // conv2 (its z fp32): cuDNN writes y in fp16, cast up into the fp32 value at once; dy is cast down for
  // backward. Its dx goes into conv1.pool's gradient as stored (fp16): no scratch.
  const NodeMemory& conv2 = m.nodes[c2];
  const Region& y = region_at(m, conv2.output_scratch);
  EXPECT_EQ(y.kind, RegionKind::output_scratch);
  EXPECT_EQ(y.bytes, align_up(2 * 8 * 8 * 8 * 8 * 2, kAlignment));
  EXPECT_EQ(std::pair(y.first, y.last), std::pair(s.forward[c2], s.forward[c2]));
  EXPECT_EQ(region_at(m, conv2.output).kind, RegionKind::value);
  const Region& dy = region_at(m, conv2.output_gradient_cast);
  EXPECT_EQ(std::pair(dy.first, dy.last), std::pair(s.backward[c2], s.backward[c2]));
  EXPECT_FALSE(conv1.gradient_scratch[0]);  // the input (preprocessing) needs no gradient
  EXPECT_FALSE(conv2.gradient_scratch[0]);
  EXPECT_FALSE(conv1.output_scratch);  // z in fp16 as cuDNN writes it
  EXPECT_EQ(region_at(m, conv1.reads[1]).bytes, align_up(3 * 3 * 3 * 8 * 4 * 2, kAlignment));  // bf16 weights, padded
  EXPECT_EQ(region_at(m, conv1.weight_gradient).bytes, align_up(3 * 3 * 3 * 8 * 4 * 2, kAlignment));
  const NodeMemory& dense1 = m.nodes[d1];
  EXPECT_EQ(region_at(m, dense1.reads[1]).kind, RegionKind::weights);
  EXPECT_FALSE(dense1.weight_gradient);      // cuBLASLt writes fp32 dw itself,
  EXPECT_FALSE(dense1.output_scratch);       // and fp32 y,
  EXPECT_FALSE(dense1.gradient_scratch[0]);  // and fp32 dx
  EXPECT_TRUE(dense1.output_gradient_cast);  // from dy in bf16
  const NodeMemory& loss = m.nodes[index_of(p, "loss")];
  const NodeMemory& metric = m.nodes[index_of(p, "abs_error_sum")];
  EXPECT_EQ(loss.reads[0].region, metric.reads[0].region);  // the fp32 value for both readers
  EXPECT_FALSE(loss.gradient_scratch[0]);
  const DevicePlan bf16 = make_plan(p, {Precision::bf16});  // conv1 writes its bf16 z as it is, conv2 reads y so
  EXPECT_FALSE(bf16.memory.nodes[c1].output_scratch);
  EXPECT_FALSE(bf16.memory.nodes[c1].output_gradient_cast);
  EXPECT_FALSE(bf16.memory.nodes[c2].gradient_scratch[0]);
  EXPECT_EQ(region_at(bf16.memory, bf16.memory.nodes[c1].reads[0]).kind, RegionKind::cast);  // log1p's padded cast
  EXPECT_TRUE(bf16.memory.nodes[c2].output_scratch);  // the last block's z stays fp32
  for (Precision precision : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
    const DevicePlan each = make_plan(p, {precision});
    expect_no_overlap(each.memory, each.schedule);
    std::set<std::string> casts;
    size_t scratch = 0;
    for (const Region& r : each.memory.regions) {
      if (r.kind == RegionKind::cast) casts.insert(r.name);
      scratch += r.kind == RegionKind::output_scratch || r.kind == RegionKind::gradient_cast ||
                 r.kind == RegionKind::gradient_scratch;
    }
    if (compute_dtype(precision) == DType::f32) {
      EXPECT_TRUE(casts.empty()) << name_of(precision);
      EXPECT_EQ(scratch, 0u) << name_of(precision);
    } else {  // the inputs of conv1, conv2, dense1, dense2 and output
      const std::string half = name_of(compute_dtype(precision));
      std::set<std::string> expected{"log1p as " + half + ", channels padded", "conv2.pool as " + half,
                                     "dense1.dropout as " + half, "dense2.dropout as " + half};
      EXPECT_EQ(casts, expected) << name_of(precision);
    }
  }
}

TEST(CudaPlanMemory, ExplicitPaddingHasItsBuffersAndKeepsThePaddedInput) {
  const Program p = mini_cosmoflow(2);  // Keras 'same' with kernel 2: padding 0 before, 1 after
  const DevicePlan plan = make_plan(p, {});
  const NodeLowering& l = plan.nodes[index_of(p, "conv1")];
  ASSERT_TRUE(l.conv->explicit_padding);
  EXPECT_EQ(l.conv->padded.dims, (std::array<int64_t, 5>{2, 4, 17, 17, 17}));
  const NodeMemory& conv1 = plan.memory.nodes[index_of(p, "conv1")];
  const Region& padded = region_at(plan.memory, conv1.padded);
  EXPECT_EQ(padded.bytes, align_up(2 * 17 * 17 * 17 * 4 * 4, kAlignment));
  EXPECT_EQ(padded.last, plan.schedule.backward[index_of(p, "conv1")]);
  EXPECT_TRUE(conv1.padded_gradient);
  const Region& input = region_at(plan.memory, conv1.reads[0]);
  EXPECT_EQ(input.last, plan.schedule.forward[index_of(p, "conv1")]);  // the padded copy is what is kept
  expect_no_overlap(plan.memory, plan.schedule);
}

// ---- buckets ----------------------------------------------------------------------------------------------

TEST(CudaPlanBuckets, TileTheBufferLastLayersFirstAndAreReadyWhenBackwardIsDoneWithThem) {
  const Program p = mini_cosmoflow();
  const DevicePlan plan = make_plan(p, {Precision::fp32, false, kDefaultWorkspaceCap, 1024});
  const ParamLayout& layout = plan.memory.params;
  const std::vector<Bucket>& b = plan.buckets;
  ASSERT_EQ(b.size(), 4u);  // {output, dense2}, {dense1}, {conv2}, {conv1}: each kernel and bias
  EXPECT_EQ(b.front().offset + b.front().count, layout.trainable_floats);
  EXPECT_EQ(b.back().offset, 0u);
  size_t params = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    params += b[i].params;
    if (i + 1 < b.size()) {
      EXPECT_EQ(b[i + 1].offset + b[i + 1].count, b[i].offset);
      EXPECT_GE(b[i].count * sizeof(float), 1024u);
      EXPECT_GE(b[i + 1].after_step, b[i].after_step);
    }
    // Every node reading one of its parameters has run its backward by after_step.
    for (size_t k = 0; k < p.params.size(); ++k) {
      const ParamSlot& slot = layout.params[k];
      if (!slot.trainable || slot.offset < b[i].offset || slot.offset >= b[i].offset + b[i].count) continue;
      for (size_t n = 0; n < p.nodes.size(); ++n)
        for (int32_t in : p.nodes[n].inputs)
          if (in == p.params[k].value) {
            EXPECT_LE(plan.schedule.backward[n], b[i].after_step) << p.nodes[n].name;
          }
    }
  }
  EXPECT_EQ(params, 10u);
  EXPECT_EQ(b[0].params, 4u);  // output's 16 + 4 and dense2's 32 + 4 floats, 64-float aligned: 1024 bytes
  EXPECT_EQ(b[0].ready_node, static_cast<int64_t>(index_of(p, "dense2")));
  EXPECT_EQ(b[0].after_step, plan.schedule.backward[index_of(p, "dense2")]);  // right after its backward
  EXPECT_EQ(make_plan(p, {}).buckets.size(), 1u);  // 25 MiB hold it all
}
#endif

TEST(CudaPlanBuckets, ABucketWaitsForTheEarliestReaderOfAnyOfItsParameters) {
  Net net;  // w2 is declared before w1 but read after it
  const int32_t x = net.input("x", {2, 3});
  const int32_t w2 = net.param("w2", {3, 3}), w1 = net.param("w1", {3, 3});
  int32_t h = net.op("dense", "d1", {x, w1}, {2, 3});
  h = net.op("dense", "d2", {h, w2}, {2, 3});
  const Program p = net.lower(h);
  const DevicePlan plan = make_plan(p, {});
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].ready_node, static_cast<int64_t>(index_of(p, "d1")));
  EXPECT_EQ(plan.buckets[0].after_step, plan.schedule.backward[index_of(p, "d1")]);
}

// ---- the real graphs -------------------------------------------------------------------------------------

void report(const std::string& name, const Program& p, Precision precision) {
  const DevicePlan plan = make_plan(p, {precision});
  expect_no_overlap(plan.memory, plan.schedule);
  EXPECT_GE(plan.memory.arena_bytes, plan.memory.live_bytes_peak);
  EXPECT_LE(plan.memory.arena_bytes, plan.memory.live_bytes_peak / 20 * 21);  // the placement wastes < 5%
  for (const NodeLowering& l : plan.nodes) EXPECT_FALSE(l.conv && l.conv->explicit_padding);  // cuDNN pads them all
  std::printf("%s, %s: %s  %zu gradient buckets of ~25 MiB over %zu trainable floats\n", name.c_str(), name_of(precision),
              describe(plan.memory, plan.schedule).c_str(), plan.buckets.size(), plan.memory.params.trainable_floats);
}

#ifdef MLPH_HAVE_COSMOFLOW
TEST(CudaPlanFigures, CosmoFlow128AtBatch1And4) {
  for (uint32_t batch : {1u, 4u}) {
    sdk::GraphBuilder g;
    cosmoflow::build_model(g, cosmoflow::ModelSettings{}, 0.9, batch, 7);
    const Program p = sdk::program::lower_graph(*g.graph(), implemented());
    for (Precision precision : {Precision::fp32, Precision::bf16})
      report("CosmoFlow 128^3 batch " + std::to_string(batch), p, precision);
  }
}

// Issue 33 item 5: each of CosmoFlow's conv -> leaky_relu -> max_pool blocks is one pool chain by
// default: the max_pool reads the conv's output (kept to its backward) and writes the conv's output
// gradient first; the leaky ReLU has no step, no value and no gradient; a byte of winner per pooled
// element lives from the chain's forward to its backward; the conv leaves its bias to the chain.
// backend.pool_chain=off: three nodes as before.
TEST(CudaPlanLowering, CosmoFlowsFiveConvLeakyReluPoolBlocksArePoolChainsByDefault) {
  sdk::GraphBuilder g;
  cosmoflow::build_model(g, cosmoflow::ModelSettings{}, 0.9, 2, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const DevicePlan plan = make_plan(p, {precision});
    const MemoryPlan& m = plan.memory;
    size_t chains = 0;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const Node& n = p.nodes[k];
      if (n.kind == OpKind::leaky_relu && p.nodes[k - 1].kind == OpKind::conv && plan.nodes[k].engine == Engine::kernel)
        ADD_FAILURE() << n.name << " unfused";  // (the dense layers' leaky ReLUs stay nodes)
      if (n.kind != OpKind::max_pool) continue;
      ASSERT_EQ(plan.nodes[k].engine, Engine::pool_chain) << n.name;
      ++chains;
      const auto conv = static_cast<size_t>(plan.nodes[k].chain_conv);
      ASSERT_EQ(conv + 2, k) << n.name;
      EXPECT_EQ(p.nodes[conv].kind, OpKind::conv);
      EXPECT_EQ(plan.nodes[conv].engine, Engine::cudnn_conv);
      EXPECT_EQ(plan.nodes[conv].bias_in_chain, p.nodes[conv].has_bias());
      EXPECT_EQ(plan.nodes[conv + 1].engine, Engine::fused);
      EXPECT_EQ(plan.nodes[conv + 1].fused_into, static_cast<int64_t>(k));
      EXPECT_EQ(plan.schedule.backward[conv + 1], -1);  // no step of its own
      const int32_t z = p.nodes[conv].output, act = p.nodes[conv + 1].output;
      EXPECT_FALSE(m.values[static_cast<size_t>(act)]) << n.name;  // never stored
      EXPECT_FALSE(m.value_gradients[static_cast<size_t>(act)]) << n.name;
      const NodeMemory& chain = m.nodes[k];
      EXPECT_EQ(chain.reads[0].region, m.values[static_cast<size_t>(z)].region);
      EXPECT_GE(region_at(m, chain.reads[0]).last, plan.schedule.backward[k]);  // z kept to the chain's backward
      EXPECT_EQ(chain.gradients[0].region, m.value_gradients[static_cast<size_t>(z)].region);
      EXPECT_FALSE(chain.accumulate[0]);  // written first: no memset, no add
      const Region& winners = region_at(m, chain.winners);
      EXPECT_EQ(winners.kind, RegionKind::winners);
      EXPECT_EQ(winners.bytes, align_up(static_cast<size_t>(p.value(n.output).numel()), kAlignment));
      EXPECT_EQ(std::pair(winners.first, winners.last), std::pair(plan.schedule.forward[k], plan.schedule.backward[k]));
      EXPECT_EQ(region_at(m, m.value_gradients[static_cast<size_t>(z)]).first, plan.schedule.backward[k]);
    }
    EXPECT_EQ(chains, 5u);
    expect_no_overlap(m, plan.schedule);
    Options off{precision};
    off.own.pool_chain = false;
    const DevicePlan three = make_plan(p, off);
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      EXPECT_NE(three.nodes[k].engine, Engine::pool_chain);
      EXPECT_NE(three.nodes[k].engine, Engine::fused);
      EXPECT_FALSE(three.nodes[k].bias_in_chain);
    }
    EXPECT_LT(m.arena_bytes, three.memory.arena_bytes);  // the activation and its gradient are gone
    std::printf("CosmoFlow 128^3 b2 %s: %zu pool chains; arena %.1f MiB (pool_chain=off: %.1f MiB)\n", name_of(precision),
                chains, static_cast<double>(m.arena_bytes) / 1048576.0, static_cast<double>(three.memory.arena_bytes) / 1048576.0);
  }
}

// Issue 33 item 4 (CosmoFlow's part): under bf16 each conv block's z and pooled y are stored in bf16
// and so are their gradients: the conv writes z and reads the previous y as they are (no output scratch,
// no cast copy, no dy cast, no dx scratch), the chain pools bf16 into bf16; the last block's y, read
// by the flatten and dense layers, stays fp32 (and its z with it: the chain takes one type). fp32
// stores every activation in fp32.
TEST(CudaPlanPrecision, Bf16KeepsCosmoFlowsConvBlocksInBf16EndToEnd) {
  sdk::GraphBuilder g;
  cosmoflow::build_model(g, cosmoflow::ModelSettings{}, 0.9, 4, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  const DevicePlan fp32 = make_plan(p, {Precision::fp32}), bf16 = make_plan(p, {Precision::bf16});
  for (DType t : fp32.precision.values) EXPECT_NE(t, DType::bf16);
  std::vector<std::string> half;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (bf16.precision.values[v] == DType::bf16) half.push_back(p.values[v].name);
  size_t chains = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (bf16.nodes[k].engine != Engine::pool_chain) continue;
    const auto conv = static_cast<size_t>(bf16.nodes[k].chain_conv);
    const int32_t z = p.nodes[conv].output, y = p.nodes[k].output;
    const bool last = ++chains == 5;
    EXPECT_EQ(bf16.precision.values[static_cast<size_t>(z)], last ? DType::f32 : DType::bf16) << p.nodes[conv].name;
    EXPECT_EQ(bf16.precision.values[static_cast<size_t>(y)], last ? DType::f32 : DType::bf16) << p.nodes[k].name;
    const NodeMemory& c = bf16.memory.nodes[conv];
    EXPECT_EQ(static_cast<bool>(c.output_scratch), last) << p.nodes[conv].name;  // written as stored
    EXPECT_EQ(static_cast<bool>(c.output_gradient_cast), last) << p.nodes[conv].name;
    EXPECT_EQ(region_at(bf16.memory, bf16.memory.value_gradients[static_cast<size_t>(z)]).bytes,
              align_up(static_cast<size_t>(p.value(z).numel()) * (last ? 4 : 2), kAlignment));
    if (last) continue;
    const size_t next = k + 1;  // the next block's conv reads y as it is stored
    ASSERT_EQ(p.nodes[next].inputs[0], y);
    const NodeMemory& n = bf16.memory.nodes[next];
    EXPECT_EQ(n.reads[0].region, bf16.memory.values[static_cast<size_t>(y)].region);
    EXPECT_FALSE(n.gradient_scratch[0]);
    EXPECT_FALSE(n.accumulate[0]);  // cuDNN writes dy of the chain first, beta 0
  }
  EXPECT_EQ(chains, 5u);
  EXPECT_EQ(half.size(), 8u);
  const double ratio = static_cast<double>(bf16.memory.arena_bytes) / static_cast<double>(fp32.memory.arena_bytes);
  std::printf("CosmoFlow 128^3 b4 arena: fp32 %.1f MiB, bf16 %.1f MiB (%.0f%%); %zu values in bf16\n",
              static_cast<double>(fp32.memory.arena_bytes) / 1048576.0, static_cast<double>(bf16.memory.arena_bytes) / 1048576.0,
              100.0 * ratio, half.size());
  EXPECT_LT(ratio, 0.75);
  expect_no_overlap(bf16.memory, bf16.schedule);
}
#endif

#ifdef MLPH_HAVE_DEEPCAM
// Issue 33: by default no node of DeepCAM runs on cuDNN's batch norm or cuDNN's depthwise conv; the
// depthwise convs read the fp32 masters as the graph keeps them and their activations as stored (bf16
// under bf16: item 4), and write their weight gradient straight into the gradient buffer.
// backend.*=cudnn brings cuDNN back.
TEST(CudaPlanLowering, DeepCamRunsNoBatchNormAndNoDepthwiseConvOnCudnnByDefault) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 1, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  size_t batch_norms = 0, depthwise = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& n = p.nodes[k];
    EXPECT_NE(plan.nodes[k].engine, Engine::cudnn_batch_norm) << n.name;
    batch_norms += n.kind == OpKind::batch_norm;
    if (!is_depthwise(n)) continue;
    ++depthwise;
    EXPECT_EQ(plan.nodes[k].engine, Engine::depthwise) << n.name;
    EXPECT_EQ(plan.precision.nodes[k].reads[1], DType::f32) << n.name;
    EXPECT_EQ(plan.precision.nodes[k].reads[0], DType::bf16) << n.name;
    EXPECT_FALSE(plan.memory.weights[static_cast<size_t>(n.inputs[1])]) << n.name;
    EXPECT_FALSE(plan.memory.nodes[k].weight_gradient) << n.name;
  }
  EXPECT_GT(batch_norms, 50u);
  EXPECT_GT(depthwise, 50u);
  size_t into_batch_norm = 0, into_add = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (plan.nodes[k].fused_relu < 0) continue;
    EXPECT_EQ(plan.nodes[static_cast<size_t>(plan.nodes[k].fused_relu)].engine, Engine::fused);
    (p.nodes[k].kind == OpKind::add ? into_add : into_batch_norm) += 1;
  }
  EXPECT_GT(into_batch_norm, 40u);
  EXPECT_GT(into_add, 10u);  // the Xception blocks that end with a relu
  std::printf("DeepCAM: %zu batch norms, %zu depthwise convs on our kernels; relus fused into %zu batch norms, %zu adds\n",
              batch_norms, depthwise, into_batch_norm, into_add);
  Options cudnn{Precision::bf16};
  cudnn.own = {false, false};
  const DevicePlan library = make_plan(p, cudnn);
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (p.nodes[k].kind == OpKind::batch_norm) {
      EXPECT_EQ(library.nodes[k].engine, Engine::cudnn_batch_norm);
    }
    if (is_depthwise(p.nodes[k])) {
      EXPECT_EQ(library.nodes[k].engine, Engine::cudnn_conv);
    }
  }
}

TEST(CudaPlanFigures, DeepCam768x1152AtBatch8) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) report("DeepCAM 768x1152 batch 8", p, precision);
  // Issue 33 item 4 asks for bf16 at most 55% of fp32: 52.4% with every activation between DeepCAM's
  // convs in bf16 (plan/precision.cpp); held here so that it does not grow back.
  const double fp32 = static_cast<double>(make_plan(p, {Precision::fp32}).memory.arena_bytes);
  const double bf16 = static_cast<double>(make_plan(p, {Precision::bf16}).memory.arena_bytes);
  std::printf("DeepCAM 768x1152 batch 8 arena: fp32 %.1f MiB, bf16 %.1f MiB = %.1f%% (issue 33's target: 55%%)\n",
              fp32 / 1048576.0, bf16 / 1048576.0, 100.0 * bf16 / fp32);
  EXPECT_LE(bf16 / fp32, 0.53);
}

// Issue 33 item 4: a gradient's first writer writes it instead of a memset and an add, for our kernels
// too (relu, add and add + relu, batch norm's data pass, depthwise's gather; cuDNN and cuBLASLt with
// beta 0 and the pool chain did already). What is still zeroed is printed by op.
TEST(CudaPlanMemory, DeepCamZeroesNoGradientWhoseFirstWriterOverwrites) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const DevicePlan plan = make_plan(p, {precision});
    size_t before = 0, before_bytes = 0, after = 0, after_bytes = 0;
    std::map<std::string, size_t> left;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      const NodeLowering& l = plan.nodes[k];
      const NodeMemory& m = plan.memory.nodes[k];
      if (l.engine == Engine::fused || l.engine == Engine::alias) continue;
      ASSERT_EQ(m.zeroed.size(), m.gradients.size()) << p.nodes[k].name;
      for (size_t i = 0; i < m.gradients.size(); ++i) {
        if (!m.gradients[i] || m.accumulate[i] || region_at(plan.memory, m.gradients[i]).kind == RegionKind::gradients) continue;
        const auto v = static_cast<size_t>(p.nodes[k].inputs[i]);
        const size_t bytes = static_cast<size_t>(p.values[v].numel()) * bytes_of(plan.precision.values[v]);
        // before this change: only cuDNN's and cuBLASLt's dx (beta 0) and the pool chain's dz were written
        const bool scratch = i < m.gradient_scratch.size() && m.gradient_scratch[i];
        const bool library = i == 0 && !scratch &&
                             (((l.engine == Engine::cudnn_conv || l.engine == Engine::cudnn_conv_transpose) && l.conv &&
                               !l.conv->explicit_padding) ||
                              l.engine == Engine::cublaslt_dense || l.engine == Engine::pool_chain);
        if (!library) ++before, before_bytes += bytes;
        if (!m.zeroed[i]) continue;
        ++after, after_bytes += bytes;
        ++left[std::string(op_name(p.nodes[k].kind))];
        const bool ours = (l.engine == Engine::kernel && (p.nodes[k].kind == OpKind::relu || p.nodes[k].kind == OpKind::add ||
                                                          (p.nodes[k].kind == OpKind::batch_norm && i == 0))) ||
                          (l.engine == Engine::depthwise && i == 0);
        EXPECT_FALSE(ours) << p.nodes[k].name << " input " << i << ": its first writer can overwrite";
      }
    }
    std::string by_op;
    for (const auto& [op, count] : left) by_op += " " + op + " " + std::to_string(count);
    std::printf("DeepCAM 768x1152 b8 %s: activation gradients zeroed before their first writer: %zu (%.1f MiB), were %zu "
                "(%.1f MiB); left:%s\n",
                name_of(precision), after, static_cast<double>(after_bytes) / 1048576.0, before,
                static_cast<double>(before_bytes) / 1048576.0, by_op.c_str());
    EXPECT_LT(after * 4, before) << "most memsets are gone";
  }
}

// Issue 33 item 4: under bf16 every node of DeepCAM reads its data inputs and writes its output in the
// type they are stored in wherever both ends take bf16: a cast copy is made only of an fp32 value (the
// input's normalization, ...), never between two nodes that both take bf16; a value stored in bf16 has
// no output scratch at its writer and no cast of its gradient; our kernels' and cuBLASLt's data inputs
// and outputs share one type (their bodies' T, D's type).
TEST(CudaPlanPrecision, Bf16KeepsDeepCamsActivationsInBf16WithNoCastBetweenNodesThatTakeIt) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 2, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  const MemoryPlan& m = plan.memory;
  size_t half = 0, casts = 0, fp32_batch_norms = 0;
  for (DType t : plan.precision.values) half += t == DType::bf16;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& n = p.nodes[k];
    const NodeLowering& l = plan.nodes[k];
    if (l.engine == Engine::fused || l.engine == Engine::alias) continue;
    const int32_t written = l.fused_relu >= 0 ? p.nodes[static_cast<size_t>(l.fused_relu)].output : n.output;
    const DType out = plan.precision.values[static_cast<size_t>(written)];
    const NodePrecision& np = plan.precision.nodes[k];
    if (out == DType::bf16) {
      EXPECT_EQ(np.writes, DType::bf16) << n.name;
      EXPECT_FALSE(m.nodes[k].output_scratch) << n.name;
      EXPECT_FALSE(m.nodes[k].output_gradient_cast) << n.name;
    }
    for (size_t i = 0; i < m.nodes[k].reads.size(); ++i) {
      if (is_weight_slot(n, i)) continue;
      const DType stored = plan.precision.values[static_cast<size_t>(n.inputs[i])];
      if (region_at(m, m.nodes[k].reads[i]).kind == RegionKind::cast) {
        ++casts;
        EXPECT_EQ(stored, DType::f32) << n.name << " input " << i;  // only an fp32 value is cast
      } else {
        EXPECT_EQ(np.reads[i], stored) << n.name << " input " << i;
      }
      const bool data = n.kind != OpKind::batch_norm || i == 0;
      if (data && (l.engine == Engine::kernel || l.engine == Engine::depthwise) && stored == DType::bf16) {
        EXPECT_EQ(out, DType::bf16) << n.name << ": one type for its data";
      }
    }
    if (is_depthwise(n) || n.kind == OpKind::add) {
      EXPECT_EQ(out, DType::bf16) << n.name;  // every one of them in DeepCAM
    }
    // Batch norms in fp32: xception.conv5's (its relu read by the global pooling) and the four ASPP
    // branches' (their relus concatenated with the fp32 image-pool broadcast).
    fp32_batch_norms += n.kind == OpKind::batch_norm && out == DType::f32;
  }
  EXPECT_EQ(fp32_batch_norms, 5u);
  std::printf("DeepCAM b2 bf16: %zu of %zu values stored in bf16, %zu cast reads (of fp32 values)\n", half,
              p.values.size(), casts);
  EXPECT_GT(half, 250u);
  EXPECT_LE(casts, 8u);
  expect_no_overlap(m, plan.schedule);
}

// The real graphs in bf16: CosmoFlow's conv1 and DeepCAM's last_deconv padded to 8 channels, nothing else;
// no padding in fp32; the parameters keep the model's shapes (masters, gradients, checkpoints).
TEST(CudaPlanFigures, Conv1AndLastDeconvArePaddedAndParametersKeepTheModelsShapes) {
  sdk::GraphBuilder deepcam_graph, cosmoflow_graph;
  deepcam::build_model(deepcam_graph, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  cosmoflow::build_model(cosmoflow_graph, cosmoflow::ModelSettings{}, 0.9, 4, 7);
  for (auto* g : {&cosmoflow_graph, &deepcam_graph}) {
    const Program p = sdk::program::lower_graph(*g->graph(), implemented());
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      const DevicePlan plan = make_plan(p, {precision});
      std::set<std::string> padded;
      for (size_t k = 0; k < p.nodes.size(); ++k)
        if (plan.nodes[k].conv && plan.nodes[k].conv->channels) padded.insert(p.nodes[k].name);
      const std::set<std::string> expected = precision == Precision::fp32 ? std::set<std::string>{}
                                             : g == &cosmoflow_graph     ? std::set<std::string>{"conv1"}
                                                                         : std::set<std::string>{"decoder.last_deconv"};
      EXPECT_EQ(padded, expected) << name_of(precision);
      for (size_t i = 0; i < p.params.size(); ++i) {
        const std::string name = p.value(p.params[i].value).name;
        const int64_t count = p.value(p.params[i].value).numel();
        EXPECT_EQ(plan.memory.params.params[i].count, static_cast<size_t>(count)) << name;
        // The masters' layout (cuDNN's filter, unpadded: only the half copy has the zero rows) is a
        // permutation of the model's elements.
        const ParamMap& map = plan.params[i];
        if (map.identity()) continue;
        EXPECT_EQ(map.rows * map.cols, count) << name << " " << name_of(precision);
        std::vector<bool> hit(static_cast<size_t>(count), false);
        for (int64_t e = 0; e < count; ++e) {
          const int64_t at = map.device(e);
          ASSERT_TRUE(at >= 0 && at < count && !hit[static_cast<size_t>(at)]) << name << " element " << e;
          hit[static_cast<size_t>(at)] = true;
        }
      }
    }
  }
}

// By default every 1x1 stride-1 conv of DeepCAM is a cuBLASLt gemm (backend.pointwise=cudnn: none), and
// cuDNN's search runs once per distinct conv shape and pass, not once per conv. By default the depthwise
// convs run on our kernel (backend.depthwise=own) and the few convs left on cuDNN hardly repeat; with
// backend.depthwise=cudnn the middle blocks' depthwise convs (16 repeats) are cuDNN's, and most searches
// are repeats.
TEST(CudaPlanFigures, DeepCamsPointwiseConvsAreGemmsAndItsConvShapesRepeat) {
  sdk::GraphBuilder g;
  deepcam::build_model(g, deepcam::DataSettings{}, deepcam::Normalization::identity(16), deepcam::OptimizerSettings{}, 8, 7);
  const Program p = sdk::program::lower_graph(*g.graph(), implemented());
  const DevicePlan plan = make_plan(p, {Precision::bf16});
  const std::vector<NodeLowering> cudnn = lower_nodes(p, {Pointwise::cudnn});
  size_t pointwise = 0;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    if (!is_pointwise(p.nodes[k])) continue;
    ++pointwise;
    EXPECT_EQ(plan.nodes[k].engine, Engine::cublaslt_dense) << p.nodes[k].name;
    EXPECT_EQ(cudnn[k].engine, Engine::cudnn_conv) << p.nodes[k].name;
  }
  EXPECT_GE(pointwise, 30u);  // the separable convs' pointwise halves and the skips
  // (convs on cuDNN, searches, distinct keys) of a plan, one search per pass of each conv without the cache.
  const auto searches_of = [&](const DevicePlan& each, const char* depthwise) {
    size_t convs = 0, searches = 0;
    std::set<ConvKey> keys;
    for (size_t k = 0; k < p.nodes.size(); ++k) {
      if (!each.nodes[k].conv) continue;
      ++convs;
      const NodePrecision& n = each.precision.nodes[k];
      for (int pass = 0; pass < 3; ++pass, ++searches) keys.insert(conv_key(*each.nodes[k].conv, n.data, n.math, pass));
    }
    std::printf("DeepCAM 768x1152 batch 8, backend.depthwise=%s: %zu pointwise convs on cuBLASLt; %zu convs left on "
                "cuDNN, %zu searches for %zu distinct shapes and passes\n",
                depthwise, pointwise, convs, searches, keys.size());
    return std::pair(searches, keys.size());
  };
  searches_of(plan, "own");
  Options depthwise_on_cudnn{Precision::bf16};
  depthwise_on_cudnn.own.depthwise = false;
  const auto [searches, distinct] = searches_of(make_plan(p, depthwise_on_cudnn), "cudnn");
  EXPECT_LT(distinct * 2, searches);  // at least half the searches are repeats
}
#endif

}  // namespace
}  // namespace mlph::cuda::plan
