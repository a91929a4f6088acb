#include "synthetic.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <unistd.h>

#include "npy.hpp"
#include "tfrecord.hpp"

namespace mlph::cosmoflow {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna), seeded through splitmix64 from (seed, index, stream).
class Rng {
 public:
  Rng(uint64_t seed, uint64_t index, uint64_t stream) {
    uint64_t mix = seed;
    mix = splitmix64(mix) ^ index;
    mix = splitmix64(mix) ^ stream;
    for (auto& word : s_) word = splitmix64(mix);
  }
  uint64_t next() {
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::array<uint64_t, 4> s_{};
};

enum Stream : uint64_t { kTargetsStream = 1, kFieldStream = 2, kCountsStream = 3 };

// exp(x) from + - * / and exact power-of-two scaling only: the same bits on every IEEE-754 machine
// (libm's exp may differ in the last bit between versions). Relative error below 1e-15; written
// without calls or tables so that loops over it vectorize.
inline double portable_exp(double x) {
  x = std::clamp(x, -700.0, 700.0);
  constexpr double kLog2e = 1.4426950408889634, kLn2Hi = 0.693147180369123816490, kLn2Lo = 1.90821492927058770002e-10;
  const double k = std::nearbyint(x * kLog2e);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;  // |r| <= 0.35: Taylor to degree 13 suffices
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * std::bit_cast<double>(static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52);
}

// Unit-variance white noise, uniform on [-sqrt 3, sqrt 3]: after the blur it is Gaussian anyway.
std::vector<float> white_noise(size_t n, Rng& rng) {
  std::vector<float> noise(n);
  constexpr float kScale = 1.7320508f * 0x1.0p-23f;  // 24-bit uniform -> [-sqrt 3, sqrt 3)
  for (size_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng.next();
    noise[i] = static_cast<float>(static_cast<int32_t>(bits >> 40) - (1 << 23)) * kScale;
    if (i + 1 < n) noise[i + 1] = static_cast<float>(static_cast<int32_t>((bits >> 8) & 0xffffff) - (1 << 23)) * kScale;
  }
  return noise;
}

std::vector<float> gaussian_kernel(double sigma) {
  const int radius = static_cast<int>(std::ceil(3.0 * sigma));
  std::vector<float> kernel(2 * static_cast<size_t>(radius) + 1);
  double sum = 0;
  std::vector<double> w(kernel.size());
  for (int k = -radius; k <= radius; ++k)
    sum += w[static_cast<size_t>(k + radius)] = portable_exp(-0.5 * k * k / (sigma * sigma));
  for (size_t i = 0; i < w.size(); ++i) kernel[i] = static_cast<float>(w[i] / sum);
  return kernel;
}

// Periodic convolution along the middle axis of data viewed as [outer][n][inner]. Each block is
// copied with wrapped margins, then every tap is one contiguous multiply-add over the block, which
// the compiler vectorizes whatever the axis.
void blur_axis(std::vector<float>& data, size_t outer, size_t n, size_t inner, const std::vector<float>& kernel,
               std::vector<float>& padded) {
  const size_t radius = kernel.size() / 2, block = n * inner;
  padded.resize((n + 2 * radius) * inner);
  for (size_t o = 0; o < outer; ++o) {
    float* out = data.data() + o * block;
    for (size_t p = 0; p < n + 2 * radius; ++p) {
      const size_t source = (p + n * (radius / n + 1) - radius) % n;  // p - radius, wrapped
      std::copy_n(out + source * inner, inner, padded.data() + p * inner);
    }
    std::fill_n(out, block, 0.0f);
    for (size_t k = 0; k < kernel.size(); ++k) {
      const float w = kernel[k];
      const float* in = padded.data() + k * inner;
      for (size_t i = 0; i < block; ++i) out[i] += w * in[i];
    }
  }
}

// A Gaussian random field with correlation length `smoothing` voxels, mean 0 and variance 1 exactly.
std::vector<float> gaussian_field(int edge, double smoothing, Rng& rng) {
  const auto e = static_cast<size_t>(edge);
  std::vector<float> field = white_noise(e * e * e, rng);
  const std::vector<float> kernel = gaussian_kernel(smoothing);
  std::vector<float> padded;
  blur_axis(field, 1, e, e * e, kernel, padded);  // D (the largest block: allocates once)
  blur_axis(field, e, e, e, kernel, padded);      // H
  blur_axis(field, e * e, e, 1, kernel, padded);  // W
  double sum = 0, sum_sq = 0;
  for (const float v : field) sum += v, sum_sq += static_cast<double>(v) * v;
  const double mean = sum / static_cast<double>(field.size());
  const double variance = std::max(sum_sq / static_cast<double>(field.size()) - mean * mean, 1e-30);
  const auto shift = static_cast<float>(mean), scale = static_cast<float>(1.0 / std::sqrt(variance));
  for (float& v : field) v = (v - shift) * scale;
  return field;
}

// A standard normal deviate from the sum of 12 uniforms: only needed for rare large means.
double approximate_normal(Rng& rng) {
  double sum = -6.0;
  for (int i = 0; i < 12; ++i) sum += rng.uniform();
  return sum;
}

constexpr int kMaxPoissonSearch = 1000;

// 1/k for the inversion search: one multiply per step instead of a division.
const std::array<double, kMaxPoissonSearch + 1>& reciprocals() {
  static const auto table = [] {
    std::array<double, kMaxPoissonSearch + 1> r{};
    for (int k = 1; k <= kMaxPoissonSearch; ++k) r[static_cast<size_t>(k)] = 1.0 / k;
    return r;
  }();
  return table;
}

// Poisson deviate by inversion (exact) for the usual small means; normal approximation above 200.
int poisson(double mean, double exp_minus_mean, Rng& rng) {
  if (mean >= 200.0)
    return static_cast<int>(std::max(0.0, std::floor(mean + std::sqrt(mean) * approximate_normal(rng) + 0.5)));
  const auto& inverse = reciprocals();
  const double u = rng.uniform();
  double p = exp_minus_mean, cdf = p;
  int k = 0;
  while (u > cdf && k < kMaxPoissonSearch) {
    ++k;
    p *= mean * inverse[static_cast<size_t>(k)];
    cdf += p;
  }
  return k;
}

// Level 1 deflates a 128^3 sample 4x faster than the default 6 for files about 12% larger (33% of
// the raw size against 29%): generating is what takes the time.
constexpr int kGzipLevel = 1;

std::string zero_padded(uint64_t value, size_t width) {
  std::string text = std::to_string(value);
  return text.size() < width ? std::string(width - text.size(), '0') + text : text;
}

// Removes what an earlier write_dataset left in a split folder; refuses a folder holding anything else.
void clear_previous_output(const std::filesystem::path& split) {
  static const std::regex generated(R"(univ_\d+_\d+_000(\.tfrecord|_data\.npy|_label\.npy)(\.partial)?)");
  if (!std::filesystem::exists(split)) return;
  for (const auto& entry : std::filesystem::directory_iterator(split)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, generated))
      throw std::runtime_error(split.string() + " holds '" + name +
                               "', which the dataset generator did not write: generate into an empty folder");
  }
  for (const auto& entry : std::filesystem::directory_iterator(split)) std::filesystem::remove(entry.path());
}

