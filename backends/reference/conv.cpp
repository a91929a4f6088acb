// Convolution, forward and backward, channels-last with [K..., Ci/groups, Co] weights.
//
// All three passes run over an explicitly zero-padded source, so the inner loops carry no bounds checks:
//  - forward:          y[o]  = b + sum_k xp[o*s + k*d] · w[k]        (xp: x zero-padded)
//  - backward data:    dx[i] += sum_k u[i + k*d] · wflip[k]          (a stride-1 forward conv; see below)
//  - backward weights: dw[k] += sum_o xp[o*s + k*d] ⊗ dy[o]          (outer products)
// The kernels keep a small tile of results in registers and run the innermost loop contiguously over
// output channels, which the compiler vectorises; the weights are first repacked so that each tile
// streams them sequentially.
#include <algorithm>
#include <array>
#include <vector>

#include "ops.hpp"

namespace mlph::reference {
namespace {

// A convolution over a source that is already padded: every tap of every output reads inside it.
struct DirectConv {
  int64_t batch = 1;
  int64_t src[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t in_channels = 1, out_channels = 1, groups = 1;

  int64_t taps() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t rows() const { return batch * out[0] * out[1]; }  // output rows (n, d, h): the unit of parallel work
  int64_t in_per_group() const { return in_channels / groups; }
  int64_t out_per_group() const { return out_channels / groups; }
  // Floats between the source positions of two neighbouring outputs in a row.
  int64_t src_step() const { return stride[2] * in_channels; }
  // Offset of the source position read by tap 0 of output row `row`'s first output.
  int64_t src_row_offset(int64_t row) const {
    const int64_t n = row / (out[0] * out[1]), od = row / out[1] % out[0], oh = row % out[1];
    return ((n * src[0] + od * stride[0]) * src[1] + oh * stride[1]) * src[2] * in_channels;
  }
  int64_t out_row_offset(int64_t row) const { return row * out[2] * out_channels; }
  int64_t positions() const { return rows() * out[2]; }
  // Offset of the source position read by tap 0 of output position `pos` (counting [N, out...]).
  int64_t src_offset(int64_t pos) const { return src_row_offset(pos / out[2]) + pos % out[2] * src_step(); }
  // Offset of each kernel tap (row-major) relative to tap 0.
  std::vector<int64_t> tap_offsets() const {
    std::vector<int64_t> offsets;
    for (int64_t kd = 0; kd < kernel[0]; ++kd)
      for (int64_t kh = 0; kh < kernel[1]; ++kh)
        for (int64_t kw = 0; kw < kernel[2]; ++kw)
          offsets.push_back(((kd * dilation[0] * src[1] + kh * dilation[1]) * src[2] + kw * dilation[2]) * in_channels);
    return offsets;
  }
};

// Sets `dst` to zeros of [N, dst_dims..., C] and copies src [N, dims..., C] into it, element i going
// to offset + i*spread along every spatial dim; elements landing outside are dropped. Zero padding is
// spread 1; the backward pass of a strided conv spreads by the stride.
void spread_into(ThreadPool& pool, const float* src, int64_t batch, const int64_t (&dims)[3], int64_t channels,
                 const int64_t (&dst_dims)[3], const int64_t (&offset)[3], const int64_t (&spread)[3],
                 std::vector<float>& dst) {
  const int64_t size = batch * dst_dims[0] * dst_dims[1] * dst_dims[2] * channels;
  if (dst.size() < static_cast<size_t>(size)) dst.resize(static_cast<size_t>(size));
  pool.parallel_for(size, 1 << 16,
                    [&](int64_t begin, int64_t end) { std::fill(dst.data() + begin, dst.data() + end, 0.0f); });
  pool.parallel_for(batch * dims[0] * dims[1], [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t n = row / (dims[0] * dims[1]), i0 = row / dims[1] % dims[0], i1 = row % dims[1];
      const int64_t j0 = offset[0] + i0 * spread[0], j1 = offset[1] + i1 * spread[1];
      if (j0 < 0 || j0 >= dst_dims[0] || j1 < 0 || j1 >= dst_dims[1]) continue;
      for (int64_t i2 = 0; i2 < dims[2]; ++i2) {
        const int64_t j2 = offset[2] + i2 * spread[2];
        if (j2 < 0 || j2 >= dst_dims[2]) continue;
        const float* from = src + (row * dims[2] + i2) * channels;
        float* to = dst.data() + (((n * dst_dims[0] + j0) * dst_dims[1] + j1) * dst_dims[2] + j2) * channels;
        std::copy(from, from + channels, to);
      }
    }
  });
}

bool has_padding(const Window& g) {
  for (int d = 0; d < 3; ++d)
    if (g.pad_before[d] != 0 || g.pad_after[d] != 0) return true;
  return false;
}

// The forward problem over x padded to in + pad_before + pad_after.
DirectConv forward_problem(const Window& g) {
  DirectConv c;
  c.batch = g.batch;
  for (int d = 0; d < 3; ++d) {
    c.src[d] = g.in[d] + g.pad_before[d] + g.pad_after[d];
    c.out[d] = g.out[d];
    c.kernel[d] = g.kernel[d], c.stride[d] = g.stride[d], c.dilation[d] = g.dilation[d];
  }
  c.in_channels = g.in_channels, c.out_channels = g.out_channels, c.groups = g.groups;
  return c;
}

// The source of the forward problem: x itself, or x zero-padded into `scratch`.
const float* padded_input(ThreadPool& pool, const Window& g, const float* x, std::vector<float>& scratch) {
  if (!has_padding(g)) return x;
  const DirectConv c = forward_problem(g);
  const int64_t one[3] = {1, 1, 1};
  spread_into(pool, x, g.batch, g.in, g.in_channels, c.src, g.pad_before, one, scratch);
  return scratch.data();
}

// ---- the register tiles ----------------------------------------------------------------------------

// What a forward tile needs besides its pointers.
struct ConvTile {
  const int64_t* tap_offsets;
  int64_t taps;
  int64_t in_channels;   // of the group
  int64_t w_tap_stride;  // floats between taps in w
  int64_t w_row_stride;  // floats between input channels in w (= all output channels)
  int64_t y_step;        // floats between neighbouring outputs in y
  bool accumulate;       // y += instead of y = bias +
};

// PW outputs × CB output channels, accumulated over every tap and input channel. The outputs are
// consecutive in y; src[p] is where output p's tap 0 reads (they need not be evenly spaced, so a tile
// may span rows: small layers of 2 or 4 outputs per row still fill it).
template <int PW, int CB>
void conv_tile(const ConvTile& t, const float* const* src, const float* w, const float* bias, float* y) {
  float acc[PW][CB];
  for (int p = 0; p < PW; ++p)
    for (int c = 0; c < CB; ++c) acc[p][c] = t.accumulate ? y[p * t.y_step + c] : bias ? bias[c] : 0.0f;
  for (int64_t tap = 0; tap < t.taps; ++tap) {
    const int64_t offset = t.tap_offsets[tap];
    const float* wt = w + tap * t.w_tap_stride;
    for (int64_t ci = 0; ci < t.in_channels; ++ci) {
      const float* wr = wt + ci * t.w_row_stride;
      for (int p = 0; p < PW; ++p) {
        const float xv = src[p][offset + ci];
        for (int c = 0; c < CB; ++c) acc[p][c] += xv * wr[c];
      }
    }
  }
  for (int p = 0; p < PW; ++p)
    for (int c = 0; c < CB; ++c) y[p * t.y_step + c] = acc[p][c];
}

// Tile sizes, measured on Zen (GCC 12, -O3 -march=native): 8 outputs (or 8 input channels for the
// weight gradient) × 32 output channels of accumulators suit the 32 vector registers of AVX-512
// machines; with 16 registers (AVX2) half as many rows avoid spilling.
#if defined(__AVX512F__)
constexpr int kTileRows = 8;
#else
constexpr int kTileRows = 4;
#endif
constexpr int kTileOutputs = kTileRows;  // outputs per forward tile
constexpr int kTileChannels = 32;        // output channels per tile

// `count` (<= kTileOutputs) outputs for `CB` output channels starting at w/bias/y's first.
template <int CB>
void conv_outputs(const ConvTile& t, int64_t count, const float* const* src, const float* w, const float* bias,
                  float* y) {
  if (count == kTileOutputs) return conv_tile<kTileOutputs, CB>(t, src, w, bias, y);
  for (int64_t p = 0; p < count; ++p) conv_tile<1, CB>(t, src + p, w, bias, y + p * t.y_step);
}

// Output channels of one group in blocks of 32, then 8, 4 (backward data of a layer with few input
// channels) and singles.
void conv_channels(const ConvTile& t, int64_t count, int64_t channels, const float* const* src, const float* w,
                   const float* bias, float* y) {
  auto at = [&](int64_t c) { return bias ? bias + c : nullptr; };
  int64_t c = 0;
  for (; c + kTileChannels <= channels; c += kTileChannels)
    conv_outputs<kTileChannels>(t, count, src, w + c, at(c), y + c);
  for (; c + 8 <= channels; c += 8) conv_outputs<8>(t, count, src, w + c, at(c), y + c);
  for (; c + 4 <= channels; c += 4) conv_outputs<4>(t, count, src, w + c, at(c), y + c);
  for (; c < channels; ++c) conv_outputs<1>(t, count, src, w + c, at(c), y + c);
}

// Weights repacked so that each block of up to kTileChannels output channels of a group is contiguous,
// [group][block][tap][in channel][block width]: a tile then streams its weights sequentially instead of
// reading 32 floats every Co floats, which for wide layers (Co = 512: 2 KiB apart) thrashes the TLB.
// `weight(tap, i, grp, j)` gives the weight from input channel i to output channel j of group grp.
template <class Weight>
void pack_weights(ThreadPool& pool, const DirectConv& c, const Weight& weight, std::vector<float>& packed) {
  const int64_t taps = c.taps(), ci_g = c.in_per_group(), co_g = c.out_per_group();
  const int64_t blocks = (co_g + kTileChannels - 1) / kTileChannels;
  packed.resize(static_cast<size_t>(taps * ci_g * c.out_channels));
  pool.parallel_for(c.groups * blocks, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t grp = b / blocks, first = b % blocks * kTileChannels;
      const int64_t width = std::min<int64_t>(kTileChannels, co_g - first);
      float* block = packed.data() + (grp * co_g + first) * taps * ci_g;
      for (int64_t tap = 0; tap < taps; ++tap)
        for (int64_t i = 0; i < ci_g; ++i, block += width)
          for (int64_t j = 0; j < width; ++j) block[j] = weight(tap, i, grp, first + j);
    }
  });
}

