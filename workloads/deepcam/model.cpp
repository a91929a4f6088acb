#include "model.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "mlph/sdk/graph/tensor.hpp"

namespace mlph::deepcam {
namespace {

using Shape = std::vector<int64_t>;

// Which PyTorch initialization a convolution keeps (REFERENCE §2.1 "Initialization"): the encoder
// and ASPP convs are overwritten with kaiming_normal_; everything else keeps the layer default.
enum class Init { kaiming_normal, torch_default };

class Builder {
 public:
  Builder(sdk::GraphBuilder& g, uint64_t seed, uint32_t batchnorm_group_size)
      : g_(g), seed_(seed), batchnorm_group_size_(batchnorm_group_size) {}

  Shape shape(int32_t x) const {
    const MLPH_Value& v = g_.value_info(x);
    return {v.shape, v.shape + v.ndim};
  }

  // 2D convolution, weight [k,k,Ci/groups,Co]; zero padding `pad` on every side.
  int32_t conv(int32_t x, const std::string& name, int64_t co, int k, Init init, int stride = 1, int dilation = 1,
               int pad = 0, int64_t groups = 1, bool bias = false) {
    const Shape in = shape(x);
    const int64_t ci = in[3];
    const double fan_in = static_cast<double>(ci / groups) * k * k;
    const int32_t w = weight(name + ".weight", {k, k, ci / groups, co}, fan_in, init);
    std::vector<int32_t> inputs{x, w};
    if (bias) inputs.push_back(weight(name + ".bias", {co}, fan_in, Init::torch_default));
    auto out = [&](int64_t s) { return (s + 2 * pad - dilation * (k - 1) - 1) / stride + 1; };
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, {in[0], out(in[1]), out(in[2]), co});
    const double s = stride, d = dilation, p = pad;
    g_.node("conv", name, inputs, {y},
            {{"stride", {s, s}}, {"dilation", {d, d}}, {"padding", {p, p}}, {"groups", static_cast<double>(groups)}});
    return y;
  }

  // PyTorch ConvTranspose2d(k3, s2, p1, output_padding 1, no bias): doubles H and W. Weight
  // [k,k,Co,Ci]; PyTorch's default init takes fan_in from weight.size(1) = Co, so fan_in = Co*k*k.
  int32_t upsample(int32_t x, const std::string& name, int64_t co) {
    const Shape in = shape(x);
    const int32_t w = weight(name + ".weight", {3, 3, co, in[3]}, static_cast<double>(co) * 9, Init::torch_default);
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, {in[0], 2 * in[1], 2 * in[2], co});
    g_.node("conv_transpose", name, {x, w}, {y},
            {{"stride", {2, 2}}, {"dilation", {1, 1}}, {"padding", {1, 1}}, {"output_padding", {1, 1}}});
    return y;
  }