// Samples generated at once: every core, but no more than half the available memory holds. One
// sample needs about 4 bytes per count at its peak (the 2-byte counts, then their TFRecord record;
// before that the float field and its blurred copy): 2 GiB at 512^3.
unsigned generators(int edge) {
  const unsigned cores = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return cores;
  const double budget = 0.5 * static_cast<double>(pages) * static_cast<double>(page);
  const double per_sample = 4.0 * static_cast<double>(volume_elements(edge));
  return std::clamp(static_cast<unsigned>(budget / per_sample), 1u, cores);
}

// Runs job(i) for i in [0, n) on `workers` threads; rethrows the first failure.
template <typename Job>
void parallel_for(uint64_t n, unsigned workers, const Job& job) {
  std::atomic<uint64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    for (uint64_t i; (i = next++) < n;) {
      try {
        job(i);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = n;  // stop handing out work
      }
    }
  };
  std::vector<std::jthread> threads;
  for (unsigned t = 1; t < workers && t < n; ++t) threads.emplace_back(work);
  work();
  threads.clear();  // joins
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

Format parse_format(std::string_view text) {
  if (text == "tfrecord") return Format::tfrecord;
  if (text == "tfrecord_gzip") return Format::tfrecord_gzip;
  if (text == "npy") return Format::npy;
  throw std::invalid_argument("data format '" + std::string(text) + "': must be tfrecord, tfrecord_gzip or npy");
}

