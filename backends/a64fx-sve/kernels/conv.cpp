// Convolutions, channels-last, as sums of small GEMMs run by the register-blocked tile (tile.hpp).
//
// Forward: a tile is P consecutive output positions of one output row x V vectors of output
// channels; its reduction runs over the window's taps and the group's input channels, one segment
// per (tap, channel block). Backward data gathers: the input positions of one row with the same
// residue modulo the stride (iw = r + s*j) see the same taps, so each residue class is a
// convolution of dy with the transposed weights. Backward weights: a tile is P input channels x V
// vectors of output channels of one tap, its reduction over output positions, one segment per output row.
// Padding: windows that leave the input along the depth or height dims drop those taps; along the
// width (the tile's positions) the input (dy for backward data) is copied with zero margins.
// The reduction is cut into chunks whose B operand (weights) fits half of A64FX's 64 KiB L1 and is
// reused by every tile of a block of rows before the next chunk. The forward and backward-data passes
// sum each output element's terms in the same order whatever the thread count; backward weights does
// too unless it has fewer items than threads (then slices of rows sum apart, fixed by the thread count).
#include <algorithm>
#include <vector>

#include "kernels.hpp"
#include "reduce.hpp"
#include "sve.hpp"
#include "tile.hpp"

namespace mlph::a64fx {
namespace {

constexpr int64_t kL1WeightBytes = 32 << 10;    // the B operand of one reduction chunk
constexpr int64_t kTilesPerWeightChunk = 16;    // tiles that reuse a chunk of weights from L1
constexpr int64_t kReductionBlockBytes = 2 << 20;  // dy rows per backward-weights block (in L2)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Floor division for possibly negative numerators (b > 0).
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// x [rows, width, channels] with `before` and `after` zero columns added along width; x itself when
// there are none.
const float* pad_width(Threads t, std::vector<float>& buffer, const float* x, int64_t rows, int64_t width,
                       int64_t channels, int64_t before, int64_t after) {
  if (before == 0 && after == 0) return x;
  const int64_t padded = width + before + after, row = padded * channels;
  buffer.resize(static_cast<size_t>(rows * row));
  float* out = buffer.data();
  parallel_chunks(t, rows, std::max<int64_t>(1, kMinChunk / row), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t r = begin; r < end; ++r) {
      float* dst = out + r * row;
      std::fill(dst, dst + before * channels, 0.0f);
      std::copy(x + r * width * channels, x + (r + 1) * width * channels, dst + before * channels);
      std::fill(dst + (before + width) * channels, dst + row, 0.0f);
    }
  });
  return out;
}

// A piece of the reduction before it is placed: tap (kd, kh, kw) and `depth` channels from c0. Whether it
// applies, and where its operands lie, depends on the output row.
struct Pattern {
  int64_t kd, kh, kw, c0, depth;
  int64_t tap(const Window& g) const { return (kd * g.kernel[1] + kh) * g.kernel[2] + kw; }
};

// Every tap with its `channels` in blocks of at most `max_depth`, cut into chunks of at most
// `max_depth` reduction steps, in (tap, channel) order.
std::vector<std::vector<Pattern>> chunks_of(const Window& g, int64_t channels, int64_t max_depth) {
  std::vector<std::vector<Pattern>> chunks(1);
  int64_t depth = 0;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
        for (int64_t c0 = 0; c0 < channels; c0 += max_depth) {
          const Pattern p{kd, kh, kw, c0, std::min(max_depth, channels - c0)};
          if (depth + p.depth > max_depth && !chunks.back().empty()) chunks.emplace_back(), depth = 0;
          chunks.back().push_back(p);
          depth += p.depth;
        }
  return chunks;
}

// Appends a segment, merged into the previous one where it continues it in both A and B.
void append(std::vector<Segment>& out, int64_t a, const float* b, int64_t depth, int64_t a_step, int64_t b_step) {
  if (!out.empty()) {
    Segment& last = out.back();
    if (last.a + last.depth * a_step == a && last.b + last.depth * b_step == b) {
      last.depth += depth;
      return;
    }
  }
  out.push_back({a, b, depth});
}

// Reduction steps of one chunk: the B operand of a tile `vectors` wide fits kL1WeightBytes.
int64_t chunk_depth(int vectors) {
  return std::max<int64_t>(1, kL1WeightBytes / (vectors * vector_lanes() * static_cast<int64_t>(sizeof(float))));
}