  // BatchNorm2d(eps 1e-5, momentum 0.1): gamma 1, beta 0 trainable; running mean 0 and var 1 are state.
  // Over a group of ranks (SyncBatchNorm, the reference's GBN) when batchnorm_group_size > 1.
  int32_t batch_norm(int32_t x, const std::string& name) {
    const Shape in = shape(x);
    const int64_t c = in[3];
    const int32_t gamma = constant(name + ".weight", c, 1.0f, MLPH_PARAM_TRAINABLE);
    const int32_t beta = constant(name + ".bias", c, 0.0f, MLPH_PARAM_TRAINABLE);
    const int32_t mean = constant(name + ".running_mean", c, 0.0f, 0);
    const int32_t var = constant(name + ".running_var", c, 1.0f, 0);
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, in);
    std::vector<sdk::AttrInit> attrs = {{"eps", 1e-5}, {"momentum", 0.1}};
    if (batchnorm_group_size_ > 1) attrs.push_back({"group_size", static_cast<double>(batchnorm_group_size_)});
    g_.node("batch_norm", name, {x, gamma, beta, mean, var}, {y}, std::move(attrs));
    ++batch_norms_;
    return y;
  }

  int32_t relu(int32_t x, const std::string& name) { return unary("relu", name, x); }

  int32_t unary(const std::string& op, const std::string& name, int32_t x) {
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, shape(x));
    g_.node(op, name, {x}, {y});
    return y;
  }

  int32_t add(int32_t a, int32_t b, const std::string& name) {
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, shape(a));
    g_.node("add", name, {a, b}, {y});
    return y;
  }

  int32_t concat(const std::vector<int32_t>& xs, const std::string& name) {
    Shape out = shape(xs[0]);
    out[3] = 0;
    for (int32_t x : xs) out[3] += shape(x)[3];
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, out);
    g_.node("concat", name, xs, {y});
    return y;
  }

  // SeparableConv2d_same: depthwise 3x3 (padding = dilation) then pointwise 1x1; no BN or ReLU inside.
  int32_t separable(int32_t x, const std::string& name, int64_t co, int stride = 1, int dilation = 1) {
    const int64_t ci = shape(x)[3];
    x = conv(x, name + ".conv1", ci, 3, Init::kaiming_normal, stride, dilation, dilation, ci);
    return conv(x, name + ".pointwise", co, 1, Init::kaiming_normal);
  }

  // Xception Block (REFERENCE §2.1): rep = [Sep, BN, ReLU] x reps with the last ReLU removed, then a
  // stride-2 (or is_last) separable conv without BN; plus the skip (1x1 conv + BN, or identity).
  int32_t block(int32_t x, const std::string& name, int64_t co, int reps, int stride, int dilation, bool end_with_relu,
                bool grow_first = true, bool is_last = false) {
    const int64_t ci = shape(x)[3];
    int32_t skip = x;
    if (co != ci || stride != 1) {
      skip = conv(x, name + ".skip", co, 1, Init::kaiming_normal, stride);
      skip = batch_norm(skip, name + ".skipbn");
    }
    int32_t h = x;
    for (int i = 0; i < reps; ++i) {
      const bool grows = grow_first ? i == 0 : i == reps - 1;
      const std::string layer = name + ".rep" + std::to_string(i);
      h = separable(h, layer, grows ? co : shape(h)[3], 1, dilation);
      h = batch_norm(h, layer + ".bn");
      if (i + 1 < reps) h = relu(h, layer + ".relu");
    }
    if (stride != 1) h = separable(h, name + ".down", co, stride, 1);
    if (stride == 1 && is_last) h = separable(h, name + ".last", co, 1, 1);
    h = add(h, skip, name + ".add");
    return end_with_relu ? relu(h, name + ".relu") : h;
  }

  int32_t conv_bn_relu(int32_t x, const std::string& name, int64_t co, int k, Init init, int dilation = 1, int pad = 0,
                       int stride = 1) {
    x = conv(x, name, co, k, init, stride, dilation, pad);
    return relu(batch_norm(x, name + ".bn"), name + ".relu");
  }

  int32_t upsample_bn_relu(int32_t x, const std::string& name, int64_t co) {
    return relu(batch_norm(upsample(x, name, co), name + ".bn"), name + ".relu");
  }

  // A trainable (or state) tensor filled with one value.
  int32_t constant(const std::string& name, int64_t n, float value, uint32_t flags) {
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, {n});
    g_.parameter(v, std::vector<float>(static_cast<size_t>(n), value), 0.0, flags ? 1.0 : 0.0, flags);
    ++next_stream_;
    return v;
  }

  int batch_norms() const { return batch_norms_; }

 private:
  // kaiming_normal_(fan_in, gain sqrt 2): N(0, 2/fan_in). PyTorch default (kaiming_uniform_ a=sqrt 5,
  // and the bias): U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  int32_t weight(const std::string& name, Shape shape, double fan_in, Init init) {
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, shape);
    const auto count = static_cast<size_t>(sdk::numel(g_.value_info(v)));
    const uint64_t stream = next_stream_++;
    std::vector<float> w(count);
    if (init == Init::kaiming_normal) {
      const double std = std::sqrt(2.0 / fan_in);
      // Box-Muller: each pair of uniforms gives two independent normals.
      for (size_t pair = 0; 2 * pair < count; ++pair) {
        const double u1 = 1.0 - mlph_uniform(seed_, stream, 0, pair);  // (0, 1]: log is finite
        const double u2 = mlph_uniform(seed_, stream, 1, pair);
        const double radius = std * std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
        w[2 * pair] = static_cast<float>(radius * std::cos(angle));
        if (2 * pair + 1 < count) w[2 * pair + 1] = static_cast<float>(radius * std::sin(angle));
      }
    } else {
      const double bound = 1.0 / std::sqrt(fan_in);
      for (size_t i = 0; i < count; ++i) w[i] = static_cast<float>((2.0 * mlph_uniform(seed_, stream, 0, i) - 1.0) * bound);
    }
    g_.parameter(v, std::move(w));
    return v;
  }

  sdk::GraphBuilder& g_;
  uint64_t seed_;
  uint64_t next_stream_ = 0;
  uint32_t batchnorm_group_size_;
  int batch_norms_ = 0;
};

