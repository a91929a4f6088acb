// What a DeepCAM data file decodes to, and the one error type the data layer throws.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <span>
#include <vector>

namespace mlph::deepcam {

inline constexpr int kLabelClasses = 3;  // 0 background, 1 tropical cyclone, 2 atmospheric river

// One sample: data holds H x W x C float32 in HWC order (climate/data), labels H x W class indices.
struct Sample {
  std::vector<float> data;
  std::vector<int32_t> labels;
};

// Where a sample is decoded to when the caller owns the memory (a batch's row): no copy between.
struct SampleView {
  std::span<float> data;       // H x W x C
  std::span<int32_t> labels;   // H x W
};

// Per-channel minimum and maximum over the training set (stats.h5), and the normalization the
// reference derives from them: shift = min, scale = 1 / (max - min) in the stats' own dtype.
struct Stats {
  std::vector<float> shift, scale;
};

// Bad or unreadable data. what() is one line, "<file>: <problem>".
class DataError : public std::runtime_error {
 public:
  DataError(const std::string& where, const std::string& problem) : std::runtime_error(where + ": " + problem) {}
};

}  // namespace mlph::deepcam