// y (=|+=) conv(src, w) [+ bias] over the padded problem `c`. Work items are (tile of outputs, block of
// 32 output channels), so that layers with few positions (a 2^3 input) still occupy every thread.
void direct_conv(ThreadPool& pool, const DirectConv& c, const float* src, const float* packed_w, const float* bias,
                 float* y, bool accumulate) {
  const std::vector<int64_t> taps = c.tap_offsets();
  const int64_t ci_g = c.in_per_group(), co_g = c.out_per_group(), positions = c.positions();
  const int64_t tiles = (positions + kTileOutputs - 1) / kTileOutputs;
  const int64_t blocks = (co_g + kTileChannels - 1) / kTileChannels;
  pool.parallel_for(tiles * blocks, [&](int64_t begin, int64_t end) {
    const float* sources[kTileOutputs];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t first = item / blocks * kTileOutputs, count = std::min<int64_t>(kTileOutputs, positions - first);
      const int64_t channel = item % blocks * kTileChannels, width = std::min<int64_t>(kTileChannels, co_g - channel);
      const ConvTile tile{taps.data(), c.taps(), ci_g, ci_g * width, width, c.out_channels, accumulate};
      for (int64_t grp = 0; grp < c.groups; ++grp) {
        for (int64_t p = 0; p < count; ++p) sources[p] = src + c.src_offset(first + p) + grp * ci_g;
        const int64_t co = grp * co_g + channel;
        conv_channels(tile, count, width, sources, packed_w + co * c.taps() * ci_g, bias ? bias + co : nullptr,
                      y + first * c.out_channels + co);
      }
    }
  });
}