// The modified aligned Xception at output stride 16; returns (features at H/16, low-level features at H/4).
std::pair<int32_t, int32_t> xception(Builder& net, int32_t x) {
  const Init he = Init::kaiming_normal;
  x = net.conv_bn_relu(x, "xception.conv1", 32, 3, he, 1, 1, 2);
  x = net.conv_bn_relu(x, "xception.conv2", 64, 3, he, 1, 1);
  x = net.block(x, "xception.block1", 128, 2, 2, 1, false);
  // The reference's in-place ReLU after block1 also rewrites low_level_feat: it is post-ReLU.
  x = net.relu(x, "xception.block1.relu");
  const int32_t low_level = x;
  x = net.block(x, "xception.block2", 256, 2, 2, 1, true);
  x = net.block(x, "xception.block3", 728, 2, 2, 1, true, true, true);
  for (int i = 4; i <= 19; ++i) x = net.block(x, "xception.block" + std::to_string(i), 728, 3, 1, 1, true);
  x = net.block(x, "xception.block20", 1024, 2, 1, 1, false, false, true);
  const int64_t widths[] = {1536, 1536, 2048};
  for (int i = 0; i < 3; ++i) {
    const std::string name = "xception.conv" + std::to_string(i + 3);
    x = net.separable(x, name, widths[i], 1, 2);
    x = net.relu(net.batch_norm(x, name + ".bn"), name + ".relu");
  }
  return {x, low_level};
}

// ASPP with rates 1, 6, 12, 18 and the global-pool branch (1x1 conv, trainable affine, ReLU,
// broadcast to the feature map: the reference tiles to a hard-coded 48x72, equal at full size).
int32_t aspp(Builder& net, sdk::GraphBuilder& g, int32_t x) {
  const Init he = Init::kaiming_normal;
  std::vector<int32_t> branches{net.conv_bn_relu(x, "aspp1", 256, 1, he)};
  const int rates[] = {6, 12, 18};
  for (int i = 0; i < 3; ++i)
    branches.push_back(net.conv_bn_relu(x, "aspp" + std::to_string(i + 2), 256, 3, he, rates[i], rates[i]));

  const Shape in = net.shape(x);
  const int32_t pooled = g.value("global_pool", MLPH_DTYPE_F32, {in[0], 1, 1, in[3]});
  g.node("global_avg_pool", "global_pool", {x}, {pooled});
  const int32_t projected = net.conv(pooled, "global_pool.conv", 256, 1, Init::torch_default);
  const int32_t weights = net.constant("global_pool.affine.weights", 256, 1.0f, MLPH_PARAM_TRAINABLE);
  const int32_t bias = net.constant("global_pool.affine.bias", 256, 0.0f, MLPH_PARAM_TRAINABLE);
  const int32_t affine = g.value("global_pool.affine", MLPH_DTYPE_F32, {in[0], 1, 1, 256});
  g.node("channel_affine", "global_pool.affine", {projected, weights, bias}, {affine});
  const int32_t activated = net.relu(affine, "global_pool.relu");
  const Shape out{in[0], in[1], in[2], 256};
  const int32_t broadcast = g.value("global_pool.broadcast", MLPH_DTYPE_F32, out);
  g.node("broadcast", "global_pool.broadcast", {activated}, {broadcast},
         {{"shape", std::vector<double>(out.begin(), out.end())}});
  branches.push_back(broadcast);

  x = net.concat(branches, "aspp.concat");
  return net.conv_bn_relu(x, "aspp.project", 256, 1, Init::torch_default);
}

// DeconvUpsampler(n_output 3): every layer keeps PyTorch's default initialization.
int32_t decoder(Builder& net, int32_t x, int32_t low_level) {
  const Init torch_default = Init::torch_default;
  const int32_t low = net.conv_bn_relu(low_level, "decoder.low_level", 48, 1, torch_default);
  x = net.upsample_bn_relu(x, "decoder.deconv1a", 256);
  x = net.upsample_bn_relu(x, "decoder.deconv1b", 256);
  x = net.concat({x, low}, "decoder.concat");
  x = net.conv_bn_relu(x, "decoder.conv1", 256, 3, torch_default, 1, 1);
  x = net.conv_bn_relu(x, "decoder.conv2", 256, 3, torch_default, 1, 1);
  x = net.conv(x, "decoder.conv3", 256, 1, torch_default, 1, 1, 0, 1, true);  // the one conv with a bias
  x = net.upsample_bn_relu(x, "decoder.deconv2", 256);
  return net.upsample(x, "decoder.last_deconv", kClasses);
}

std::vector<sdk::AttrInit> optimizer_attrs(const OptimizerSettings& o) {
  std::vector<sdk::AttrInit> attrs{{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay}};
  if (o.name == "LAMB") attrs.emplace_back("max_grad_norm", o.max_grad_norm);
  return attrs;
}

