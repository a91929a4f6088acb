#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/graph/tensor.hpp"

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

// Keras 'same': total padding k-1, the odd one after.
int64_t pad_before(int kernel) { return (kernel - 1) / 2; }
int64_t pad_after(int kernel) { return kernel - 1 - (kernel - 1) / 2; }

std::vector<double> numbers(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

class Builder {
 public:
  Builder(sdk::GraphBuilder& g, uint64_t seed) : g_(g), seed_(seed) {}

  // conv + leaky ReLU + max-pool on x [B, D, H, W, C]; with `grid`, x is a block and its halos come
  // from the neighbours (the conv then pads nothing).
  int32_t conv_block(int32_t x, int index, int kernel, int filters, const std::vector<int64_t>* grid) {
    const MLPH_Value in = g_.value_info(x);
    const int64_t batch = in.shape[0], channels = in.shape[4];
    const std::vector<int64_t> edges(in.shape + 1, in.shape + 4);
    const std::string name = "conv" + std::to_string(index);
    const double receptive = static_cast<double>(kernel) * kernel * kernel;
    const int32_t w = weight(name + ".kernel", {kernel, kernel, kernel, channels, filters},
                             receptive * static_cast<double>(channels), receptive * filters, 0.0);
    const int32_t b = bias(name + ".bias", filters);
    const double before = static_cast<double>(pad_before(kernel)), after = static_cast<double>(pad_after(kernel));
    std::vector<double> padding{before, before, before, after, after, after};
    if (grid) {
      const int64_t grown = pad_before(kernel) + pad_after(kernel);
      const int32_t halo = g_.value(name + ".halo", MLPH_DTYPE_F32,
                                    {batch, edges[0] + grown, edges[1] + grown, edges[2] + grown, channels});
      g_.node("halo_exchange", name + ".halo", {x}, {halo}, {{"grid", numbers(*grid)}, {"halo", padding}});
      x = halo;
      padding.assign(6, 0.0);
    }
    int32_t y = g_.value(name, MLPH_DTYPE_F32, {batch, edges[0], edges[1], edges[2], filters});
    g_.node("conv", name, {x, w, b}, {y}, {{"stride", {1, 1, 1}}, {"dilation", {1, 1, 1}}, {"padding", padding}});
    y = unary("leaky_relu", name + ".act", y, {{"alpha", 0.3}});
    const int32_t pooled =
        g_.value(name + ".pool", MLPH_DTYPE_F32, {batch, edges[0] / 2, edges[1] / 2, edges[2] / 2, filters});
    g_.node("max_pool", name + ".pool", {y}, {pooled}, {{"kernel", {2, 2, 2}}, {"stride", {2, 2, 2}}});
    return pooled;
  }

  // The blocks of every rank of the sample put together: [B, D*gd, H*gh, W*gw, C] on each.
  int32_t gather(int32_t x, const std::vector<int64_t>& grid) {
    const MLPH_Value in = g_.value_info(x);
    const int32_t y = g_.value("gather", MLPH_DTYPE_F32,
                               {in.shape[0], in.shape[1] * grid[0], in.shape[2] * grid[1], in.shape[3] * grid[2], in.shape[4]});
    g_.node("spatial_gather", "gather", {x}, {y}, {{"grid", numbers(grid)}});
    return y;
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

int spatial_blocks(const ModelSettings& m) {
  if (sdk::spatial::ranks(m.grid) == 1) return 0;
  const int64_t halo = std::max(pad_before(m.kernel_size), pad_after(m.kernel_size));
  static const char* const dims[] = {"D", "H", "W"};
  for (int block = 0; block < m.n_conv_layers; ++block) {
    const int64_t edge = m.edge >> block;  // the whole activation's edge at the block's input
    for (size_t d = 0; d < 3; ++d) {
      const int64_t ranks = m.grid[d], local = edge / ranks;
      if (ranks == 1 || (edge % ranks == 0 && local % 2 == 0 && local >= halo)) continue;
      if (block > 0) return block;
      sdk::fail(MLPH_INVALID_ARGUMENT,
                "'parallel.spatial' = " + sdk::spatial::grid_text(m.grid) + ": data.edge " + std::to_string(m.edge) +
                    " does not split along " + dims[d] + " into " + std::to_string(ranks) +
                    " blocks of an even size of at least " + std::to_string(std::max<int64_t>(halo, 2)) +
                    " (every block is max-pooled by 2 and holds a halo of " + std::to_string(halo) + ")");
    }
  }
  return m.n_conv_layers;
}

void build_model(sdk::GraphBuilder& g, const ModelSettings& m, double momentum, uint32_t batch, uint64_t seed) {
  const int64_t b = batch, e = m.edge;
  const int split = spatial_blocks(m);
  const std::vector<int64_t> block = split ? std::vector<int64_t>{e / m.grid[0], e / m.grid[1], e / m.grid[2]}
                                           : std::vector<int64_t>{e, e, e};
  const int32_t x = g.value("x", MLPH_DTYPE_I16, {b, block[0], block[1], block[2], 4});
  const int32_t y = g.value("y", MLPH_DTYPE_F32, {b, 4});
  Builder net(g, seed);
  int32_t h = g.value("log1p", MLPH_DTYPE_F32, {b, block[0], block[1], block[2], 4});
  g.node("log1p", "log1p", {x}, {h});
  for (int i = 0; i < m.n_conv_layers; ++i) {
    if (split && i == split) h = net.gather(h, m.grid);
    h = net.conv_block(h, i + 1, m.kernel_size, m.conv_size << i, i < split ? &m.grid : nullptr);
  }
  if (split == m.n_conv_layers) h = net.gather(h, m.grid);

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