// ---- weight gradient tiles -----------------------------------------------------------------------

// Rows of (source, dy) positions that one weight tile sums over; pointers are at the row's first output.
struct RowSet {
  const float* const* src;
  const float* const* dy;
  int64_t rows;
  int64_t outputs;   // per row
  int64_t src_step;  // floats between neighbouring outputs in the source
  int64_t dy_step;   // floats between neighbouring outputs in dy
};

// dw[CI rows][CB columns] += sum over the row set of src[ci] * dy[co], summed in registers from zero:
// blocked summation, so a layer with millions of positions does not pile them all onto one running sum.
template <int CI, int CB>
void weight_tile(const RowSet& r, int64_t src_channel, int64_t dy_channel, float* dw, int64_t dw_row_stride) {
  float acc[CI][CB] = {};
  for (int64_t row = 0; row < r.rows; ++row) {
    const float* s = r.src[row] + src_channel;
    const float* d = r.dy[row] + dy_channel;
    for (int64_t o = 0; o < r.outputs; ++o, s += r.src_step, d += r.dy_step)
      for (int i = 0; i < CI; ++i) {
        const float xv = s[i];
        for (int c = 0; c < CB; ++c) acc[i][c] += xv * d[c];
      }
  }
  for (int i = 0; i < CI; ++i)
    for (int c = 0; c < CB; ++c) dw[i * dw_row_stride + c] += acc[i][c];
}

