// Max pooling, alone or as CosmoFlow's conv -> leaky ReLU -> max-pool chain, on the SDK's fused
// body (mlph/sdk/kernels/pool_chain.hpp) in host loops: the conv writes its output (bias added),
// the pool reads it once, applying the activation on the fly, and keeps a byte per window (the
// winner); its backward writes the conv output's gradient directly. The leaky ReLU's full-size
// output and gradient never exist, and oneDNN's pooling backward (slow on channels-last) and the
// separate eltwise backward are gone.
#include <cstring>
#include <type_traits>

#include "mlph/sdk/kernels/pool_chain.hpp"
#include "mlph/sdk/util/error.hpp"
#include "ops.hpp"

namespace mlph::onednn {
namespace {

namespace kn = sdk::kernels;
using dt = memory::data_type;

// The layouts the body walks, by channel block: channels-last (the whole C) or nC...16c / 8c.
struct BlockedTag {
  Tag tag;
  int64_t block;  // 0: all the channels
};
std::vector<BlockedTag> blocked_tags(size_t rank) {
  if (rank == 5) return {{Tag::ndhwc, 0}, {Tag::nCdhw16c, 16}, {Tag::nCdhw8c, 8}};
  return {{Tag::nhwc, 0}, {Tag::nChw16c, 16}, {Tag::nChw8c, 8}};
}

// z's channel block in its oneDNN layout (fp32 or bf16), 0 when the body cannot walk it.
int64_t channel_block(const memory::desc& desc) {
  const Dims dims = desc.dims();
  const auto type = static_cast<dt>(desc.data.data_type);
  if ((dims.size() != 4 && dims.size() != 5) || (type != dt::f32 && type != dt::bf16)) return 0;
  for (const BlockedTag& b : blocked_tags(dims.size()))
    if (memory::desc(dims, type, b.tag) == desc) return b.block ? b.block : dims[1];
  return 0;
}

// y's desc: z's layout over the pooled dims, in y's stored type.
memory::desc pooled_desc(const kn::PoolChainShape& s, size_t rank, dt type) {
  Dims dims{s.batch, s.channels};
  for (size_t d = 5 - rank; d < 3; ++d) dims.push_back(s.out[d]);
  for (const BlockedTag& b : blocked_tags(rank))
    if ((b.block ? b.block : s.channels) == s.channel_block) return {dims, type, b.tag};
  return {};
}

// The body's shape for max_pool node `pool` over z (its input, or the conv output before the
// activation), or nothing when the body does not take it.
std::optional<kn::PoolChainShape> chain_shape(Net& net, const NodeView& pool, int32_t z, float alpha) {
  const sdk::Window& w = pool.node->window;
  const Value& zv = net.at(z);
  const size_t rank = w.in.size();
  if (rank < 2 || rank > 3 || !zv.mem) return std::nullopt;
  kn::PoolChainShape s;
  s.batch = zv.shape.front(), s.channels = zv.shape.back(), s.alpha = alpha;
  s.channel_block = channel_block(zv.mem.get_desc());
  for (size_t d = 0; d < rank; ++d) {
    if (w.stride[d] != w.kernel[d]) return std::nullopt;  // overlapping or gapped windows: oneDNN's pooling
    s.in[3 - rank + d] = w.in[d], s.out[3 - rank + d] = w.out[d], s.kernel[3 - rank + d] = w.kernel[d];
  }
  if (s.channel_block == 0 || !kn::pool_chain_supports(s)) return std::nullopt;
  return s;
}

class PoolChain final : public Op {
 public:
  PoolChain(Net& net, const NodeView& n, int32_t z, const kn::PoolChainShape& s)
      : Op(n), net_(net), s_(s), x_(n.in(0)), z_(z) {
    const int32_t y = n.out();
    net.define(y, pooled_desc(s, net.at(z).shape.size(), net.stored_type(y)));
    winner_.resize(size_t(net.at(y).numel()));
    z_bf16_ = type_of(net.at(z).mem.get_desc()) == dt::bf16;
    y_bf16_ = type_of(net.at(y).mem.get_desc()) == dt::bf16;
    if (y_bf16_ && !z_bf16_) sdk::fail(MLPH_INTERNAL, "onednn-cpu backend: " + n.where() + ": bf16 pooled over fp32");
    if (net.needs_grad(y) && net.needs_grad(x_)) dz_ = GradSink(net, z, net.at(z).mem.get_desc());
  }

  void forward(const RunArgs&) override {
    with_types([&](auto z_type, auto y_type, auto lanes) {
      using Z = decltype(z_type);
      using Y = decltype(y_type);
      constexpr int kLanes = decltype(lanes)::value;
      const auto* z = static_cast<const Z*>(net_.at(z_).mem.get_data_handle());
      auto* y = static_cast<Y*>(net_.at(output()).mem.get_data_handle());
      each_window(kLanes, [&](int64_t zo, int64_t yo) {
        kn::pool_chain_forward_window<kLanes, Z, Y>(s_, z + zo, nullptr, y + yo, &winner_[size_t(yo)]);
      });
    });
  }