std::string_view format_name(Format format) {
  switch (format) {
    case Format::tfrecord:
      return "tfrecord";
    case Format::tfrecord_gzip:
      return "tfrecord_gzip";
    case Format::npy:
      break;
  }
  return "npy";
}

UniverseParameters universe_parameters(const std::array<float, kTargets>& y) {
  return {8.0 * portable_exp(0.7 * y[0]), 0.65 * portable_exp(0.5 * y[1]), 1.5 * portable_exp(0.4 * y[2]),
          0.8 + 0.8 * y[3]};
}

std::array<float, kTargets> synthetic_targets(uint64_t seed, uint64_t index) {
  Rng rng(seed, index, kTargetsStream);
  std::array<float, kTargets> y{};
  for (float& v : y) v = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return y;
}

Sample synthesize_sample(uint64_t seed, uint64_t index, int edge) {
  const size_t voxels = volume_elements(edge) / kChannels;
  Sample sample;
  sample.y = synthetic_targets(seed, index);
  const UniverseParameters u = universe_parameters(sample.y);
  Rng field_rng(seed, index, kFieldStream), counts_rng(seed, index, kCountsStream);
  const std::vector<float> field = gaussian_field(edge, u.smoothing, field_rng);

  sample.x.resize(voxels * kChannels);
  std::array<double, kChannels> amplitude{};
  for (int c = 0; c < kChannels; ++c)
    amplitude[c] = u.amplitude * portable_exp(u.growth * (c - (kChannels - 1)) / (kChannels - 1));
  // In cache-sized chunks: two vectorizable passes for the exponentials, then the Poisson draws.
  constexpr size_t kChunk = 1024;
  std::array<double, kChunk> mean, exp_minus_mean;
  for (size_t start = 0; start < voxels; start += kChunk) {
    const size_t n = std::min(kChunk, voxels - start);
    for (size_t c = 0; c < kChannels; ++c) {
      const double a = amplitude[c], half_a2 = 0.5 * a * a;
      for (size_t i = 0; i < n; ++i) mean[i] = u.mean_count * portable_exp(a * field[start + i] - half_a2);
      for (size_t i = 0; i < n; ++i) exp_minus_mean[i] = portable_exp(-mean[i]);
      for (size_t i = 0; i < n; ++i)
        sample.x[(start + i) * kChannels + c] =
            static_cast<int16_t>(std::min(poisson(mean[i], exp_minus_mean[i], counts_rng), 32767));
    }
  }
  return sample;
}

std::string synthetic_stem(uint64_t seed, uint64_t index) {
  return "univ_" + std::to_string(seed) + "_" + zero_padded(index, 6) + "_000";
}

void write_dataset(const std::string& dir, uint64_t n_train, uint64_t n_val, int edge, Format format, uint64_t seed) {
  volume_elements(edge);  // validates edge before touching the disk
  const std::filesystem::path root(dir), train = root / "train", validation = root / "validation";
  for (const auto& split : {train, validation}) {
    clear_previous_output(split);
    std::filesystem::create_directories(split);
  }
  parallel_for(n_train + n_val, generators(edge), [&](uint64_t index) {
    const Sample sample = synthesize_sample(seed, index, edge);
    const std::string stem = ((index < n_train ? train : validation) / synthetic_stem(seed, index)).string();
    if (format == Format::npy)
      write_npy_sample(stem, sample, edge);
    else
      write_tfrecord_file(stem + ".tfrecord", std::span(&sample, 1), edge,
                          {format == Format::tfrecord_gzip, kGzipLevel});
  });
}

}  // namespace mlph::cosmoflow