constexpr int kWeightTileInputs = kTileRows;  // input channels per weight tile

template <int CB>
void weight_column_block(const RowSet& r, int64_t in_channels, int64_t src_channel, int64_t dy_channel, float* dw,
                         int64_t dw_row_stride) {
  int64_t i = 0;
  for (; i + kWeightTileInputs <= in_channels; i += kWeightTileInputs)
    weight_tile<kWeightTileInputs, CB>(r, src_channel + i, dy_channel, dw + i * dw_row_stride, dw_row_stride);
  for (; i + 4 <= in_channels; i += 4)  // CosmoFlow's first layer has 4 input channels
    weight_tile<4, CB>(r, src_channel + i, dy_channel, dw + i * dw_row_stride, dw_row_stride);
  for (; i < in_channels; ++i)
    weight_tile<1, CB>(r, src_channel + i, dy_channel, dw + i * dw_row_stride, dw_row_stride);
}

// One tap and one group: dw[ci_g, co_g] += over the row set.
void weight_block(const RowSet& r, int64_t in_channels, int64_t out_channels, int64_t src_channel, int64_t dy_channel,
                  float* dw, int64_t dw_row_stride) {
  int64_t c = 0;
  for (; c + kTileChannels <= out_channels; c += kTileChannels)
    weight_column_block<kTileChannels>(r, in_channels, src_channel, dy_channel + c, dw + c, dw_row_stride);
  for (; c + 8 <= out_channels; c += 8)
    weight_column_block<8>(r, in_channels, src_channel, dy_channel + c, dw + c, dw_row_stride);
  for (; c < out_channels; ++c)
    weight_column_block<1>(r, in_channels, src_channel, dy_channel + c, dw + c, dw_row_stride);
}