// Rows of output per work item: enough tiles to reuse each weight chunk, few enough to feed the threads.
int64_t rows_per_item(Threads t, int64_t rows, int64_t tiles_per_row, int64_t other_items) {
  int64_t block = std::max<int64_t>(1, ceil_div(kTilesPerWeightChunk, std::max<int64_t>(tiles_per_row, 1)));
  while (block > 1 && ceil_div(rows, block) * other_items < 2 * thread_count(t)) block = (block + 1) / 2;
  return block;
}

// Slices of the rows for `items` work items: at least two units (slice, item) per thread, and of the
// counts up to twice that, the one that leaves the fewest threads idle in the last round.
int64_t slice_count(int64_t threads, int64_t items, int64_t rows) {
  const int64_t least = ceil_div(2 * threads, items);
  int64_t best = least;
  auto idle = [&](int64_t slices) { return ceil_div(slices * items, threads) * threads - slices * items; };
  for (int64_t slices = least; slices <= 2 * least; ++slices)
    if (idle(slices) * best < idle(best) * slices) best = slices;  // idle share: idle / (slices * items)
  return std::min(best, rows);
}

// The positions of one output row as tiles of at most `rows` positions: f(first, count).
template <class F>
void for_tiles(int64_t positions, int64_t rows, F&& f) {
  for (int64_t first = 0; first < positions; first += rows) f(first, std::min(rows, positions - first));
}

}  // namespace

void conv_forward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w, const float* b,
                  float* y) {
  const int64_t ci = g.in_channels, co = g.out_channels, groups = g.groups, cig = ci / groups, cog = co / groups;
  // A negative padding after (a conv_transpose's output_padding) only means the last windows stop short.
  const int64_t after = std::max<int64_t>(0, g.pad_after[2]), width = g.in[2] + g.pad_before[2] + after;
  const float* xp = pad_width(t, scratch.padded, x, g.batch * g.in[0] * g.in[1], g.in[2], ci, g.pad_before[2], after);
  const int vectors = vectors_for(cog);
  const int64_t tile_cols = vectors * vector_lanes(), col_tiles = ceil_div(cog, tile_cols);
  const int64_t tile_rows = max_rows(vectors), max_depth = chunk_depth(vectors);

  const std::vector<std::vector<Pattern>> chunks = chunks_of(g, cig, max_depth);

  const int64_t out_rows = g.batch * g.out[0] * g.out[1], out_width = g.out[2];
  const int64_t block = rows_per_item(t, out_rows, ceil_div(out_width, tile_rows), groups * col_tiles);
  const int64_t blocks = ceil_div(out_rows, block);
  parallel_items(t, blocks * groups * col_tiles, [&](int64_t item) {
    const int64_t col_tile = item % col_tiles, group = item / col_tiles % groups, first_row = item / (col_tiles * groups) * block;
    const int64_t c0 = group * cog + col_tile * tile_cols, cols = std::min(tile_cols, cog - col_tile * tile_cols);
    std::vector<Segment> segments;
    for (size_t k = 0; k < chunks.size(); ++k) {
      for (int64_t row = first_row; row < std::min(out_rows, first_row + block); ++row) {
        const int64_t oh = row % g.out[1], od = row / g.out[1] % g.out[0], n = row / (g.out[1] * g.out[0]);
        segments.clear();
        for (const Pattern& p : chunks[k]) {
          const int64_t id = od * g.stride[0] - g.pad_before[0] + p.kd * g.dilation[0];
          const int64_t ih = oh * g.stride[1] - g.pad_before[1] + p.kh * g.dilation[1];
          if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) continue;
          append(segments, ((n * g.in[0] + id) * g.in[1] + ih) * width * ci + p.kw * g.dilation[2] * ci + group * cig + p.c0,
                 w + (p.tap(g) * cig + p.c0) * co + c0, p.depth, 1, co);
        }
        if (segments.empty() && k > 0) continue;  // nothing to add to what the first chunk stored
        for_tiles(out_width, tile_rows, [&](int64_t ow, int64_t count) {
          TileArgs a{};
          a.a = xp + ow * g.stride[2] * ci;
          a.a_row = g.stride[2] * ci, a.a_step = 1;
          a.segments = segments.data(), a.n_segments = segments.size();
          a.b_step = co;
          a.c = y + (row * out_width + ow) * co + c0, a.c_row = co;
          a.rows = count, a.cols = cols;
          a.init = k > 0 ? TileInit::accumulate : b ? TileInit::bias : TileInit::zero;
          a.bias = b ? b + c0 : nullptr;
          run_tile(vectors, a);
        });
      }
    }
  });
}

