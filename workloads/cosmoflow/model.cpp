#include "model.hpp"

#include <cmath>
#include <string>

#include "mlph/sdk/tensor.hpp"

namespace mlph::cosmoflow {
namespace {

// Keras glorot_uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)).
std::vector<float> glorot_uniform(size_t count, double fan_in, double fan_out, uint64_t seed, uint64_t stream) {
  const double limit = std::sqrt(6.0 / (fan_in + fan_out));
  std::vector<float> w(count);
  for (size_t i = 0; i < count; ++i)
    w[i] = static_cast<float>((2.0 * mlph_uniform(seed, stream, 0, i) - 1.0) * limit);
  return w;
}

class Builder {
 public:
  Builder(sdk::GraphBuilder& g, uint64_t seed) : g_(g), seed_(seed) {}

  int32_t conv_block(int32_t x, int index, int kernel, int filters) {
    const MLPH_Value in = g_.value_info(x);
    const int64_t batch = in.shape[0], edge = in.shape[1], channels = in.shape[4];
    const std::string name = "conv" + std::to_string(index);
    const double receptive = static_cast<double>(kernel) * kernel * kernel;
    const int32_t w = weight(name + ".kernel", {kernel, kernel, kernel, channels, filters},
                             receptive * static_cast<double>(channels), receptive * filters, 0.0);
    const int32_t b = bias(name + ".bias", filters);
    // Keras 'same': total padding k-1, the odd one after.
    const double before = (kernel - 1) / 2, after = kernel - 1 - (kernel - 1) / 2;
    int32_t y = g_.value(name, MLPH_DTYPE_F32, {batch, edge, edge, edge, filters});
    g_.node("conv", name, {x, w, b}, {y},
            {{"stride", {1, 1, 1}}, {"dilation", {1, 1, 1}}, {"padding", {before, before, before, after, after, after}}});
    y = unary("leaky_relu", name + ".act", y, {{"alpha", 0.3}});
    const int32_t pooled = g_.value(name + ".pool", MLPH_DTYPE_F32, {batch, edge / 2, edge / 2, edge / 2, filters});
    g_.node("max_pool", name + ".pool", {y}, {pooled}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
    return pooled;
  }

  int32_t dense(int32_t x, const std::string& name, int64_t units, double l2) {
    const MLPH_Value in = g_.value_info(x);
    const int32_t w = weight(name + ".kernel", {in.shape[1], units}, static_cast<double>(in.shape[1]),
                             static_cast<double>(units), l2);
    const int32_t b = bias(name + ".bias", units);
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, {in.shape[0], units});
    g_.node("dense", name, {x, w, b}, {y});
    return y;
  }

  int32_t unary(const std::string& op, const std::string& name, int32_t x, std::vector<sdk::AttrInit> attrs = {}) {
    const MLPH_Value in = g_.value_info(x);
    const int32_t y = g_.value(name, MLPH_DTYPE_F32, {in.shape, in.shape + in.ndim});
    g_.node(op, name, {x}, {y}, std::move(attrs));
    return y;
  }

 private:
  int32_t weight(const std::string& name, std::vector<int64_t> shape, double fan_in, double fan_out, double l2) {
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, shape);
    const auto count = static_cast<size_t>(sdk::numel(g_.value_info(v)));
    g_.parameter(v, glorot_uniform(count, fan_in, fan_out, seed_, next_stream_++), l2);
    return v;
  }
  int32_t bias(const std::string& name, int64_t units) {
    const int32_t v = g_.value(name, MLPH_DTYPE_F32, {units});
    g_.parameter(v, std::vector<float>(static_cast<size_t>(units), 0.0f));
    ++next_stream_;
    return v;
  }

  sdk::GraphBuilder& g_;
  uint64_t seed_;
  uint64_t next_stream_ = 0;
};

}  // namespace

void build_model(sdk::GraphBuilder& g, const ModelSettings& m, double momentum, uint32_t batch, uint64_t seed) {
  const int64_t b = batch, e = m.edge;
  const int32_t x = g.value("x", MLPH_DTYPE_I16, {b, e, e, e, 4});
  const int32_t y = g.value("y", MLPH_DTYPE_F32, {b, 4});
  Builder net(g, seed);
  int32_t h = g.value("log1p", MLPH_DTYPE_F32, {b, e, e, e, 4});
  g.node("log1p", "log1p", {x}, {h});
  for (int i = 0; i < m.n_conv_layers; ++i) h = net.conv_block(h, i + 1, m.kernel_size, m.conv_size << i);

  const MLPH_Value last = g.value_info(h);
  const int64_t flat = last.shape[1] * last.shape[2] * last.shape[3] * last.shape[4];
  const int32_t flattened = g.value("flatten", MLPH_DTYPE_F32, {b, flat});
  g.node("reshape", "flatten", {h}, {flattened}, {{"shape", {static_cast<double>(b), static_cast<double>(flat)}}});

  h = flattened;
  const int units[] = {m.fc1_size, m.fc2_size};
  for (int i = 0; i < 2; ++i) {
    const std::string name = "dense" + std::to_string(i + 1);
    h = net.dense(h, name, units[i], m.weight_decay);
    h = net.unary("leaky_relu", name + ".act", h, {{"alpha", 0.3}});
    h = net.unary("dropout", name + ".dropout", h, {{"rate", m.dropout}});
  }
  h = net.dense(h, "output", 4, 0.0);
  h = net.unary("tanh", "output.tanh", h);
  const int32_t prediction = net.unary("scale", "output.scale", h, {{"factor", 1.2}});

  const int32_t loss = g.value("loss", MLPH_DTYPE_F32, {});
  g.node("mse", "loss", {prediction, y}, {loss});
  const int32_t abs_error = g.value("abs_error_sum", MLPH_DTYPE_F32, {});
  g.node("abs_error_sum", "abs_error_sum", {prediction, y}, {abs_error});

  g.inputs({x, y});
  g.loss(loss);
  g.eval_outputs({abs_error});
  g.optimizer("sgd_keras", {{"momentum", momentum}});
  g.seed(seed);
}

uint64_t count_parameters(const MLPH_Graph& graph) {
  uint64_t total = 0;
  for (size_t i = 0; i < graph.n_params; ++i)
    if (graph.params[i].flags & MLPH_PARAM_TRAINABLE) total += static_cast<uint64_t>(sdk::numel(graph.values[graph.params[i].value]));
  return total;
}

}  // namespace mlph::cosmoflow