// dw += and db += over output rows [row_begin, row_end) and kernel taps [tap_begin, tap_end), a chunk
// of rows at a time so that the chunk's source and dy stay in cache while every tap visits them.
void weight_gradient(const DirectConv& c, const float* src, const float* dy, int64_t row_begin, int64_t row_end,
                     int64_t tap_begin, int64_t tap_end, float* dw, float* db) {
  const int64_t outputs = c.out[2];
  const std::vector<int64_t> taps = c.tap_offsets();
  const int64_t ci_g = c.in_per_group(), co_g = c.out_per_group(), co = c.out_channels;
  const int64_t chunk = std::max<int64_t>(1, 256 / outputs);  // ~256 outputs
  std::vector<const float*> src_rows(static_cast<size_t>(chunk)), dy_rows(static_cast<size_t>(chunk));
  std::vector<float> chunk_db(static_cast<size_t>(co));  // blocked summation of the bias gradient too
  for (int64_t first = row_begin; first < row_end; first += chunk) {
    const int64_t rows = std::min(chunk, row_end - first);
    for (int64_t r = 0; r < rows; ++r) dy_rows[r] = dy + c.out_row_offset(first + r);
    for (int64_t tap = tap_begin; dw && tap < tap_end; ++tap) {
      for (int64_t r = 0; r < rows; ++r) src_rows[r] = src + c.src_row_offset(first + r) + taps[tap];
      const RowSet set{src_rows.data(), dy_rows.data(), rows, outputs, c.src_step(), co};
      for (int64_t grp = 0; grp < c.groups; ++grp)
        weight_block(set, ci_g, co_g, grp * ci_g, grp * co_g, dw + tap * ci_g * co + grp * co_g, co);
    }
    if (!db) continue;
    std::fill(chunk_db.begin(), chunk_db.end(), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < outputs; ++o)
        for (int64_t k = 0; k < co; ++k) chunk_db[k] += dy_rows[r][o * co + k];
    for (int64_t k = 0; k < co; ++k) db[k] += chunk_db[k];
  }
}

// ---- depthwise: groups == in channels == out channels (DeepCAM's separable convs) ------------------------
// One input and one output channel per group leaves the tiles above nothing to vectorise over, so these loops
// run innermost over the channels instead: w is [taps][C], contiguous in C like x and y.

bool is_depthwise(const Window& g) { return g.groups > 1 && g.groups == g.in_channels && g.groups == g.out_channels; }

// y (=|+=) depthwise conv of src with w [taps][C] [+ bias]: parallel over output rows, which write disjoint y.
void depthwise_conv(ThreadPool& pool, const DirectConv& c, const float* src, const float* w, const float* bias,
                    float* y, bool accumulate) {
  const std::vector<int64_t> taps = c.tap_offsets();
  const int64_t channels = c.out_channels, outputs = c.out[2];
  pool.parallel_for(c.rows(), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* s_row = src + c.src_row_offset(row);
      float* y_row = y + c.out_row_offset(row);
      for (int64_t o = 0; o < outputs; ++o) {
        const float* s = s_row + o * c.src_step();
        float* out = y_row + o * channels;
        if (!accumulate)
          for (int64_t ch = 0; ch < channels; ++ch) out[ch] = bias ? bias[ch] : 0.0f;
        for (size_t tap = 0; tap < taps.size(); ++tap) {
          const float* st = s + taps[tap];
          const float* wt = w + static_cast<int64_t>(tap) * channels;
          for (int64_t ch = 0; ch < channels; ++ch) out[ch] += st[ch] * wt[ch];
        }
      }
    }
  });
}

