#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>

#include "mlph/core/mllog.hpp"
#include "mlph/core/mllog_reader.hpp"
#include "mlph/core/text_input.hpp"

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

// Issue 36, defect 3: nothing follows run_stop, whoever wrote it (the signal watcher's last words end
// the log while the run may go on evaluating): later lines are refused and counted.
TEST(MlLog, NoLineFollowsRunStop) {
  const auto path = std::filesystem::temp_directory_path() / "mllog_run_stop.txt";
  MlLogger log(path, false);
  log.start("eval_start");
  log.end("run_stop", {}, {{"status", json("aborted")}});
  log.end("eval_stop");
  log.event("eval_error", json(0.5));
  log.end("run_stop", {}, {{"status", json("success")}});
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("\"key\": \"run_stop\""), std::string::npos);
  EXPECT_NE(lines[1].find("aborted"), std::string::npos);
  EXPECT_EQ(log.refused_lines(), 3u);
}

namespace {
const std::string kLine = ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": \"seed\", "
                          "\"value\": 42, \"metadata\": {\"file\": \"x.py\", \"lineno\": 7}}\n";
}  // namespace

// A line is read as YAML, so it is read within the bounds of text_input.hpp: no anchors or
// aliases, no line past 1 MiB, and a log's nodes in all bounded; errors are counted past 100.
TEST(MlLogReader, LinesAreReadWithinBounds) {
  const ParsedLog ok = parse_mllog("no marker: not a log line\n[rank 0] " + kLine, "f.txt");
  ASSERT_EQ(ok.lines.size(), 1u);
  EXPECT_EQ(ok.lines[0].line, 2u);
  EXPECT_EQ(json_text(ok.lines[0].value), "42");
  EXPECT_TRUE(ok.errors.empty());

  const ParsedLog alias = parse_mllog(":::MLLOG {\"time_ms\": 1, \"key\": \"k\", \"value\": [&a [1], *a], \"metadata\": {}}\n" +
                                          kLine,
                                      "f.txt");
  ASSERT_EQ(alias.errors.size(), 1u);
  EXPECT_EQ(alias.errors[0],
            "f.txt:1: unreadable MLLOG line: YAML anchors and aliases are not accepted (an alias can expand without bound)");
  EXPECT_EQ(alias.lines.size(), 1u);  // the good line is still read

  const ParsedLog long_line = parse_mllog(kLine + std::string(kMaxLogLineBytes, ' ') + kLine + kLine, "f.txt");
  ASSERT_EQ(long_line.errors.size(), 1u);
  EXPECT_EQ(long_line.errors[0], fmt::format("f.txt:2: unreadable MLLOG line: {} bytes, more than the 1048576 allowed for "
                                             "a line", kMaxLogLineBytes + kLine.size() - 1));
  EXPECT_EQ(long_line.lines.size(), 2u);

  std::string garbage;
  for (int i = 0; i < 150; ++i) garbage += ":::MLLOG {\n";
  const ParsedLog bad = parse_mllog(garbage, "f.txt");
  ASSERT_EQ(bad.errors.size(), 101u);
  EXPECT_EQ(bad.errors.back(), "f.txt: 50 more unreadable MLLOG lines");

  // 1,000,000 nodes in all: lines of 100,009 (a list of 100,000 zeros and 9 more): the tenth is refused
  std::string zeros = "0";
  for (int i = 1; i < 100'000; ++i) zeros += ",0";
  const std::string dense = ":::MLLOG {\"time_ms\": 1, \"key\": \"k\", \"value\": [" + zeros + "], \"metadata\": {}}\n";
  std::string many;
  for (int i = 0; i < 10; ++i) many += dense;
  try {
    parse_mllog(many, "f.txt");
    ADD_FAILURE() << "no error";
  } catch (const LogError& e) {
    EXPECT_EQ(std::string(e.what()), "f.txt:10: more than 1000000 YAML nodes in the log's JSON: refused");
  }
}

TEST(MlLogReader, JsonTextIsOneLine) {
  const ParsedLog log = parse_mllog(
      ":::MLLOG {\"time_ms\": 1, \"key\": \"k\", \"value\": {\"a\\nb\": \"x\\u001b[31m\\\"\", \"n\": [1, true, null, word]}, "
      "\"metadata\": {}}\n",
      "f.txt");
  ASSERT_EQ(log.lines.size(), 1u) << (log.errors.empty() ? "" : log.errors[0]);
  EXPECT_EQ(json_text(log.lines[0].value), "{\"a\\nb\": \"x\\u001b[31m\\\"\", \"n\": [1, true, null, \"word\"]}");
}

TEST(MlLogReader, TheFileIsBounded) {
  const auto dir = std::filesystem::temp_directory_path() / "mllog_reader_test";
  std::filesystem::create_directories(dir);
  EXPECT_THROW(read_mllog(dir), LogError);
  const auto big = dir / "big.txt";
  std::ofstream(big) << kLine;
  std::filesystem::resize_file(big, kMaxLogBytes + 1);
  try {
    read_mllog(big);
    ADD_FAILURE() << "no error";
  } catch (const LogError& e) {
    EXPECT_EQ(std::string(e.what()), big.string() + ": 8388609 bytes, more than the 8388608 bytes allowed");
  }
}
