// Ops written as plain loops over the graph layout: preprocessing, dropout (its mask must match
// every other backend bit for bit), the losses and metrics, and the small DeepCAM helpers.
// Inputs in another layout are reordered to the graph layout first; sums run in double.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "mlph/common.h"
#include "mlph/sdk/util/error.hpp"
#include "ops.hpp"

namespace mlph::onednn {
namespace {

template <class T = float>
T* ptr(const memory& m) {
  return static_cast<T*>(m.get_data_handle());
}

// Base for loop ops: plain views of the inputs, a plain output, gradient sinks for the inputs.
class LoopOp : public Op {
 public:
  LoopOp(Net& net, const NodeView& n, bool define_output = true) : Op(n), net_(net), node_(n) {
    for (size_t i = 0; i < n.n_in(); ++i) in_.push_back(net.plain(n.in(i), pre_));
    if (define_output) net.define(n.out(), net.at(n.out()).plain);
  }
  void forward(const RunArgs& args) override {
    net_.run(pre_);
    net_.stream.wait();
    compute(args);
  }

 protected:
  virtual void compute(const RunArgs& args) = 0;
  float* out() { return ptr(net_.at(output()).mem); }
  float* dy() { return ptr(net_.at(output()).grad); }
  int64_t size(size_t input) const { return net_.at(node_.in(input)).numel(); }
  GradSink sink(size_t input) {
    const int32_t v = node_.in(input);
    if (!net_.needs_grad(output()) || !net_.needs_grad(v)) return {};
    return GradSink(net_, v, net_.at(v).plain);
  }
  // Writes one gradient contribution through `s` with `fill(float* dx)`.
  template <class F>
  static void write(GradSink& s, F&& fill) {
    if (!s) return;
    fill(ptr(s.target()));
    s.commit();
  }

  Net& net_;
  NodeView node_;
  std::vector<Step> pre_;
  std::vector<memory> in_;  // plain views of the inputs
};

class Log1p final : public LoopOp {
 public:
  using LoopOp::LoopOp;
  void compute(const RunArgs&) override {  // int16 inputs arrive as float32 (converted on load)
    const float* x = ptr(in_[0]);
    float* y = out();
    parallel_for(size(0), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = std::log1p(x[i]);
    });
  }
};

// Row-major reinterpretation: the output shares the input's plain memory.
class Reshape final : public LoopOp {
 public:
  Reshape(Net& net, const NodeView& n) : LoopOp(net, n, false) {
    const int32_t x = n.in(0), y = n.out();
    net.define(y, net.at(y).plain, net.view(in_[0], net.at(y).plain));
    if (net.needs_grad(y) && net.needs_grad(x))
      dx_ = GradSink(net, x, net.at(x).plain, net.view(net.at(y).grad, net.at(x).plain));
  }
  void compute(const RunArgs&) override {}
  void backward() override {
    if (dx_) dx_.commit();
  }

 private:
  GradSink dx_;
};

class Dropout final : public LoopOp {
 public:
  Dropout(Net& net, const NodeView& n) : LoopOp(net, n), rate_(n.attrs().number("rate")), dx_(sink(0)) {}
  void compute(const RunArgs& args) override {
    const float* x = ptr(in_[0]);
    float* y = out();
    const int64_t n = size(0);
    if (!args.training || rate_ == 0.0) {
      mask_.clear();  // identity; backward knows from the empty mask
      std::memcpy(y, x, size_t(n) * sizeof(float));
      return;
    }
    mask_.resize(size_t(n));
    const auto kept = float(1.0 / (1.0 - rate_));
    const uint64_t seed = args.seed, stream = node_.node->index, step = args.step;
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        // docs/ops.md: the float u is compared with the rate in double.
        const bool keep = double(mlph_uniform(seed, stream, step, uint64_t(i))) >= rate_;
        mask_[size_t(i)] = keep ? kept : 0.0f;
        y[i] = x[i] * mask_[size_t(i)];
      }
    });
  }
  void backward() override {
    const float* d = dy();
    write(dx_, [&](float* dx) {
      const int64_t n = size(0);
      if (mask_.empty()) return std::memcpy(dx, d, size_t(n) * sizeof(float)), void();
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dx[i] = d[i] * mask_[size_t(i)];
      });
    });
  }

 private:
  double rate_;
  GradSink dx_;
  std::vector<float> mask_;
};