// dw [taps][C] += and db += : threads take disjoint output rows into private sums (each row summed on its own
// first: blocked summation), reduced in part order at the end.
void depthwise_weight_gradient(ThreadPool& pool, Scratch& scratch, const DirectConv& c, const float* src,
                               const float* dy, float* dw, float* db) {
  const std::vector<int64_t> taps = c.tap_offsets();
  const int64_t channels = c.out_channels, outputs = c.out[2], ntaps = c.taps(), rows = c.rows();
  const int64_t slice = (ntaps + 1) * channels, parts = std::min<int64_t>(pool.size(), rows);
  std::vector<float>& partial = scratch.partial;
  partial.assign(static_cast<size_t>(parts * slice), 0.0f);
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    std::vector<float> row_sum(static_cast<size_t>(slice));
    for (int64_t part = begin; part < end; ++part) {
      float* mine = partial.data() + part * slice;
      for (int64_t row = rows * part / parts; row < rows * (part + 1) / parts; ++row) {
        std::fill(row_sum.begin(), row_sum.end(), 0.0f);
        const float* s_row = src + c.src_row_offset(row);
        const float* d_row = dy + c.out_row_offset(row);
        for (int64_t o = 0; o < outputs; ++o) {
          const float* s = s_row + o * c.src_step();
          const float* d = d_row + o * channels;
          for (int64_t tap = 0; tap < ntaps; ++tap) {
            const float* st = s + taps[static_cast<size_t>(tap)];
            float* acc = row_sum.data() + tap * channels;
            for (int64_t ch = 0; ch < channels; ++ch) acc[ch] += st[ch] * d[ch];
          }
          float* bias_acc = row_sum.data() + ntaps * channels;
          for (int64_t ch = 0; ch < channels; ++ch) bias_acc[ch] += d[ch];
        }
        for (int64_t i = 0; i < slice; ++i) mine[i] += row_sum[static_cast<size_t>(i)];
      }
    }
  });
  pool.parallel_for(slice, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* target = i < ntaps * channels ? (dw ? dw + i : nullptr) : (db ? db + (i - ntaps * channels) : nullptr);
      if (!target) continue;
      for (int64_t part = 0; part < parts; ++part) *target += partial[static_cast<size_t>(part * slice + i)];
    }
  });
}

// The stride-1 problem of the backward data pass (see conv_backward_data): dy spread by the stride into
// scratch.source, read by a conv with the layer's dilation whose output is exactly dx.
DirectConv backward_data_problem(ThreadPool& pool, const Window& g, const float* dy, std::vector<float>& spread_dy) {
  DirectConv c;
  c.batch = g.batch;
  int64_t offset[3], spread[3];
  for (int d = 0; d < 3; ++d) {
    c.src[d] = g.in[d] + g.dilation[d] * (g.kernel[d] - 1);
    c.out[d] = g.in[d];
    c.kernel[d] = g.kernel[d], c.dilation[d] = g.dilation[d];
    offset[d] = g.dilation[d] * (g.kernel[d] - 1) - g.pad_before[d];
    spread[d] = g.stride[d];
  }
  c.in_channels = g.out_channels, c.out_channels = g.in_channels, c.groups = g.groups;
  spread_into(pool, dy, g.batch, g.out, g.out_channels, c.src, offset, spread, spread_dy);
  return c;
}

// y (=|+=) conv(x, w) [+ b]: the forward pass, shared by conv and the backward data pass of conv_transpose.
void forward_pass(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                  const float* b, float* y, bool accumulate) {
  const DirectConv c = forward_problem(g);
  const float* source = padded_input(pool, g, x, scratch.source);
  if (is_depthwise(g)) return depthwise_conv(pool, c, source, w, b, y, accumulate);
  const int64_t ci_g = c.in_per_group(), co_g = c.out_per_group(), co = c.out_channels;
  pack_weights(
      pool, c,
      [&](int64_t tap, int64_t i, int64_t grp, int64_t j) { return w[(tap * ci_g + i) * co + grp * co_g + j]; },
      scratch.weights);
  direct_conv(pool, c, source, scratch.weights.data(), b, y, accumulate);
}

}  // namespace

void conv_forward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                  const float* b, float* y) {
  forward_pass(pool, scratch, g, x, w, b, y, false);
}

