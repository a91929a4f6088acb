#include "synthetic.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <numbers>
#include <thread>

#include "hdf5_io.hpp"
#include "mlph/common.h"

namespace mlph::deepcam {
namespace {

namespace fs = std::filesystem;

enum Channel { TMQ, U850, V850, UBOT, VBOT, QREFHT, PS, PSL, T200, T500, PRECT, TS, TREFHT, Z1000, Z200, ZBOT };

// Physical offset and spread of each channel, and the weight of its warm-equator latitude profile.
struct Field {
  double offset, spread, latitude;
};
constexpr Field kFields[kSyntheticChannels] = {
    {25, 12, 1.0},     {2, 8, 0},     {0, 6, 0},        {1, 6, 0},     {0, 5, 0},      {0.01, 0.004, 1.0},
    {98000, 1500, 0},  {101000, 800, 0}, {218, 5, -0.5}, {255, 8, 1.0}, {3e-8, 2e-8, 0.5}, {288, 15, 1.0},
    {287, 14, 1.0},    {100, 80, 0},  {11800, 300, 1.0}, {60, 10, 0}};

// The sample's random numbers, in draw order.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t index) : seed_(seed), index_(index) {}
  double uniform() { return mlph_uniform(seed_, index_, counter_++, 0); }
  double range(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double sign() { return uniform() < 0.5 ? -1.0 : 1.0; }

 private:
  uint64_t seed_, index_, counter_ = 0;
};

// The weather in normalized units, one plane per channel, and the labels.
struct Canvas {
  int height, width;
  std::vector<std::vector<double>> planes;
  std::vector<int32_t> labels;
  Canvas(int h, int w)
      : height(h), width(w), planes(kSyntheticChannels, std::vector<double>(static_cast<size_t>(h) * w, 0.0)),
        labels(static_cast<size_t>(h) * w, 0) {}
  double& at(int channel, int y, int x) { return planes[channel][static_cast<size_t>(y) * width + x]; }
  double latitude(double y) const { return (y + 0.5) / height * 2.0 - 1.0; }  // -1 .. 1, row 0 the south
};

void add_background(Canvas& c, Draws& draws) {
  constexpr int kWaves = 4;
  const double amplitude = std::sqrt(2.0 / kWaves);  // unit variance in total
  std::vector<double> cos_y(c.height), sin_y(c.height), cos_x(c.width), sin_x(c.width);
  for (int ch = 0; ch < kSyntheticChannels; ++ch) {
    for (int k = 0; k < kWaves; ++k) {
      const double ky = draws.range(0.5, 3.0) * 2 * std::numbers::pi / c.height;
      const double kx = draws.sign() * draws.range(0.5, 3.0) * 2 * std::numbers::pi / c.width;
      const double phase = draws.range(0.0, 2 * std::numbers::pi);
      for (int y = 0; y < c.height; ++y) cos_y[y] = std::cos(ky * y + phase), sin_y[y] = std::sin(ky * y + phase);
      for (int x = 0; x < c.width; ++x) cos_x[x] = std::cos(kx * x), sin_x[x] = std::sin(kx * x);
      for (int y = 0; y < c.height; ++y)
        for (int x = 0; x < c.width; ++x) c.at(ch, y, x) += amplitude * (cos_y[y] * cos_x[x] - sin_y[y] * sin_x[x]);
    }
    for (int y = 0; y < c.height; ++y) {
      const double lat = c.latitude(y), profile = kFields[ch].latitude * (1.0 - 2.0 * lat * lat);
      for (int x = 0; x < c.width; ++x) c.at(ch, y, x) += profile;
    }
  }
}

// A warm-core vortex with a pressure minimum and rotating winds; label 1 within 1.6 R.
void add_cyclone(Canvas& c, Draws& draws) {
  const double lat = draws.sign() * draws.range(0.1, 0.4);
  const double cy = (lat + 1.0) / 2.0 * c.height - 0.5, cx = draws.range(0.0, c.width);
  const double r = draws.range(0.03, 0.05) * c.height, a = draws.range(0.7, 1.3);
  const double spin = lat < 0 ? -1.0 : 1.0;  // the sense of rotation flips across the equator
  const int y0 = std::max(0, static_cast<int>(cy - 4 * r)), y1 = std::min(c.height - 1, static_cast<int>(cy + 4 * r));
  const int x0 = std::max(0, static_cast<int>(cx - 4 * r)), x1 = std::min(c.width - 1, static_cast<int>(cx + 4 * r));
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) {
      const double dy = y - cy, dx = x - cx, d = std::sqrt(dx * dx + dy * dy), rho = d / r;
      const double g = std::exp(-0.5 * rho * rho);
      const double speed = 4.0 * a * rho * std::exp(0.5 * (1.0 - rho * rho));  // peaks at d = R
      const double ux = d > 0 ? -dy / d * spin : 0.0, uy = d > 0 ? dx / d * spin : 0.0;
      c.at(PS, y, x) -= 3.0 * a * g;
      c.at(PSL, y, x) -= 3.0 * a * g;
      c.at(Z1000, y, x) -= 2.5 * a * g;
      c.at(T500, y, x) += 2.0 * a * g;
      c.at(T200, y, x) += 1.5 * a * g;
      c.at(TMQ, y, x) += 2.5 * a * g;
      c.at(QREFHT, y, x) += a * g;
      c.at(PRECT, y, x) += 4.0 * a * g;
      c.at(U850, y, x) += speed * ux;
      c.at(V850, y, x) += speed * uy;
      c.at(UBOT, y, x) += 0.8 * speed * ux;
      c.at(VBOT, y, x) += 0.8 * speed * uy;
      if (rho < 1.6) c.labels[static_cast<size_t>(y) * c.width + x] = 1;
    }
}

// A long, narrow, gently curved band of moisture with winds along it; label 2 where it is strong.
void add_river(Canvas& c, Draws& draws) {
  const double hemisphere = draws.sign();
  const double lat = hemisphere * draws.range(0.3, 0.7);
  const double py = (lat + 1.0) / 2.0 * c.height - 0.5, px = draws.range(0.0, c.width);
  const double length = draws.range(0.35, 0.6) * c.width, half_width = draws.range(0.02, 0.035) * c.height;
  const double angle = hemisphere * draws.range(0.2, 0.9);  // eastward and poleward
  const double bend = draws.range(-0.25, 0.25), b = draws.range(0.8, 1.2);
  const double dx = std::cos(angle), dy = std::sin(angle), nx = -dy, ny = dx;

  struct Point {
    double y, x, ty, tx, taper;
  };
  std::vector<Point> line;
  const double step = std::clamp(half_width / 4, 0.5, 2.0);
  const int n = static_cast<int>(length / step) + 1;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const double offset = 4 * bend * length * t * (1 - t), slope = 4 * bend * (1 - 2 * t);  // d offset / d(t L)
    const double tx = dx + slope * nx, ty = dy + slope * ny, norm = std::sqrt(tx * tx + ty * ty);
    line.push_back({py + t * length * dy + offset * ny, px + t * length * dx + offset * nx, ty / norm, tx / norm,
                    std::min(1.0, 6 * std::min(t, 1 - t))});
  }
  double ymin = 1e300, ymax = -1e300, xmin = 1e300, xmax = -1e300;
  for (const Point& p : line) ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y), xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
  const double margin = 3 * half_width;
  const int y0 = std::max(0, static_cast<int>(ymin - margin)), y1 = std::min(c.height - 1, static_cast<int>(ymax + margin));
  const int x0 = std::max(0, static_cast<int>(xmin - margin)), x1 = std::min(c.width - 1, static_cast<int>(xmax + margin));
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) {
      const Point* nearest = &line[0];
      double best = std::numeric_limits<double>::max();
      for (const Point& p : line)
        if (const double d2 = (y - p.y) * (y - p.y) + (x - p.x) * (x - p.x); d2 < best) best = d2, nearest = &p;
      if (best > margin * margin) continue;
      const double f = std::exp(-0.5 * best / (half_width * half_width)) * nearest->taper;
      c.at(TMQ, y, x) += 3.0 * b * f;
      c.at(QREFHT, y, x) += 2.0 * b * f;
      c.at(PRECT, y, x) += 1.5 * b * f;
      c.at(U850, y, x) += 3.0 * b * f * nearest->tx;
      c.at(V850, y, x) += 3.0 * b * f * nearest->ty;
      c.at(UBOT, y, x) += 2.0 * b * f * nearest->tx;
      c.at(VBOT, y, x) += 2.0 * b * f * nearest->ty;
      if (f > 0.4) c.labels[static_cast<size_t>(y) * c.width + x] = 2;
    }
}

