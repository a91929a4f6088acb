// The reference's training file order: the sorted file list shuffled once by
// numpy.random.RandomState(12345).shuffle (REFERENCE §2.6, §2.10), reproduced exactly: MT19937
// seeded like numpy's legacy seeding (init_genrand), and numpy's legacy Fisher-Yates, which draws
// j in [0, i] for i = n-1 .. 1 by masked rejection sampling on 32-bit (or 64-bit) outputs.
#pragma once

#include <cstdint>
#include <vector>

namespace mlph::deepcam {

inline constexpr uint32_t kFileShuffleSeed = 12345;
inline constexpr uint64_t kSamplerSeed = 0;  // DistributedSampler(seed=0) in the reference's train.py

// permutation[i] = the sorted index of the file at position i after the shuffle.
std::vector<uint64_t> numpy_shuffled_indices(uint64_t n, uint32_t seed = kFileShuffleSeed);

// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU, exactly (n < 2^32 / 20):
// MT19937 seeded with `seed`, then for i = 0 .. n-2 swap i with i + (next 32-bit output mod (n - i)).
// DistributedSampler's epoch order is torch_randperm(n, sampler seed + epoch).
std::vector<uint64_t> torch_randperm(uint64_t n, uint64_t seed);

}  // namespace mlph::deepcam