// Index of the input element an output element of a broadcast reads: size-1 input dims repeat.
struct BroadcastMap {
  std::vector<int64_t> out, in_strides;  // in_strides: 0 along broadcast dims
  BroadcastMap(const std::vector<int64_t>& in, const std::vector<int64_t>& o) : out(o), in_strides(o.size()) {
    int64_t s = 1;
    for (size_t d = o.size(); d-- > 0;) in_strides[d] = in[d] == 1 ? 0 : s, s *= in[d];
  }
  int64_t source(int64_t i) const {
    int64_t src = 0;
    for (size_t d = out.size(); d-- > 0;) src += (i % out[d]) * in_strides[d], i /= out[d];
    return src;
  }
};

class Broadcast final : public LoopOp {
 public:
  Broadcast(Net& net, const NodeView& n)
      : LoopOp(net, n), map_(net.at(n.in(0)).shape, net.at(n.out()).shape), dx_(sink(0)) {}
  void compute(const RunArgs&) override {
    const float* x = ptr(in_[0]);
    float* y = out();
    parallel_for(net_.at(output()).numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x[map_.source(i)];
    });
  }
  void backward() override {
    const float* d = dy();
    write(dx_, [&](float* dx) {
      std::fill(dx, dx + size(0), 0.0f);
      for (int64_t i = 0, n = net_.at(output()).numel(); i < n; ++i) dx[map_.source(i)] += d[i];
    });
  }

 private:
  BroadcastMap map_;
  GradSink dx_;
};

// y = x * w[c] + b[c] over x viewed as [rows, C].
class ChannelAffine final : public LoopOp {
 public:
  ChannelAffine(Net& net, const NodeView& n) : LoopOp(net, n), dx_(sink(0)), dw_(sink(1)), db_(sink(2)) {
    channels_ = net.at(n.in(0)).shape.back();
  }
  void compute(const RunArgs&) override {
    const float *x = ptr(in_[0]), *w = ptr(in_[1]), *b = ptr(in_[2]);
    float* y = out();
    const int64_t c = channels_;
    parallel_for(size(0), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) y[i] = x[i] * w[i % c] + b[i % c];
    });
  }
  void backward() override {
    const float *x = ptr(in_[0]), *w = ptr(in_[1]), *d = dy();
    const int64_t c = channels_, n = size(0);
    write(dx_, [&](float* dx) {
      parallel_for(n, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) dx[i] = d[i] * w[i % c];
      });
    });
    std::vector<double> dw(size_t(c), 0.0), db(size_t(c), 0.0);
    for (int64_t i = 0; i < n; ++i) dw[size_t(i % c)] += double(d[i]) * x[i], db[size_t(i % c)] += d[i];
    write(dw_, [&](float* g) { std::transform(dw.begin(), dw.end(), g, [](double v) { return float(v); }); });
    write(db_, [&](float* g) { std::transform(db.begin(), db.end(), g, [](double v) { return float(v); }); });
  }

 private:
  int64_t channels_ = 1;
  GradSink dx_, dw_, db_;
};

class ShiftScale final : public LoopOp {
 public:
  ShiftScale(Net& net, const NodeView& n) : LoopOp(net, n), channels_(net.at(n.in(0)).shape.back()) {}
  void compute(const RunArgs&) override {
    const float *x = ptr(in_[0]), *shift = ptr(in_[1]), *scale = ptr(in_[2]);
    float* y = out();
    const int64_t c = channels_;
    parallel_for(size(0), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) y[i] = (x[i] - shift[i % c]) * scale[i % c];
    });
  }

 private:
  int64_t channels_;
};