void conv_backward_data(Threads t, Scratch& scratch, const Window& g, const float* w, const float* dy, float* dx) {
  const int64_t ci = g.in_channels, co = g.out_channels, groups = g.groups, cig = ci / groups, cog = co / groups;
  const int64_t taps = g.taps(), stride = g.stride[2];

  // Along the width, input position iw = r + stride*j sees output ow = j + (r + pad - kw*dilation)/stride for
  // the taps kw where that divides: dy is padded so that every j of every class lands inside.
  int64_t low = 0, high = 0;
  for (int64_t r = 0; r < std::min(stride, g.in[2]); ++r) {
    const int64_t count = ceil_div(g.in[2] - r, stride);
    for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
      const int64_t shift = r + g.pad_before[2] - kw * g.dilation[2];
      if (shift - floor_div(shift, stride) * stride != 0) continue;
      const int64_t offset = floor_div(shift, stride);
      low = std::max(low, -offset), high = std::max(high, count - 1 + offset - (g.out[2] - 1));
    }
  }
  const int64_t width = g.out[2] + low + high;
  const float* dyp = pad_width(t, scratch.padded, dy, g.batch * g.out[0] * g.out[1], g.out[2], co, low, high);

  // Weights transposed per group and tap: [group][tap][co][ci], so that a tile's columns are input channels.
  std::vector<float>& packed = scratch.packed;
  packed.resize(static_cast<size_t>(taps * cig * co));
  parallel_items(t, groups * taps, [&](int64_t item) {
    const int64_t group = item / taps, tap = item % taps;
    float* out = packed.data() + item * cog * cig;
    for (int64_t o = 0; o < cog; ++o)
      for (int64_t i = 0; i < cig; ++i) out[o * cig + i] = w[(tap * cig + i) * co + group * cog + o];
  });

  const int vectors = vectors_for(cig);
  const int64_t tile_cols = vectors * vector_lanes(), col_tiles = ceil_div(cig, tile_cols);
  const int64_t tile_rows = max_rows(vectors), max_depth = chunk_depth(vectors);
  const std::vector<std::vector<Pattern>> chunks = chunks_of(g, cog, max_depth);

  const int64_t in_rows = g.batch * g.in[0] * g.in[1];
  const int64_t block = rows_per_item(t, in_rows, ceil_div(g.in[2], tile_rows), groups * col_tiles);
  const int64_t blocks = ceil_div(in_rows, block);
  parallel_items(t, blocks * groups * col_tiles, [&](int64_t item) {
    const int64_t col_tile = item % col_tiles, group = item / col_tiles % groups, first_row = item / (col_tiles * groups) * block;
    const int64_t i0 = col_tile * tile_cols, cols = std::min(tile_cols, cig - i0);
    std::vector<Segment> segments;
    for (const std::vector<Pattern>& patterns_of_chunk : chunks)
      for (int64_t row = first_row; row < std::min(in_rows, first_row + block); ++row) {
        const int64_t ih = row % g.in[1], id = row / g.in[1] % g.in[0], n = row / (g.in[1] * g.in[0]);
        for (int64_t r = 0; r < std::min(stride, g.in[2]); ++r) {
          segments.clear();
          for (const Pattern& p : patterns_of_chunk) {
            const int64_t sd = id + g.pad_before[0] - p.kd * g.dilation[0], sh = ih + g.pad_before[1] - p.kh * g.dilation[1];
            const int64_t sw = r + g.pad_before[2] - p.kw * g.dilation[2];
            if (sd % g.stride[0] || sh % g.stride[1] || sd < 0 || sh < 0) continue;  // (negative: outside anyway)
            if (sw - floor_div(sw, stride) * stride != 0) continue;
            const int64_t od = sd / g.stride[0], oh = sh / g.stride[1];
            if (od >= g.out[0] || oh >= g.out[1]) continue;
            append(segments, (((n * g.out[0] + od) * g.out[1] + oh) * width + low + floor_div(sw, stride)) * co + group * cog + p.c0,
                   packed.data() + ((group * taps + p.tap(g)) * cog + p.c0) * cig + i0, p.depth, 1, cig);
          }
          if (segments.empty()) continue;  // no tap reaches this class: dx gains nothing
          for_tiles(ceil_div(g.in[2] - r, stride), tile_rows, [&](int64_t j, int64_t count) {
            TileArgs a{};
            a.a = dyp + j * co;
            a.a_row = co, a.a_step = 1;
            a.segments = segments.data(), a.n_segments = segments.size();
            a.b_step = cig;
            a.c = dx + (row * g.in[2] + r + j * stride) * ci + group * cig + i0, a.c_row = stride * ci;
            a.rows = count, a.cols = cols;
            a.init = TileInit::accumulate;
            run_tile(vectors, a);
          });
        }
      }
  });
}