// Backward data as a forward conv: dx[i] = sum_{o, k : o*s + k*d = i + p} dy[o] · w[k]^T. Spread dy by
// the stride into u (zeros between), shifted so that u[j] = dy[o] at j = o*s + d(K-1) - p; then with the
// kernel flipped (k' = K-1-k) and each tap transposed to [Co/g, Ci], dx[i] = sum_k' u[i + k'd] · wflip[k']:
// a stride-1 conv with dilation d over u of size in + d(K-1), producing exactly dx.
void conv_backward_data(ThreadPool& pool, Scratch& scratch, const Window& g, const float* w, const float* dy,
                        float* dx) {
  const DirectConv c = backward_data_problem(pool, g, dy, scratch.source);
  if (is_depthwise(g)) {  // flipped taps, [taps][C] as the forward weights
    const int64_t taps = g.taps(), channels = g.in_channels;
    scratch.weights.resize(static_cast<size_t>(taps * channels));
    for (int64_t tap = 0; tap < taps; ++tap)
      std::copy(w + (taps - 1 - tap) * channels, w + (taps - tap) * channels, scratch.weights.data() + tap * channels);
    return depthwise_conv(pool, c, scratch.source.data(), scratch.weights.data(), nullptr, dx, true);
  }

  // The transposed problem's weight from its input channel i (an output channel of the layer) to its
  // output channel j (an input channel of the layer), tap flipped: reversing a row-major tap index
  // flips every spatial dim.
  const int64_t ci_g = g.in_channels / g.groups, co_g = g.out_channels / g.groups, taps = g.taps();
  pack_weights(
      pool, c,
      [&](int64_t tap, int64_t i, int64_t grp, int64_t j) {
        return w[((taps - 1 - tap) * ci_g + j) * g.out_channels + grp * co_g + i];
      },
      scratch.weights);
  direct_conv(pool, c, scratch.source.data(), scratch.weights.data(), nullptr, dx, true);
}

// Split whichever is larger. Many positions and few weights (CosmoFlow's first layers): threads take
// disjoint output rows into private partial sums, reduced at the end. Few positions and many weights
// (its last layers, or tiny inputs): threads take disjoint kernel taps of dw directly, no partials.
void conv_backward_weights(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* dy,
                           float* dw, float* db) {
  if (!dw && !db) return;
  const float* source = padded_input(pool, g, x, scratch.source);
  const DirectConv c = forward_problem(g);
  if (is_depthwise(g)) return depthwise_weight_gradient(pool, scratch, c, source, dy, dw, db);
  const int64_t w_size = g.taps() * (g.in_channels / g.groups) * g.out_channels, rows = c.rows();
  if (dw && w_size > c.positions() * (g.in_channels + g.out_channels)) {
    pool.parallel_for(g.taps(), [&](int64_t begin, int64_t end) {
      weight_gradient(c, source, dy, 0, rows, begin, end, dw, begin == 0 ? db : nullptr);
    });
    return;
  }
  const int64_t slice = w_size + g.out_channels, parts = std::min<int64_t>(pool.size(), rows);
  std::vector<float>& partial = scratch.partial;
  partial.assign(static_cast<size_t>(parts * slice), 0.0f);
  pool.parallel_for(parts, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      float* mine = partial.data() + part * slice;
      weight_gradient(c, source, dy, rows * part / parts, rows * (part + 1) / parts, 0, c.taps(), dw ? mine : nullptr,
                      db ? mine + w_size : nullptr);
    }
  });
  pool.parallel_for(slice, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* target = i < w_size ? (dw ? dw + i : nullptr) : (db ? db + (i - w_size) : nullptr);
      if (!target) continue;
      for (int64_t part = 0; part < parts; ++part) *target += partial[part * slice + i];
    }
  });
}

