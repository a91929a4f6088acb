// The README's main job end to end: its own program, as the slow tier's (minutes on 2 cores).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli.hpp"

using namespace mlph::test;
namespace fs = std::filesystem;

// The README's main job: the mini config (closed-division hyperparameters, 32^3 generated data)
// trains to MAE <= 0.124, and the official checker accepts the log as it is.
TEST(Convergence, MiniConfigReachesTheTargetAndPassesTheChecker) {
  const fs::path data = fresh_dir("mini-data");
  const std::string config = "--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml ";
  const CliResult gen = run_cli(config + "--generate-data " + data.string());
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const fs::path out = fresh_dir("mini-out");
  const CliResult r = run_cli(config + "--seed 7 --data " + data.string() + " --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path log = out / "result_0.txt";
  EXPECT_NE(read_lines(log).back().find("\"status\": \"success\""), std::string::npos);
  const std::string checker = official_checker();
  if (checker.empty()) GTEST_SKIP() << "../shared/tools/mllog-check is not beside this checkout (a fresh clone)";
  const CliResult check = run_command("PATH=/usr/bin:$PATH " + checker + " " + log.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("SUCCESS"), std::string::npos) << check.output;
}
