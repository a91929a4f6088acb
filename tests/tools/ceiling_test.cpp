#include "ceiling.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

namespace mlph::bench {
namespace {

namespace fs = std::filesystem;

// A file of `size` bytes, byte i being (seed + i) mod 251 (so that a misplaced piece shows).
std::vector<std::byte> write_file(const fs::path& path, size_t size, unsigned seed) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((seed + i) % 251);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
  return bytes;
}

bool holds(std::span<const std::byte> memory, size_t at, const std::vector<std::byte>& bytes, size_t from = 0, size_t n = SIZE_MAX) {
  n = std::min(n, bytes.size() - from);
  return std::equal(bytes.begin() + static_cast<ptrdiff_t>(from), bytes.begin() + static_cast<ptrdiff_t>(from + n),
                    memory.begin() + static_cast<ptrdiff_t>(at));
}

class BenchPreadCeiling : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlph-ceiling-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The files land one after the other, 4 KiB-aligned, through the slots as the readers fill a batch's
// rows, not all in one place (which the L3 cache would keep, and the readers never have).
TEST_F(BenchPreadCeiling, FilesLandOneAfterTheOtherThroughTheSlots) {
  const auto a = write_file(dir_ / "a", 5000, 1), b = write_file(dir_ / "b", 5000, 2), c = write_file(dir_ / "c", 3000, 3);
  std::vector<std::byte> memory(2 * 12288, std::byte{0xee});
  const std::vector<std::span<std::byte>> slots{std::span(memory).first(12288), std::span(memory).subspan(12288)};
  const PreadCeiling ceiling = measure_pread_ceiling({dir_ / "a", dir_ / "b", dir_ / "c"}, slots, 1, 13000);
  EXPECT_EQ(ceiling.bytes, 13000u);  // the three files once
  EXPECT_GT(ceiling.bytes_per_s, 0);
  EXPECT_TRUE(holds(slots[0], 0, a));
  EXPECT_TRUE(std::all_of(slots[0].begin() + 5000, slots[0].end(), [](std::byte v) { return v == std::byte{0xee}; }));
  EXPECT_TRUE(holds(slots[1], 0, b));     // 8192 + 5000 does not fit the first slot
  EXPECT_TRUE(holds(slots[1], 8192, c));  // 8192 + 3000 fits the second
}

// A file larger than a slot fills the slots in turn, in pieces of them.
TEST_F(BenchPreadCeiling, AFileLargerThanASlotFillsTheSlotsInTurn) {
  const auto big = write_file(dir_ / "big", 30000, 7);
  std::vector<std::byte> memory(2 * 12288);
  const std::vector<std::span<std::byte>> slots{std::span(memory).first(12288), std::span(memory).subspan(12288)};
  EXPECT_EQ(measure_pread_ceiling({dir_ / "big"}, slots, 1, 1).bytes, 30000u);
  EXPECT_TRUE(holds(slots[1], 0, big, 12288, 12288));
  EXPECT_TRUE(holds(slots[0], 0, big, 24576));          // the last piece, over the first's start
  EXPECT_TRUE(holds(slots[0], 5424, big, 5424, 6864));  // the first piece's rest
}

}  // namespace
}  // namespace mlph::bench