  void backward() override {
    if (!dz_) return;
    const memory target = dz_.target();
    if (!kn::pool_chain_covers(s_)) std::memset(target.get_data_handle(), 0, target.get_desc().get_size());
    with_types([&](auto z_type, auto y_type, auto lanes) {
      using Z = decltype(z_type);
      using Y = decltype(y_type);
      constexpr int kLanes = decltype(lanes)::value;
      auto* dz = static_cast<Z*>(target.get_data_handle());
      const auto* z = static_cast<const Z*>(net_.at(z_).mem.get_data_handle());
      const auto* dy = static_cast<const Y*>(net_.at(output()).grad.get_data_handle());
      each_window(kLanes, [&](int64_t zo, int64_t yo) {
        kn::pool_chain_backward_window<kLanes, Z, Y>(s_, z + zo, nullptr, dy + yo, &winner_[size_t(yo)], dz + zo);
      });
    });
    dz_.commit();
    net_.at(x_).grad_written = true;  // the activation's gradient is z's (they share memory)
  }

 private:
  // f(Z, Y, integral_constant lanes): as many channels per call of the body as the block allows,
  // up to one AVX-512 vector of floats, so that the compiler vectorizes the body over them.
  template <class Z, class Y, class F>
  void with_lanes(const F& f) const {
    if (s_.channel_block % 16 == 0) return f(Z{}, Y{}, std::integral_constant<int, 16>{});
    if (s_.channel_block % 8 == 0) return f(Z{}, Y{}, std::integral_constant<int, 8>{});
    f(Z{}, Y{}, std::integral_constant<int, 1>{});
  }
  // f(a Z, a Y, lanes) with Z and Y the stored types of z and y (Net::bf16_storage): float or bf16.
  // z is bf16 wherever y is (the conv output feeds the pool only), so three of the four pairings.
  template <class F>
  void with_types(const F& f) const {
    if (z_bf16_ && y_bf16_) return with_lanes<kn::Bf16, kn::Bf16>(f);
    if (z_bf16_) return with_lanes<kn::Bf16, float>(f);
    with_lanes<float, float>(f);
  }

  // f(z offset, y offset) for every window and group of `lanes` channels, split over the threads
  // by rows of windows (offsets found once per row: divisions cost more than a window's maxima).
  // Channel blocks outermost: in a blocked layout each is a slab of its own, walked in order.
  template <class F>
  void each_window(int64_t lanes, const F& f) const {
    const int64_t z_blocks = kn::pool_chain_block_stride(s_, s_.in), y_blocks = kn::pool_chain_block_stride(s_, s_.out);
    const int64_t width = s_.out[2], rows = s_.out_positions() / width, block = s_.channel_block;
    const int64_t z_step = s_.kernel[2] * block;
    const int64_t total = s_.channels / block * rows;
    // Rows are few (parallel_for would run them on one thread), each a lot of work.
#pragma omp parallel for schedule(static) if (total > 1 && s_.out_positions() * s_.channels > (1 << 14))
    for (int64_t i = 0; i < total; ++i) {
      const kn::PoolChainWindow row = kn::pool_chain_window(s_, i % rows * width, 0);
      const int64_t z0 = row.z + i / rows * z_blocks, y0 = row.y + i / rows * y_blocks;
      for (int64_t w = 0; w < width; ++w)
        for (int64_t c = 0; c < block; c += lanes) f(z0 + w * z_step + c, y0 + w * block + c);
    }
  }

  Net& net_;
  kn::PoolChainShape s_;
  int32_t x_, z_;  // the pool's input, and what the body reads (the conv output when chained)
  std::vector<uint8_t> winner_;
  bool z_bf16_ = false, y_bf16_ = false;
  GradSink dz_;
};

// The activation a pool chain applies: nothing to run; its output is an alias of the conv output
// (read only by the pool, which knows it is pre-activation), its gradient the conv output's.
class ChainedActivation final : public Op {
 public:
  ChainedActivation(Net& net, const NodeView& n, int32_t z) : Op(n) {
    net.at(n.out()).grad = net.at(z).grad;
    net.define(n.out(), net.at(z).mem.get_desc(), net.at(z).mem);
  }
  void forward(const RunArgs&) override {}
};

}  // namespace

bool pool_chain_takes(Net& net, const NodeView& pool, int32_t z, float alpha) {
  return chain_shape(net, pool, z, alpha).has_value();
}

std::unique_ptr<Op> make_chained_activation(Net& net, const NodeView& n, int32_t conv_output) {
  return std::make_unique<ChainedActivation>(net, n, conv_output);
}

std::unique_ptr<Op> make_pool_chain(Net& net, const NodeView& pool, int32_t z, float alpha) {
  const std::optional<kn::PoolChainShape> s = chain_shape(net, pool, z, alpha);
  return s ? std::make_unique<PoolChain>(net, pool, z, *s) : nullptr;
}

}  // namespace mlph::onednn