class Mse final : public LoopOp {
 public:
  Mse(Net& net, const NodeView& n) : LoopOp(net, n), dp_(sink(0)), dt_(sink(1)) {}
  void compute(const RunArgs&) override {
    const float *p = ptr(in_[0]), *t = ptr(in_[1]);
    double sum = 0;
    for (int64_t i = 0, n = size(0); i < n; ++i) sum += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
    out()[0] = float(sum / double(size(0)));
  }
  void backward() override {
    const float *p = ptr(in_[0]), *t = ptr(in_[1]);
    const int64_t n = size(0);
    const float scale = 2.0f * dy()[0] / float(n);
    write(dp_, [&](float* g) {
      for (int64_t i = 0; i < n; ++i) g[i] = scale * (p[i] - t[i]);
    });
    write(dt_, [&](float* g) {
      for (int64_t i = 0; i < n; ++i) g[i] = -(scale * (p[i] - t[i]));
    });
  }

 private:
  GradSink dp_, dt_;
};

class AbsErrorSum final : public LoopOp {
 public:
  using LoopOp::LoopOp;
  void compute(const RunArgs&) override {
    const float *p = ptr(in_[0]), *t = ptr(in_[1]);
    double sum = 0;
    for (int64_t i = 0, n = size(0); i < n; ++i) sum += std::fabs(double(p[i]) - t[i]);
    out()[0] = float(sum);
  }
};

// Logits [rows, C] with labels [rows]; labels outside [0, C) are an error naming the node.
class PixelClassifier : public LoopOp {
 public:
  PixelClassifier(Net& net, const NodeView& n) : LoopOp(net, n) {
    classes_ = net.at(n.in(0)).shape.back();
    rows_ = size(0) / classes_;
  }

 protected:
  int32_t label(int64_t r) const {
    const int32_t l = ptr<int32_t>(in_[1])[r];
    if (l < 0 || l >= classes_)
      sdk::fail(MLPH_INVALID_ARGUMENT, "onednn-cpu backend: " + where() + ": label " + std::to_string(l) +
                                           " at pixel " + std::to_string(r) + " is outside [0, " +
                                           std::to_string(classes_) + ")");
    return l;
  }
  int64_t classes_ = 1, rows_ = 1;
};

double log_sum_exp(const float* z, int64_t classes) {
  const float top = *std::max_element(z, z + classes);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(z[c]) - top);
  return top + std::log(sum);
}

class SoftmaxCrossEntropy final : public PixelClassifier {
 public:
  SoftmaxCrossEntropy(Net& net, const NodeView& n) : PixelClassifier(net, n), dz_(sink(0)) {
    for (double w : n.attrs().numbers("class_weights")) weights_.push_back(float(w));
  }
  void compute(const RunArgs&) override {
    const float* z = ptr(in_[0]);
    for (int64_t r = 0; r < rows_; ++r) label(r);  // validate before the parallel part
    std::vector<double> partial(64, 0.0);
    const int64_t parts = int64_t(partial.size());
    parallel_for(parts, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part)
        for (int64_t r = rows_ * part / parts; r < rows_ * (part + 1) / parts; ++r) {
          const float* zr = z + r * classes_;
          const int32_t l = ptr<int32_t>(in_[1])[r];
          partial[size_t(part)] += double(weights_[size_t(l)]) * (log_sum_exp(zr, classes_) - zr[l]);
        }
    });
    double sum = 0;
    for (double p : partial) sum += p;
    out()[0] = float(sum / double(rows_));
  }
  void backward() override {
    const float* z = ptr(in_[0]);
    const int32_t* labels = ptr<int32_t>(in_[1]);
    const double scale = double(dy()[0]) / double(rows_);
    write(dz_, [&](float* g) {
      parallel_for(rows_, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const float* zr = z + r * classes_;
          const double lse = log_sum_exp(zr, classes_), w = scale * weights_[size_t(labels[r])];
          for (int64_t c = 0; c < classes_; ++c)
            g[r * classes_ + c] = float(w * (std::exp(double(zr[c]) - lse) - (c == labels[r] ? 1.0 : 0.0)));
        }
      });
    });
  }

 private:
  std::vector<float> weights_;
  GradSink dz_;
};