// conv_transpose is conv's adjoint. Its forward pass could be conv_backward_data of the conv `g`, but with a
// stride s that runs over the input spread with s-1 zeros between elements (4x the work at stride 2). Instead:
// columns = x · W, every input position times every tap's [Ci, Co] (a 1x1 conv to taps x Co channels, on the
// tiled kernels), then each output position gathers the columns of the (input, tap) pairs that land on it.
// Its backward data pass is the conv forward (strided: no waste), its weight gradient the conv weight gradient
// with the roles of x and dy exchanged.
void conv_transpose_forward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                            const float* b, float* y) {
  const int64_t ci = g.out_channels, co = g.in_channels, taps = g.taps(), positions = g.out_positions();
  // Per spatial dim and output coordinate o: the (tap, input coordinate i) pairs with i*s - p_before + k*d = o.
  std::vector<std::vector<std::array<int64_t, 2>>> lands[3];
  for (int d = 0; d < 3; ++d) {
    lands[d].resize(static_cast<size_t>(g.in[d]));
    for (int64_t k = 0; k < g.kernel[d]; ++k)
      for (int64_t i = 0; i < g.out[d]; ++i) {
        const int64_t o = i * g.stride[d] - g.pad_before[d] + k * g.dilation[d];
        if (o >= 0 && o < g.in[d]) lands[d][static_cast<size_t>(o)].push_back({k, i});
      }
  }
  // A few taps per pass, so that the columns stay bounded (a full-size DeepCAM upsampler would need 1 GiB).
  const int64_t per_pass = std::clamp<int64_t>(scratch.max_columns / std::max<int64_t>(1, positions * co), 1, taps);
  for (int64_t first = 0; first < taps; first += per_pass) {
    const int64_t last = std::min(taps, first + per_pass), used = (last - first) * co;
    // Padded with zero weights to a multiple of 8 columns, so that none runs in the scalar remainder tiles
    // (the last DeepCAM layer has 9 taps x 3 channels).
    const int64_t width = (used + 7) / 8 * 8;
    scratch.tap_weights.resize(static_cast<size_t>(ci * width));
    pool.parallel_for(ci, [&](int64_t begin, int64_t end) {  // w [taps, Co, Ci] -> [Ci, taps x Co]
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < width; ++j)
          scratch.tap_weights[static_cast<size_t>(i * width + j)] = j < used ? w[(first * co + j) * ci + i] : 0.0f;
    });
    Window columns;  // the 1x1 conv over all input positions as one row
    columns.in[2] = columns.out[2] = positions;
    columns.in_channels = ci, columns.out_channels = width;
    scratch.columns.resize(static_cast<size_t>(positions * width));
    conv_forward(pool, scratch, columns, x, scratch.tap_weights.data(), nullptr, scratch.columns.data());

    const float* cols = scratch.columns.data();
    pool.parallel_for(g.batch * g.in[0] * g.in[1], [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / (g.in[0] * g.in[1]), o0 = row / g.in[1] % g.in[0], o1 = row % g.in[1];
        for (int64_t o2 = 0; o2 < g.in[2]; ++o2) {
          float* out = y + (row * g.in[2] + o2) * co;
          if (first == 0)
            for (int64_t c = 0; c < co; ++c) out[c] = b ? b[c] : 0.0f;
          for (const auto& [k0, i0] : lands[0][static_cast<size_t>(o0)])
            for (const auto& [k1, i1] : lands[1][static_cast<size_t>(o1)])
              for (const auto& [k2, i2] : lands[2][static_cast<size_t>(o2)]) {
                const int64_t tap = (k0 * g.kernel[1] + k1) * g.kernel[2] + k2;
                if (tap < first || tap >= last) continue;
                const int64_t source = ((n * g.out[0] + i0) * g.out[1] + i1) * g.out[2] + i2;
                const float* from = cols + source * width + (tap - first) * co;
                for (int64_t c = 0; c < co; ++c) out[c] += from[c];
              }
        }
      }
    });
  }
}

void conv_transpose_backward(ThreadPool& pool, Scratch& scratch, const Window& g, const float* x, const float* w,
                             const float* dy, float* dx, float* dw, float* db) {
  if (dx) forward_pass(pool, scratch, g, dy, w, nullptr, dx, true);
  if (dw) conv_backward_weights(pool, scratch, g, dy, x, dw, nullptr);
  if (!db) return;
  const int64_t channels = g.in_channels, positions = g.in_positions();
  pool.parallel_for(channels, 8, [&](int64_t c0, int64_t c1) {  // disjoint channels: no race
    std::vector<double> sum(static_cast<size_t>(c1 - c0), 0.0);
    for (int64_t pos = 0; pos < positions; ++pos)
      for (int64_t ch = c0; ch < c1; ++ch) sum[static_cast<size_t>(ch - c0)] += dy[pos * channels + ch];
    for (int64_t ch = c0; ch < c1; ++ch) db[ch] += static_cast<float>(sum[static_cast<size_t>(ch - c0)]);
  });
}

}  // namespace mlph::reference
