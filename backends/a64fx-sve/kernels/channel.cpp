// Per-channel and layout ops (DeepCAM's): concat, global average pooling, broadcast, channel affine and
// shift-scale, each a loop over rows (positions) with vectors over the contiguous channels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels.hpp"
#include "reduce.hpp"
#include "sve.hpp"

namespace mlph::a64fx {
namespace {

// f(r) for every row, rows split over the threads in chunks of about kMinChunk elements.
template <class F>
void for_rows(Threads t, RowsByChannels s, F&& f) {
  parallel_chunks(t, s.rows, std::max<int64_t>(1, kMinChunk / std::max<int64_t>(s.channels, 1)),
                  [&](int64_t begin, int64_t end, int64_t) {
                    for (int64_t r = begin; r < end; ++r) f(r);
                  });
}

// f(predicate, c) over the channel vectors of one row.
template <class F>
void for_channels(int64_t channels, F&& f) {
  for (int64_t c = 0; c < channels; c += vector_lanes()) f(lanes_from(c, channels), c);
}

int64_t total(const std::vector<int64_t>& widths) {
  int64_t sum = 0;
  for (int64_t w : widths) sum += w;
  return sum;
}

// The row of x that output row r repeats: size-1 dims of `in` index 0 (the channel dim excluded).
int64_t source_row(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int64_t r) {
  int64_t index = 0, stride = 1;
  for (size_t d = out.size() - 1; d-- > 0;) {
    const int64_t i = r % out[d];
    r /= out[d];
    if (in[d] != 1) index += i * stride;
    stride *= in[d];
  }
  return index;
}

int64_t rows_of(const std::vector<int64_t>& shape) {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  return rows;
}

}  // namespace

void concat_forward(Threads t, int64_t rows, const std::vector<const float*>& inputs,
                    const std::vector<int64_t>& widths, float* y) {
  const int64_t width = total(widths);
  for_rows(t, {rows, width}, [&](int64_t r) {
    float* out = y + r * width;
    for (size_t k = 0; k < inputs.size(); out += widths[k], ++k)
      std::memcpy(out, inputs[k] + r * widths[k], static_cast<size_t>(widths[k]) * sizeof(float));
  });
}

void concat_backward(Threads t, int64_t rows, const std::vector<float*>& grads, const std::vector<int64_t>& widths,
                     const float* dy) {
  const int64_t width = total(widths);
  for_rows(t, {rows, width}, [&](int64_t r) {
    const float* from = dy + r * width;
    for (size_t k = 0; k < grads.size(); from += widths[k], ++k) {
      if (!grads[k]) continue;
      float* to = grads[k] + r * widths[k];
      for_channels(widths[k], [&](svbool_t pg, int64_t c) { svst1(pg, to + c, svadd_x(pg, svld1(pg, to + c), svld1(pg, from + c))); });
    }
  });
}

void global_avg_pool_forward(Threads t, int64_t batch, int64_t positions, int64_t channels, const float* x, float* y) {
  for (int64_t n = 0; n < batch; ++n) {
    const float* sample = x + n * positions * channels;
    const std::vector<double> sums = channel_sums<1>(t, {positions, channels}, [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t&) {
      s0 = svadd_x(pg, s0, svld1(pg, sample + r * channels + c));
    });
    for (int64_t c = 0; c < channels; ++c)
      y[n * channels + c] = static_cast<float>(sums[static_cast<size_t>(c)] / static_cast<double>(positions));
  }
}

void global_avg_pool_backward(Threads t, int64_t batch, int64_t positions, int64_t channels, const float* dy,
                              float* dx) {
  const float inverse = 1.0f / static_cast<float>(positions);
  for_rows(t, {batch * positions, channels}, [&](int64_t r) {
    const float* g = dy + r / positions * channels;
    float* to = dx + r * channels;
    for_channels(channels, [&](svbool_t pg, int64_t c) { svst1(pg, to + c, svmla_x(pg, svld1(pg, to + c), svld1(pg, g + c), inverse)); });
  });
}

void broadcast_forward(Threads t, const std::vector<int64_t>& in, const std::vector<int64_t>& out, const float* x,
                       float* y) {
  const int64_t channels = out.back();
  for_rows(t, {rows_of(out), channels}, [&](int64_t r) {
    std::memcpy(y + r * channels, x + source_row(in, out, r) * channels, static_cast<size_t>(channels) * sizeof(float));
  });
}

// Threads take disjoint channel vectors: every output row adds into its source row, so rows would race.
void broadcast_backward(Threads t, const std::vector<int64_t>& in, const std::vector<int64_t>& out, const float* dy,
                        float* dx) {
  const int64_t channels = out.back(), rows = rows_of(out), lanes = vector_lanes();
  parallel_items(t, (channels + lanes - 1) / lanes, [&](int64_t vector) {
    const int64_t c = vector * lanes;
    const svbool_t pg = lanes_from(c, channels);
    for (int64_t r = 0; r < rows; ++r) {
      float* to = dx + source_row(in, out, r) * channels + c;
      svst1(pg, to, svadd_x(pg, svld1(pg, to), svld1(pg, dy + r * channels + c)));
    }
  });
}

void channel_affine_forward(Threads t, RowsByChannels s, const float* x, const float* w, const float* b, float* y) {
  for_rows(t, s, [&](int64_t r) {
    const int64_t row = r * s.channels;
    for_channels(s.channels, [&](svbool_t pg, int64_t c) {
      svst1(pg, y + row + c, svmla_x(pg, svld1(pg, b + c), svld1(pg, x + row + c), svld1(pg, w + c)));
    });
  });
}

void channel_affine_backward(Threads t, RowsByChannels s, const float* x, const float* w, const float* dy, float* dx,
                             float* dw, float* db) {
  if (dx)
    for_rows(t, s, [&](int64_t r) {
      const int64_t row = r * s.channels;
      for_channels(s.channels, [&](svbool_t pg, int64_t c) {
        svst1(pg, dx + row + c, svmla_x(pg, svld1(pg, dx + row + c), svld1(pg, dy + row + c), svld1(pg, w + c)));
      });
    });
  if (!dw && !db) return;
  const std::vector<double> sums = channel_sums<2>(t, s, [&](svbool_t pg, int64_t r, int64_t c, svfloat32_t& s0, svfloat32_t& s1) {
    const svfloat32_t g = svld1(pg, dy + r * s.channels + c);
    s0 = svmla_x(pg, s0, g, svld1(pg, x + r * s.channels + c));
    s1 = svadd_x(pg, s1, g);
  });
  for (int64_t c = 0; c < s.channels; ++c) {
    if (dw) dw[c] += static_cast<float>(sums[static_cast<size_t>(c)]);
    if (db) db[c] += static_cast<float>(sums[static_cast<size_t>(s.channels + c)]);
  }
}

void shift_scale_forward(Threads t, RowsByChannels s, const float* x, const float* shift, const float* scale,
                         float* y) {
  for_rows(t, s, [&](int64_t r) {
    const int64_t row = r * s.channels;
    for_channels(s.channels, [&](svbool_t pg, int64_t c) {
      svst1(pg, y + row + c, svmul_x(pg, svsub_x(pg, svld1(pg, x + row + c), svld1(pg, shift + c)), svld1(pg, scale + c)));
    });
  });
}

}  // namespace mlph::a64fx
