// mlperf-score reading logs a hostile user wrote (issue 28): a time to train that is NaN, infinite or
// negative (run_stop before run_start, a time_ms given twice) is no compliant run, and a scaling factor
// must be a positive finite number; each would otherwise make the score NaN or better than the truth.
// And the official tools' scratch directories go when they are done.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "scoring.hpp"
#include "tree.hpp"

using namespace mlph;
using namespace mlph::submission;
namespace fs = std::filesystem;

namespace {

fs::path strong_dir(const fs::path& org) { return org / "results" / "test-system" / "strong" / "cosmoflow"; }

// Ten runs of 10..19 minutes into `dir`.
void write_ten_runs(const fs::path& dir) {
  for (int i = 0; i < 10; ++i) {
    test::FakeRun r;
    r.seed = 1000 + i;
    r.start_ms = 1.7e12 + 3.6e6 * i;
    r.minutes = 10 + i;
    test::write_log(dir / fmt::format("result_{}.txt", i), r);
  }
}

// `log` with the time_ms of its `key` line replaced by `time` (JSON text, or a whole "time_ms" member list).
void set_time(const fs::path& log, const std::string& key, const std::string& time) {
  std::ifstream in(log);
  std::string text, line;
  while (std::getline(in, line)) {
    if (line.find("\"key\": \"" + key + "\"") != std::string::npos) {
      const size_t at = line.find("\"time_ms\": ") + 11;
      line.replace(at, line.find(',', at) - at, time);
    }
    text += line + "\n";
  }
  std::ofstream(log, std::ios::trunc) << text;
}

bool mentions(const std::vector<std::string>& messages, const std::string& text) {
  return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) { return m.find(text) != std::string::npos; });
}

}  // namespace

// Defect 8: run 0 is the fastest by a forged time; whatever the forgery it is not compliant and takes
// the slowest slot, so the score stays the mean of runs 2..9's minutes (12..19: 15.5).
TEST(ScoreInput, ATimeToTrainThatIsNoSpanForwardIsNotCompliant) {
  const std::vector<std::pair<std::string, std::string>> forgeries = {
      {"run_stop", "NaN"},                        // Python's json reads it; the score would be NaN
      {"run_stop", "Infinity"},
      {"run_stop", "-Infinity"},
      {"run_stop", "1699999999000"},              // before run_start: a negative time to train
      {"run_start", "1e300"},
      {"run_stop", "1699999999000, \"time_ms\": 1700000060000"},  // given twice: Python's json takes the last
  };
  for (const auto& [key, time] : forgeries) {
    const fs::path org = test::fresh_tree("score-forged");
    write_ten_runs(strong_dir(org));
    set_time(strong_dir(org) / "result_0.txt", key, time);
    const BenchmarkResult b = score_directory(strong_dir(org), "strong", "cosmoflow", "3.0.0", true, 10);
    EXPECT_FALSE(b.runs[0].counts()) << key << " " << time;
    EXPECT_FALSE(b.runs[0].verdict.valid);
    ASSERT_TRUE(b.score) << key << " " << time;
    EXPECT_DOUBLE_EQ(*b.score, 15.5) << key << " " << time;
  }
  const fs::path org = test::fresh_tree("score-forged");
  write_ten_runs(strong_dir(org));
  set_time(strong_dir(org) / "result_0.txt", "run_stop", "1699999999000");
  const RunResult r = read_run(strong_dir(org) / "result_0.txt", "3.0.0");
  EXPECT_TRUE(mentions(r.verdict.errors, "run_stop at time_ms 1699999999000 is no time after run_start's 1700000000000"))
      << testing::PrintToString(r.verdict.errors);
  set_time(strong_dir(org) / "result_0.txt", "run_stop", "NaN");
  EXPECT_TRUE(mentions(read_run(strong_dir(org) / "result_0.txt", "3.0.0").verdict.errors, "time_ms is not a finite number"));
  set_time(strong_dir(org) / "result_0.txt", "run_stop", "1, \"time_ms\": 2");
  EXPECT_TRUE(mentions(read_run(strong_dir(org) / "result_0.txt", "3.0.0").verdict.errors,
                       "the key \"time_ms\" is given twice"));
}

TEST(ScoreInput, AScalingFactorIsAPositiveFiniteNumber) {
  for (const std::string factor : {"-1", "0", "NaN", "Infinity", "\"2\"", "[2]"}) {
    const fs::path org = test::fresh_tree("score-scaling");
    write_ten_runs(strong_dir(org));
    std::ofstream(strong_dir(org) / "scaling.json") << "{\"scaling_factor\": " << factor << "}\n";
    const BenchmarkResult b = score_directory(strong_dir(org), "strong", "cosmoflow", "3.0.0", true, 10);
    EXPECT_TRUE(mentions(b.errors, "scaling.json: \"scaling_factor\"")) << factor;
    EXPECT_DOUBLE_EQ(b.scaling_factor, 1.0) << factor;
  }
  const fs::path org = test::fresh_tree("score-scaling");
  write_ten_runs(strong_dir(org));
  std::ofstream(strong_dir(org) / "scaling.json") << "{\"scaling_factor\": 1.5}\n";
  const BenchmarkResult b = score_directory(strong_dir(org), "strong", "cosmoflow", "3.0.0", true, 10);
  EXPECT_TRUE(b.errors.empty()) << b.errors.front();
  ASSERT_TRUE(b.score);
  EXPECT_DOUBLE_EQ(*b.score, 14.5 * 1.5) << "the control";
}

// Defect 16: every mlperf-score call left a tmp.* directory in TMPDIR (the official tools' scratch).
TEST(ScoreInput, TheOfficialToolsScratchDirectoriesGo) {
  const fs::path tmp = test::fresh_tree("score-tmpdir");
  const fs::path org = test::fresh_tree("score-tmpdir-org");
  write_ten_runs(strong_dir(org));
  const std::string command = "TMPDIR=" + tmp.string() + " " MLPH_BINARY_DIR "/bin/mlperf-score check " +
                              (strong_dir(org) / "result_1.txt").string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status)) << output;
  EXPECT_NE(output.find("official mlperf_logging"), std::string::npos) << output;  // the tools were looked for
  EXPECT_TRUE(fs::is_empty(tmp)) << fs::directory_iterator(tmp)->path();
}
