// The reference's training file order: the sorted file list shuffled once by
// numpy.random.RandomState(12345).shuffle (REFERENCE §2.6, §2.10), reproduced exactly: MT19937
// seeded like numpy's legacy seeding (init_genrand), and numpy's legacy Fisher-Yates, which draws
// j in [0, i] for i = n-1 .. 1 by masked rejection sampling on 32-bit (or 64-bit) outputs.
#pragma once

#include <cstdint>
#include <vector>

namespace mlph::deepcam {

inline constexpr uint32_t kFileShuffleSeed = 12345;

// permutation[i] = the sorted index of the file at position i after the shuffle.
std::vector<uint64_t> numpy_shuffled_indices(uint64_t n, uint32_t seed = kFileShuffleSeed);

}  // namespace mlph::deepcam
