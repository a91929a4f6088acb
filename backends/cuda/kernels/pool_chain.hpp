// CosmoFlow's bias + leaky ReLU + max-pool as one pass (issue 33 item 5): the SDK's body
// (mlph/sdk/kernels/pool_chain.hpp, shared with onednn-cpu: the unfused reference chain's bits, the
// first maximum winning, a NaN beating any number), launched over channels-last NDHWC with one
// thread per output position and channel: a warp reads 32 consecutive channels of a tap (coalesced),
// no thread shares an element with another (the windows tile: kernel == stride).
//
//   forward:  z (the conv's output, its bias not added) -> y (the pooled activation) and a 1-byte
//             winner per window and channel (the tap, row-major in the window)
//   backward: dz from dy, the winner and the sign of z + bias at the winner (the slope); +0 at every
//             other tap; elements past the last window (an odd size) are zeroed by the launcher
//             first. The conv's bias gradient is then the channel sum of dz, as before.
//
// T stores z and dz (float, or bf16 / fp16 as Bf16 / F16: fp32 arithmetic, each stored value rounded
// once as the unfused half chain rounds it), Y stores y and dy (T by default).
#pragma once

#include <cstdint>

#include "kernel.hpp"
#include "precision.hpp"  // Bf16, F16
#include "mlph/sdk/kernels/pool_chain.hpp"

// store_as<T> is the SDK body's one way to round to T: fp16 rounds as float_to_half (nearest even).
namespace mlph::sdk::kernels {
template <>
MLPH_KERNEL cuda::F16 store_as<cuda::F16>(float v) {
  return cuda::F16{cuda::float_to_half(v)};
}
}  // namespace mlph::sdk::kernels

namespace mlph::cuda {

using sdk::kernels::PoolChainShape;

// From the max-pool's window (sdk::program::Window: kernel == stride, no padding) and the leaky ReLU's
// slope; taken as a template so that this header needs no SDK host header under nvcc.
template <class Window>
PoolChainShape pool_chain_shape(const Window& w, float alpha) {
  PoolChainShape s;
  s.batch = w.batch, s.channels = s.channel_block = w.in_channels, s.alpha = alpha;
  for (int d = 0; d < 3; ++d) s.in[d] = w.in[d], s.out[d] = w.out[d], s.kernel[d] = w.kernel[d];
  return s;
}

// Whether the fused body takes a max-pool's window: windows that tile (kernel == stride), no padding,
// at most 255 taps.
template <class Window>
bool pool_chain_takes(const Window& w) {
  for (int d = 0; d < 3; ++d)
    if (w.kernel[d] != w.stride[d] || w.pad_before[d] != 0 || w.pad_after[d] != 0 || w.dilation[d] != 1) return false;
  return sdk::kernels::pool_chain_supports(pool_chain_shape(w, 1.0f));
}

// The SDK's type for what this backend stores: float as it is, our Bf16 as the SDK's (the same bits).
template <class T>
struct ChainStorage {
  using type = T;
};
template <>
struct ChainStorage<Bf16> {
  using type = sdk::kernels::Bf16;
};
template <class T>
using chain_storage_t = typename ChainStorage<T>::type;
// fp16 is this backend's own 16-bit type (the SDK has none): the SDK's body reads it through
// load_float (found by argument-dependent lookup) and writes it through store_as (specialized above).
MLPH_KERNEL float load_float(F16 v) { return to_float(v); }

// Output position `pos` ([batch, out...] row-major), channel c, as the launcher's 2-D grid calls it (named
// apart from the SDK's pool_chain_*_at, which argument-dependent lookup would also find).
template <class T, class Y = T>
MLPH_KERNEL void chain_pool_forward_at(int64_t pos, int64_t c, const PoolChainShape& s, const T* z, const float* bias,
                                       Y* y, uint8_t* winner) {
  using ZS = chain_storage_t<T>;
  using YS = chain_storage_t<Y>;
  sdk::kernels::pool_chain_forward_at<ZS, YS>(pos, c, s, reinterpret_cast<const ZS*>(z), bias, reinterpret_cast<YS*>(y),
                                              winner);
}

template <class T, class Y = T>
MLPH_KERNEL void chain_pool_backward_at(int64_t pos, int64_t c, const PoolChainShape& s, const T* z, const float* bias,
                                        const Y* dy, const uint8_t* winner, T* dz) {
  using ZS = chain_storage_t<T>;
  using YS = chain_storage_t<Y>;
  sdk::kernels::pool_chain_backward_at<ZS, YS>(pos, c, s, reinterpret_cast<const ZS*>(z), bias,
                                               reinterpret_cast<const YS*>(dy), winner, reinterpret_cast<ZS*>(dz));
}

}  // namespace mlph::cuda
