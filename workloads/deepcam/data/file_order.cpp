#include "file_order.hpp"

#include <numeric>
#include <random>
#include <utility>

namespace mlph::deepcam {
namespace {

// numpy's legacy random_interval(max): a uniform integer in [0, max] by rejection under a bit mask.
uint64_t random_interval(std::mt19937& mt, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    do value = mt() & mask; while (value > max);
  } else {
    // numpy's next_uint64 for MT19937: two 32-bit outputs, the first one high.
    do {
      const uint64_t high = mt();
      value = ((high << 32) | mt()) & mask;
    } while (value > max);
  }
  return value;
}

}  // namespace

std::vector<uint64_t> numpy_shuffled_indices(uint64_t n, uint32_t seed) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::mt19937 mt(seed);  // init_genrand(seed): numpy's legacy seeding of a 32-bit integer seed
  for (uint64_t i = n; i-- > 1;) std::swap(order[i], order[random_interval(mt, i)]);
  return order;
}

std::vector<uint64_t> torch_randperm(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::mt19937 mt(static_cast<uint32_t>(seed));  // torch's mt19937 takes the low 32 bits of the seed
  for (uint64_t i = 0; i + 1 < n; ++i) std::swap(order[i], order[i + mt() % (n - i)]);
  return order;
}

}  // namespace mlph::deepcam
