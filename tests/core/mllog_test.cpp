#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "mlph/core/mllog.hpp"

using namespace mlph::core;

TEST(MlLog, NumbersAreEncodedAsPythonWould) {
  EXPECT_EQ(json(3.0).text, "3.0");
  EXPECT_EQ(json(0.001).text, "0.001");
  EXPECT_EQ(json(1e-06).text, "1e-06");
  EXPECT_EQ(json(0.124).text, "0.124");
  EXPECT_EQ(json(std::nan("")).text, "NaN");
  EXPECT_EQ(json(64).text, "64");
  EXPECT_EQ(json("a\"b\n").text, "\"a\\\"b\\n\"");
  EXPECT_EQ(json_list({16, 32}, true).text, "[16, 32]");
  EXPECT_EQ(json_list({0.25, 0.125}, false).text, "[0.25, 0.125]");
}

TEST(MlLog, LinesHaveTheMlperfLoggingLayout) {
  const auto path = std::filesystem::temp_directory_path() / "mllog_test" / "log.txt";
  {
    MlLogger log(path, false);
    log.event("seed", json(42));
    log.end("eval_stop", {}, {{"epoch_num", json(3)}});
  }
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  const std::regex line(
      R"(:::MLLOG \{"namespace": "", "time_ms": \d{13}, "event_type": "POINT_IN_TIME", "key": "seed", "value": 42, )"
      R"("metadata": \{"file": "tests/core/mllog_test.cpp", "lineno": \d+\}\})");
  EXPECT_TRUE(std::regex_match(first, line)) << first;
  EXPECT_NE(second.find(R"("event_type": "INTERVAL_END", "key": "eval_stop", "value": null, )"), std::string::npos);
  EXPECT_NE(second.find(R"(, "epoch_num": 3}})"), std::string::npos) << second;
}

TEST(MlLog, EveryLineIsOnDiskImmediately) {
  const auto path = std::filesystem::temp_directory_path() / "mllog_flush.txt";
  MlLogger log(path, false);
  log.event("run_start");
  std::ifstream in(path);  // read while the logger is still open
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("\"key\": \"run_start\""), std::string::npos);
}