void conv_backward_weights(Threads t, Scratch& scratch, const Window& g, const float* x, const float* dy,
                           float* dw, float* db) {
  const int64_t ci = g.in_channels, co = g.out_channels, groups = g.groups, cig = ci / groups, cog = co / groups;
  const int64_t out_rows = g.batch * g.out[0] * g.out[1], out_width = g.out[2];
  if (db) bias_backward(t, out_rows * out_width, co, dy, db);
  if (!dw) return;
  // A negative padding after (a conv_transpose's output_padding) only means the last windows stop short.
  const int64_t after = std::max<int64_t>(0, g.pad_after[2]), width = g.in[2] + g.pad_before[2] + after;
  const float* xp = pad_width(t, scratch.padded, x, g.batch * g.in[0] * g.in[1], g.in[2], ci, g.pad_before[2], after);
  const int vectors = vectors_for(cog);
  const int64_t tile_cols = vectors * vector_lanes(), col_tiles = ceil_div(cog, tile_cols);
  const int64_t tile_rows = max_rows(vectors);
  // The tile's rows are input channels of one tap; with one group and no dilation along the width, the
  // taps kw of a (kd, kh) continue each other in x and in dw, so their channels form one longer run.
  const bool merge_width = groups == 1 && g.dilation[2] == 1;
  const int64_t runs_per_tap = merge_width ? 1 : g.kernel[2], run = merge_width ? g.kernel[2] * cig : cig;
  const int64_t row_tiles = ceil_div(run, tile_rows);
  const int64_t items = groups * col_tiles * g.kernel[0] * g.kernel[1] * runs_per_tap * row_tiles;
  // Few items (conv1: 4 input channels, 9 items) would leave threads idle: the rows are then also cut
  // into slices, each summing into a private copy of dw, added to dw in slice order at the end.
  const int64_t slices = items >= 2 * thread_count(t) ? 1 : slice_count(thread_count(t), items, out_rows);
  const int64_t dw_size = g.taps() * cig * co;
  if (slices > 1) scratch.partial.assign(static_cast<size_t>(slices * dw_size), 0.0f);
  // Output rows per reduction block: dy's block stays in L2 while every item passes over it; within it,
  // each thread takes sub-blocks whose dy columns fit L1, and runs all its items over one before the next.
  const int64_t row_bytes = out_width * static_cast<int64_t>(sizeof(float));
  const int64_t block = std::max<int64_t>(1, kReductionBlockBytes / (row_bytes * co));
  const int64_t sub_block = std::max<int64_t>(1, kL1WeightBytes / (row_bytes * tile_cols));
  for (int64_t first = 0; first < out_rows; first += block) {
    const int64_t last = std::min(out_rows, first + block);
    // Units are (slice, item), items in (group, column tile, kd, kh, kw, row tile) order: a thread's
    // consecutive units share dy's rows and columns.
    parallel_chunks(t, slices * items, 1, [&](int64_t begin, int64_t end, int64_t) {
      std::vector<Segment> segments;
      for (int64_t unit0 = begin; unit0 < end;) {
        const int64_t slice = unit0 / items, unit1 = std::min(end, (slice + 1) * items);
        const int64_t r0 = first + (last - first) * slice / slices, r1 = first + (last - first) * (slice + 1) / slices;
        float* target = slices == 1 ? dw : scratch.partial.data() + slice * dw_size;
        for (int64_t sub = r0; sub < r1; sub += sub_block)
          for (int64_t unit = unit0; unit < unit1; ++unit) {
            int64_t rest = unit % items;
            const int64_t row_tile = rest % row_tiles;
            rest /= row_tiles;
            const int64_t kw = merge_width ? 0 : rest % runs_per_tap;
            rest /= runs_per_tap;
            const int64_t kh = rest % g.kernel[1];
            rest /= g.kernel[1];
            const int64_t kd = rest % g.kernel[0];
            rest /= g.kernel[0];
            const int64_t col_tile = rest % col_tiles, group = rest / col_tiles;
            const int64_t m0 = row_tile * tile_rows, o0 = group * cog + col_tile * tile_cols;
            segments.clear();
            for (int64_t row = sub; row < std::min(r1, sub + sub_block); ++row) {
              const int64_t oh = row % g.out[1], od = row / g.out[1] % g.out[0], n = row / (g.out[1] * g.out[0]);
              const int64_t id = od * g.stride[0] - g.pad_before[0] + kd * g.dilation[0];
              const int64_t ih = oh * g.stride[1] - g.pad_before[1] + kh * g.dilation[1];
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) continue;
              segments.push_back(
                  {((n * g.in[0] + id) * g.in[1] + ih) * width * ci, dy + row * out_width * co + o0, out_width});
            }
            if (segments.empty()) continue;
            const int64_t tap = (kd * g.kernel[1] + kh) * g.kernel[2] + kw;
            TileArgs a{};
            a.a = xp + kw * g.dilation[2] * ci + group * cig + m0;
            a.a_row = 1, a.a_step = g.stride[2] * ci;
            a.segments = segments.data(), a.n_segments = segments.size();
            a.b_step = co;
            a.c = target + (tap * cig + m0) * co + o0, a.c_row = co;
            a.rows = std::min(tile_rows, run - m0), a.cols = std::min(tile_cols, cog - col_tile * tile_cols);
            a.init = TileInit::accumulate;
            run_tile(vectors, a);
          }
        unit0 = unit1;
      }
    });
  }
  if (slices == 1) return;
  const float* partial = scratch.partial.data();
  vector_loop(t, dw_size, [&](svbool_t pg, int64_t i) {
    svfloat32_t sum = svld1(pg, dw + i);
    for (int64_t slice = 0; slice < slices; ++slice) sum = svadd_x(pg, sum, svld1(pg, partial + slice * dw_size + i));
    svst1(pg, dw + i, sum);
  });
}