struct ChannelStats {
  std::vector<double> min, max, sum, sum_sq;
  uint64_t pixels = 0;
  ChannelStats()
      : min(kSyntheticChannels, std::numeric_limits<double>::max()),
        max(kSyntheticChannels, std::numeric_limits<double>::lowest()), sum(kSyntheticChannels, 0.0),
        sum_sq(kSyntheticChannels, 0.0) {}
  void add(const Sample& s) {
    for (size_t i = 0; i < s.data.size(); ++i) {
      const size_t ch = i % kSyntheticChannels;
      const double v = s.data[i];
      min[ch] = std::min(min[ch], v), max[ch] = std::max(max[ch], v), sum[ch] += v, sum_sq[ch] += v * v;
    }
    pixels += s.labels.size();
  }
  void merge(const ChannelStats& o) {
    for (int ch = 0; ch < kSyntheticChannels; ++ch)
      min[ch] = std::min(min[ch], o.min[ch]), max[ch] = std::max(max[ch], o.max[ch]), sum[ch] += o.sum[ch],
      sum_sq[ch] += o.sum_sq[ch];
    pixels += o.pixels;
  }
};

// Creates `dir`, refusing one that holds anything but earlier generator output, which it removes.
void prepare_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataError(dir.string(), "cannot create the folder: " + ec.message());
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("data-synthetic-", 0) != 0)
      throw DataError(dir.string(), "holds '" + name + "', which the generator did not write: refusing to write here");
    stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