class Iou final : public PixelClassifier {
 public:
  using PixelClassifier::PixelClassifier;
  void compute(const RunArgs&) override {
    const float* z = ptr(in_[0]);
    const int64_t batch = net_.at(node_.in(0)).shape[0], pixels = rows_ / batch;
    std::vector<int64_t> tp(static_cast<size_t>(classes_)), predicted(tp.size()), actual(tp.size());
    for (int64_t n = 0; n < batch; ++n) {
      std::fill(tp.begin(), tp.end(), 0), std::fill(predicted.begin(), predicted.end(), 0);
      std::fill(actual.begin(), actual.end(), 0);
      for (int64_t r = n * pixels; r < (n + 1) * pixels; ++r) {
        const float* zr = z + r * classes_;
        const auto pred = size_t(std::max_element(zr, zr + classes_) - zr);  // lowest class on ties
        const auto l = size_t(label(r));
        ++predicted[pred], ++actual[l];
        if (pred == l) ++tp[pred];
      }
      float sum = 0.0f;
      for (size_t c = 0; c < tp.size(); ++c) {
        const int64_t joined = predicted[c] + actual[c] - tp[c];
        sum += joined == 0 ? 1.0f / float(classes_) : float(tp[c]) / (float(joined) * float(classes_));
      }
      out()[n] = sum;
    }
  }
};

// halo_exchange and spatial_gather (docs/ops.md): the SDK's host implementation over plain buffers.
template <class Impl>
class SpatialOp final : public LoopOp {
 public:
  template <class... Args>
  SpatialOp(Net& net, const NodeView& n, Args&&... args)
      : LoopOp(net, n), impl_(std::forward<Args>(args)...), dx_(sink(0)) {}
  void compute(const RunArgs&) override { impl_.forward(ptr(in_[0]), out()); }
  void backward() override {
    write(dx_, [&](float* dx) { impl_.backward(dy(), dx, false); });
  }

 private:
  Impl impl_;
  GradSink dx_;
};

}  // namespace

std::unique_ptr<Op> make_spatial_op(Net& net, const NodeView& n, const MLPH_HostApi* host,
                                    sdk::RankGroups& groups) {
  const sdk::spatial::Dims grid = n.attrs().ints("grid");
  const std::string what = n.where() + ": grid " + sdk::spatial::grid_text(grid);
  const MLPH_CommsHandle* group = groups.group(sdk::spatial::ranks(grid), what);
  const std::string where = "onednn-cpu backend: " + what;
  const std::vector<int64_t>& x = net.at(n.in(0)).shape;
  if (n.node->op == "spatial_gather")
    return std::make_unique<SpatialOp<sdk::spatial::SpatialGather>>(net, n, host, group, x, grid, where);
  const std::vector<int64_t> halo = n.attrs().ints("halo");
  const auto spatial = static_cast<long>(grid.size());
  return std::make_unique<SpatialOp<sdk::spatial::HaloExchange>>(
      net, n, host, group, x, grid, sdk::spatial::Dims(halo.begin(), halo.begin() + spatial),
      sdk::spatial::Dims(halo.end() - spatial, halo.end()), where);
}

std::unique_ptr<Op> make_log1p(Net& net, const NodeView& n) { return std::make_unique<Log1p>(net, n); }
std::unique_ptr<Op> make_reshape(Net& net, const NodeView& n) { return std::make_unique<Reshape>(net, n); }
std::unique_ptr<Op> make_dropout(Net& net, const NodeView& n) { return std::make_unique<Dropout>(net, n); }
std::unique_ptr<Op> make_broadcast(Net& net, const NodeView& n) { return std::make_unique<Broadcast>(net, n); }
std::unique_ptr<Op> make_channel_affine(Net& net, const NodeView& n) { return std::make_unique<ChannelAffine>(net, n); }
std::unique_ptr<Op> make_shift_scale(Net& net, const NodeView& n) { return std::make_unique<ShiftScale>(net, n); }
std::unique_ptr<Op> make_mse(Net& net, const NodeView& n) { return std::make_unique<Mse>(net, n); }
std::unique_ptr<Op> make_abs_error_sum(Net& net, const NodeView& n) { return std::make_unique<AbsErrorSum>(net, n); }
std::unique_ptr<Op> make_softmax_cross_entropy(Net& net, const NodeView& n) {
  return std::make_unique<SoftmaxCrossEntropy>(net, n);
}
std::unique_ptr<Op> make_iou(Net& net, const NodeView& n) { return std::make_unique<Iou>(net, n); }

}  // namespace mlph::onednn