void bias_backward(Threads t, int64_t rows, int64_t channels, const float* dy, float* db) {
  const std::vector<double> sums = channel_sums<1>(
      t, {rows, channels},
      [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t&) { s0 = svadd_x(pg, s0, svld1(pg, dy + r * channels + c)); });
  for (int64_t c = 0; c < channels; ++c) db[c] += static_cast<float>(sums[static_cast<size_t>(c)]);
}

// The transposed convolution is its adjoint conv run backwards: forward = that conv's backward data
// (into a zeroed y), input gradient = its forward, weight gradient = its backward weights with the roles
// of input and output exchanged.
void conv_transpose_forward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w,
                            const float* b, float* y) {
  const int64_t rows = g.in_positions(), channels = g.in_channels;
  if (b)
    parallel_chunks(t, rows, std::max<int64_t>(1, kMinChunk / channels), [&](int64_t begin, int64_t end, int64_t) {
      for (int64_t r = begin; r < end; ++r) std::copy(b, b + channels, y + r * channels);
    });
  else
    fill_zero(t, rows * channels, y);
  conv_backward_data(t, scratch, g, w, x, y);
}

void conv_transpose_backward(Threads t, Scratch& scratch, const Window& g, const float* x, const float* w,
                             const float* dy, float* dx, float* dw, float* db) {
  if (db) bias_backward(t, g.in_positions(), g.in_channels, dy, db);
  if (dw) conv_backward_weights(t, scratch, g, dy, x, dw, nullptr);
  if (dx) {
    // dx += conv(dy, w): the forward writes, so it goes through a scratch buffer.
    std::vector<float> y(static_cast<size_t>(g.out_positions() * g.out_channels));
    conv_forward(t, scratch, g, dy, w, nullptr, y.data());
    add_forward(t, static_cast<int64_t>(y.size()), dx, y.data(), dx);
  }
}

}  // namespace mlph::a64fx