void write_stats(const std::string& path, const ChannelStats& s) {
  std::vector<float> lo, hi, mean, sq_mean;
  std::vector<double> count(kSyntheticChannels, static_cast<double>(s.pixels));
  for (int ch = 0; ch < kSyntheticChannels; ++ch) {
    lo.push_back(static_cast<float>(s.min[ch]));
    hi.push_back(static_cast<float>(s.max[ch]));
    mean.push_back(static_cast<float>(s.sum[ch] / static_cast<double>(s.pixels)));
    sq_mean.push_back(static_cast<float>(s.sum_sq[ch] / static_cast<double>(s.pixels)));
  }
  const std::vector<size_t> shape{kSyntheticChannels};
  Hdf5Writer out(path);
  out.write("climate/count", shape, std::span<const double>(count));
  out.write("climate/mean", shape, std::span<const float>(mean));
  out.write("climate/sqmean", shape, std::span<const float>(sq_mean));
  out.write("climate/minval", shape, std::span<const float>(lo));
  out.write("climate/maxval", shape, std::span<const float>(hi));
  out.commit();
}

}  // namespace

Sample synthesize_sample(uint64_t seed, uint64_t index, int height, int width) {
  Canvas canvas(height, width);
  Draws draws(seed, index);
  add_background(canvas, draws);
  const int rivers = 1 + static_cast<int>(draws.uniform() * 2), cyclones = static_cast<int>(draws.uniform() * 3);
  for (int i = 0; i < rivers; ++i) add_river(canvas, draws);
  for (int i = 0; i < cyclones; ++i) add_cyclone(canvas, draws);  // after the rivers: label 1 wins

  Sample s;
  const size_t pixels = static_cast<size_t>(height) * width;
  s.data.resize(pixels * kSyntheticChannels);
  for (int ch = 0; ch < kSyntheticChannels; ++ch)
    for (size_t i = 0; i < pixels; ++i) {
      const double noise = 0.17 * (2.0 * mlph_uniform(seed, index, 1000000 + static_cast<uint64_t>(ch), i) - 1.0);
      s.data[i * kSyntheticChannels + ch] =
          static_cast<float>(kFields[ch].offset + kFields[ch].spread * (canvas.planes[ch][i] + noise));
    }
  s.labels = std::move(canvas.labels);
  return s;
}

std::string synthetic_file_name(uint64_t seed, uint64_t index) {
  char name[96];
  std::snprintf(name, sizeof name, "data-synthetic-%llu-%06llu.h5", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(index));
  return name;
}

void write_dataset(const std::string& dir, uint64_t n_train, uint64_t n_val, int height, int width, uint64_t seed) {
  const fs::path root(dir);
  prepare_folder(root / "train");
  prepare_folder(root / "validation");
  std::atomic<uint64_t> next{0};
  std::mutex merge_lock;
  ChannelStats train_stats;
  std::exception_ptr failure;
  auto work = [&] {
    ChannelStats local;
    try {
      for (uint64_t i = next++; i < n_train + n_val; i = next++) {
        const Sample s = synthesize_sample(seed, i, height, width);
        if (i < n_train) local.add(s);
        const fs::path path = root / (i < n_train ? "train" : "validation") / synthetic_file_name(seed, i);
        Hdf5Writer out(path.string());
        const auto h = static_cast<size_t>(height), w = static_cast<size_t>(width);
        out.write("climate/data", {h, w, size_t{kSyntheticChannels}}, std::span<const float>(s.data));
        out.write("climate/labels_0", {h, w}, std::span<const int32_t>(s.labels));
        out.commit();
      }
    } catch (...) {
      next = n_train + n_val;  // the other workers stop too
      const std::lock_guard<std::mutex> guard(merge_lock);
      if (!failure) failure = std::current_exception();
    }
    const std::lock_guard<std::mutex> guard(merge_lock);
    train_stats.merge(local);
  };
  const unsigned workers = std::max(1u, std::min(std::thread::hardware_concurrency(), 16u));
  std::vector<std::jthread> threads;
  for (unsigned t = 0; t < workers; ++t) threads.emplace_back(work);
  threads.clear();  // joins
  if (failure) std::rethrow_exception(failure);
  write_stats((root / "stats.h5").string(), train_stats);
}

}  // namespace mlph::deepcam
