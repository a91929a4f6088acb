// Per-channel loops over a value in its own oneDNN layout, for what oneDNN has no primitive for
// (SyncBatchNorm's statistics and input-gradient correction), without a reorder to the graph layout.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "net.hpp"

namespace mlph::onednn {

// Walkable layouts keep a block of channels (oneDNN's logical dim 1) contiguous: channels-last (one
// block of all C) or blocked on channels alone (nChw16c, nCdhw8c, ...). The walk cuts the value into
// lines: one block of channels at every position along the innermost spatial dim.
class ChannelWalk {
 public:
  // nullopt when `desc` is not walkable (reorder the value to channels-last first).
  static std::optional<ChannelWalk> of(const memory::desc& desc);

  struct Line {
    int64_t channel0, width;  // channels [channel0, channel0 + width): the block less its padding
    int64_t offset;           // of the first element, in floats
    int64_t length, stride;   // positions along the line, floats apart; channel j at offset + k*stride + j
  };
  int64_t lines() const { return lines_; }
  int64_t block() const { return block_; }
  Line line(int64_t i) const;

  // Per channel, the sum of f(x, c) over the value in double: each line's partial sum, then the lines
  // in order (the same result for any thread count).
  template <class F>
  std::vector<double> channel_sums(const float* x, F f) const {
    std::vector<double> partial(static_cast<size_t>(lines_ * block_), 0.0);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < lines_; ++i) {
      const Line l = line(i);
      double* acc = partial.data() + i * block_;
      for (int64_t k = 0; k < l.length; ++k) {
        const float* p = x + l.offset + k * l.stride;
        for (int64_t j = 0; j < l.width; ++j) acc[j] += f(p[j], l.channel0 + j);
      }
    }
    std::vector<double> sums(static_cast<size_t>(channels_), 0.0);
    for (int64_t i = 0; i < lines_; ++i) {
      const Line l = line(i);
      for (int64_t j = 0; j < l.width; ++j) sums[static_cast<size_t>(l.channel0 + j)] += partial[size_t(i * block_ + j)];
    }
    return sums;
  }

  // y[e] += f(x[e], c) for every element e (channel c); x and y in the same layout.
  template <class F>
  void accumulate(const float* x, float* y, F f) const {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < lines_; ++i) {
      const Line l = line(i);
      for (int64_t k = 0; k < l.length; ++k) {
        const int64_t at = l.offset + k * l.stride;
        for (int64_t j = 0; j < l.width; ++j) y[at + j] += f(x[at + j], l.channel0 + j);
      }
    }
  }

 private:
  int64_t channels_ = 1, block_ = 1, offset0_ = 0;
  std::vector<int64_t> outer_sizes_, outer_strides_;  // the lines' index, innermost last: N, channel blocks, spatial
  int64_t length_ = 1, stride_ = 0, lines_ = 1;
};

}  // namespace mlph::onednn
