// The posix storage plug-in's read, as a workload calls it (sdk::read_file): regular files come
// back whole; anything else is refused naming the file before the reader blocks or allocates.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>

#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/storage/storage.hpp"

namespace fs = std::filesystem;
using namespace mlph;

namespace {

class PosixRead : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlph-posix-read-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const auto* api = plugin_.api<MLPH_StorageApi>();
    MLPH_Storage* raw = nullptr;
    ASSERT_EQ(api->create(core::host_api(), nullptr, 0, &raw), nullptr);
    storage_ = {sizeof(MLPH_StorageHandle), nullptr, api, raw};
  }
  void TearDown() override {
    if (storage_.storage) storage_.api->destroy(storage_.storage);
    fs::remove_all(dir_);
  }

  std::vector<std::byte> read(const fs::path& path, uint64_t max_bytes = UINT64_MAX) {
    return sdk::read_file(core::host_api(), storage_, path.string(), "test data", max_bytes);
  }
  // The message of the error reading path (bounded in time: a read that hangs fails the test).
  std::string error_reading(const fs::path& path, uint64_t max_bytes = UINT64_MAX) {
    auto attempt = std::async(std::launch::async, [&]() -> std::string {
      try {
        read(path, max_bytes);
      } catch (const sdk::Error& e) {
        return e.what();
      }
      return "no error";
    });
    if (attempt.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
      ADD_FAILURE() << path << ": the read still hangs after 10 s";
      if (fs::is_fifo(path)) ::close(::open(path.c_str(), O_WRONLY));  // let the blocked reader go
    }
    return attempt.get();
  }

  fs::path dir_;
  core::LoadedPlugin plugin_ = core::PluginLoader::load_file(
      fs::path(MLPH_PLUGIN_DIR) / core::plugin_file_name(MLPH_KIND_STORAGE, "posix"), MLPH_KIND_STORAGE, "posix");
  MLPH_StorageHandle storage_{};
};

TEST_F(PosixRead, RegularFileComesBackWhole) {
  std::ofstream(dir_ / "a.bin", std::ios::binary) << std::string("\0ab\xff", 4);
  const std::vector<std::byte> bytes = read(dir_ / "a.bin", 4);
  ASSERT_EQ(bytes.size(), 4u);
  EXPECT_EQ(bytes[0], std::byte{0});
  EXPECT_EQ(bytes[3], std::byte{0xff});
  EXPECT_TRUE(read(dir_ / "a.bin").size() == 4u);
}

TEST_F(PosixRead, FifoIsRefusedNamingItWithoutHanging) {
  const fs::path fifo = dir_ / "x_label.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_reading(fifo), "test data: " + fifo.string() + ": is a FIFO, not a regular file");
}

TEST_F(PosixRead, DirectoryIsRefusedNamingIt) {
  fs::create_directories(dir_ / "y_label.npy");
  EXPECT_EQ(error_reading(dir_ / "y_label.npy"),
            "test data: " + (dir_ / "y_label.npy").string() + ": is a directory, not a regular file");
}

TEST_F(PosixRead, DeviceIsRefusedNamingIt) {
  fs::create_symlink("/dev/zero", dir_ / "stats.h5");
  EXPECT_EQ(error_reading(dir_ / "stats.h5"),
            "test data: " + (dir_ / "stats.h5").string() + ": is a character device, not a regular file");
}

TEST_F(PosixRead, FileOverTheCallersLimitIsRefusedBeforeAllocating) {
  std::ofstream(dir_ / "big.tfrecord", std::ios::binary) << std::string(1000, 'x');
  EXPECT_EQ(error_reading(dir_ / "big.tfrecord", 999),
            "test data: " + (dir_ / "big.tfrecord").string() +
                ": 1000 bytes, more than the 999 bytes a file of this data can hold");
  EXPECT_EQ(read(dir_ / "big.tfrecord", 1000).size(), 1000u);
}

TEST_F(PosixRead, MissingFileIsNotFound) {
  try {
    read(dir_ / "missing.h5");
    ADD_FAILURE() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_NOT_FOUND);
    EXPECT_EQ(std::string(e.what()), "test data: " + (dir_ / "missing.h5").string() + ": cannot open: No such file or directory");
  }
}

// The SDK reader on its own (workloads reading a file directly, such as DeepCAM's stats.h5).
TEST(ReadRegularFile, RefusesWhatIsNotARegularFileAndWhatIsTooLarge) {
  try {
    sdk::read_regular_file("/dev/zero", 1 << 20);
    ADD_FAILURE() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero: is a character device, not a regular file");
  }
  const fs::path file = fs::temp_directory_path() / ("mlph-read-regular-" + std::to_string(::getpid()));
  std::ofstream(file) << "12345";
  EXPECT_EQ(sdk::read_regular_file(file.string(), 5).size(), 5u);
  try {
    sdk::read_regular_file(file.string(), 4);
    ADD_FAILURE() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_OUT_OF_RANGE);
    EXPECT_EQ(std::string(e.what()), file.string() + ": 5 bytes, more than the 4 bytes allowed");
  }
  fs::remove(file);
}

}  // namespace