const char* optimizer_op(const std::string& name) {
  if (name == "LAMB") return "lamb";
  if (name == "AdamW") return "adamw";
  if (name == "Adam") return "adam";
  sdk::fail(MLPH_INVALID_ARGUMENT, "unknown optimizer '" + name + "': LAMB, AdamW or Adam");
}

}  // namespace

Normalization Normalization::identity(int channels) {
  return {std::vector<float>(static_cast<size_t>(channels), 0.0f), std::vector<float>(static_cast<size_t>(channels), 1.0f)};
}

std::array<float, kClasses> class_weights() {
  // Per-class pixel frequencies hard-coded in the reference's train.py.
  const double frequencies[kClasses] = {0.986267818390377, 0.0004578708870701058, 0.01327431072255291};
  std::array<float, kClasses> w{};
  for (int c = 0; c < kClasses; ++c) w[c] = static_cast<float>(std::pow(frequencies[c], -0.125));
  return w;
}

void build_model(sdk::GraphBuilder& g, const DataSettings& data, const Normalization& norm,
                 const OptimizerSettings& optimizer, uint32_t batch, uint64_t seed, const TrainingSettings& training) {
  const int64_t b = batch, h = data.height, w = data.width, c = data.channels;
  if (norm.shift.size() != static_cast<size_t>(c) || norm.scale.size() != static_cast<size_t>(c))
    sdk::fail(MLPH_INVALID_ARGUMENT, "DeepCAM: normalization statistics for " + std::to_string(norm.shift.size()) +
                                         " channels, but data.channels is " + std::to_string(c));
  const int32_t x = g.value("x", MLPH_DTYPE_F32, {b, h, w, c});
  const int32_t labels = g.value("labels", MLPH_DTYPE_I32, {b, h, w});
  Builder net(g, seed, training.batchnorm_group_size);

  const int32_t shift = g.value("normalize.shift", MLPH_DTYPE_F32, {c});
  const int32_t scale = g.value("normalize.scale", MLPH_DTYPE_F32, {c});
  g.parameter(shift, norm.shift, 0.0, 0.0, 0);
  g.parameter(scale, norm.scale, 0.0, 0.0, 0);
  const int32_t normalized = g.value("normalize", MLPH_DTYPE_F32, {b, h, w, c});
  g.node("shift_scale", "normalize", {x, shift, scale}, {normalized});

  const auto [features, low_level] = xception(net, normalized);
  const int32_t logits = decoder(net, aspp(net, g, features), low_level);

  const std::array<float, kClasses> weights = class_weights();
  int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("softmax_cross_entropy", "loss", {logits, labels}, {loss},
         {{"class_weights", std::vector<double>(weights.begin(), weights.end())}});
  // Accumulated gradients then sum to the mean over the whole window (reference: loss / frequency).
  if (const uint32_t window = training.gradient_accumulation_frequency; window > 1) {
    const int32_t per_window = g.value("loss.per_window", MLPH_DTYPE_F32, {});
    g.node("scale", "loss.per_window", {loss}, {per_window}, {{"factor", 1.0 / window}});
    loss = per_window;
  }
  const int32_t iou = g.value("iou", MLPH_DTYPE_F32, {b});
  g.node("iou", "iou", {logits, labels}, {iou});

  g.inputs({x, labels});
  g.loss(loss);
  g.eval_outputs({iou});
  g.optimizer(optimizer_op(optimizer.name), optimizer_attrs(optimizer));
  g.seed(seed);
}

uint64_t count_parameters(const MLPH_Graph& graph) {
  uint64_t total = 0;
  for (size_t i = 0; i < graph.n_params; ++i)
    if (graph.params[i].flags & MLPH_PARAM_TRAINABLE)
      total += static_cast<uint64_t>(sdk::numel(graph.values[graph.params[i].value]));
  return total;
}

double forward_macs(const MLPH_Graph& graph) {
  double macs = 0;
  for (size_t i = 0; i < graph.n_nodes; ++i) {
    const MLPH_Node& n = graph.nodes[i];
    const std::string_view op = n.op;
    if (op != "conv" && op != "conv_transpose") continue;
    const MLPH_Value& w = graph.values[n.inputs[1]];
    const double kernel = static_cast<double>(w.shape[0] * w.shape[1]);
    if (op == "conv")  // every output element: k*k*Ci/groups
      macs += static_cast<double>(sdk::numel(graph.values[n.outputs[0]])) * kernel * static_cast<double>(w.shape[2]);
    else  // every input element scatters into k*k*Co outputs
      macs += static_cast<double>(sdk::numel(graph.values[n.inputs[0]])) * kernel * static_cast<double>(w.shape[2]);
  }
  return macs;
}

}  // namespace mlph::deepcam
