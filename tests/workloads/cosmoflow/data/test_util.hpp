// Shared helpers of the CosmoFlow data layer tests.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "data/sample.hpp"

namespace mlph::cosmoflow::test {

// The independent writer's fixtures; nullopt when the shared checkout is absent.
inline std::optional<std::filesystem::path> shared_fixtures() {
  const std::filesystem::path shared = std::filesystem::path(MLPH_SOURCE_DIR) / ".." / "shared";
  if (!std::filesystem::exists(shared)) return std::nullopt;
  return shared / "fixtures" / "cosmoflow";
}

#define MLPH_REQUIRE_FIXTURES(dir)                             \
  const auto dir = ::mlph::cosmoflow::test::shared_fixtures(); \
  if (!dir)                                                    \
  GTEST_SKIP() << "no shared fixtures: " MLPH_SOURCE_DIR       \
                  "/../shared does not exist, so the "         \
                  "TFRecord files of the independent writer cannot be read"

// Expects call to throw DataError whose message is one line holding every one of parts.
inline void expect_data_error(const std::function<void()>& call, std::initializer_list<std::string_view> parts) {
  try {
    call();
    ADD_FAILURE() << "no DataError thrown; expected one mentioning '" << *parts.begin() << "'";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const std::string_view part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
  }
}

// A temporary folder removed with the test.
class TempDir {
 public:
  TempDir() {
    std::random_device entropy;
    path_ = std::filesystem::temp_directory_path() /
            ("mlph_cosmoflow_data_" + std::to_string(entropy()) + std::to_string(entropy()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A small sample with recognizable values (counts: never negative).
inline Sample pattern_sample(int edge, int salt) {
  Sample s;
  s.x.resize(volume_elements(edge));
  for (size_t i = 0; i < s.x.size(); ++i) s.x[i] = static_cast<int16_t>((static_cast<int>(i) * 31 + salt) % 2000);
  s.y = {0.5f * static_cast<float>(salt % 3) - 0.5f, 0.25f, -0.75f, 1.0f};
  return s;
}

}  // namespace mlph::cosmoflow::test
