// "A third workload needs no core change": mlperf-run drives the linear-regression test workload
// (tests/plugins/linreg_workload.cpp), which the core has never heard of, through a converging run,
// hyperparameter borrowing and a submission of the run count it states; the same workload built as
// ABI 1.2 still runs, with the 1.3 facts it lacks refused in one line or left at their old meaning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli.hpp"
#include "compliance.hpp"

using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

const std::string kPlugins = "--plugin-dir " MLPH_TEST_PLUGIN_DIR " ";

// 256 training and 30 validation samples: 30 is no multiple of the batch of 4.
fs::path generate(const std::string& workload) {
  const fs::path data = fresh_dir(workload + "-data");
  const CliResult r = run_cli(kPlugins + "--workload " + workload + " --generate-data " + data.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return data;
}

double number(const std::string& text) { return text.empty() ? -1.0 : std::stod(text); }

}  // namespace

TEST(ThirdWorkload, TrainsToItsTargetAndLogsWhatTheRulesCheck) {
  const fs::path data = generate("linreg");
  const fs::path out = fresh_dir("linreg-out");
  const CliResult r = run_cli(kPlugins + "--workload linreg --seed 3 --data " + data.string() + " --output " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path log = out / "result_0.txt";
  EXPECT_NE(read_lines(log).back().find("\"status\": \"success\""), std::string::npos);
  const auto values = mllog_values(log);
  EXPECT_EQ(values.at("submission_benchmark"), "\"linreg\"");
  // Per-sample eval outputs: all 30 validation samples count (the last batch padded), not the 28 of
  // whole batches.
  EXPECT_EQ(values.at("eval_samples"), "30");
  EXPECT_EQ(values.at("opt_base_learning_rate"), "0.1");
  // Under the target 0.05, near the generated noise's MAE (0.005): the fit is real.
  EXPECT_LT(number(values.at("eval_error")), 0.02);
  EXPECT_GT(number(values.at("eval_error")), 0.0);
  // Our MLPerf HPC compliance rules: everything but the benchmark itself, which the rules do not know.
  const auto verdict = mlph::submission::check_log(mlph::core::read_mllog(log), "3.0.0");
  ASSERT_FALSE(verdict.errors.empty());
  for (const std::string& e : verdict.errors)
    EXPECT_TRUE(e.find("submission_benchmark") != std::string::npos || e.find("closed_linreg.yaml") != std::string::npos)
        << e;
}

// The borrowed log sets the global batch and the rate; --runs 0 makes the 3 runs linreg asks for.
TEST(ThirdWorkload, BorrowsHyperparametersIntoASubmissionOfItsRunCount) {
  const fs::path data = generate("linreg");
  const fs::path dir = fresh_dir("linreg-borrow");
  std::ofstream(dir / "other.txt")
      << ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": "
         "\"submission_benchmark\", \"value\": \"linreg\", \"metadata\": {\"file\": \"x.py\", \"lineno\": 1}}\n"
         ":::MLLOG {\"namespace\": \"\", \"time_ms\": 2, \"event_type\": \"POINT_IN_TIME\", \"key\": "
         "\"global_batch_size\", \"value\": 8, \"metadata\": {\"file\": \"x.py\", \"lineno\": 2}}\n"
         ":::MLLOG {\"namespace\": \"\", \"time_ms\": 3, \"event_type\": \"POINT_IN_TIME\", \"key\": "
         "\"opt_base_learning_rate\", \"value\": 0.05, \"metadata\": {\"file\": \"x.py\", \"lineno\": 3}}\n"
         ":::MLLOG {\"namespace\": \"\", \"time_ms\": 4, \"event_type\": \"POINT_IN_TIME\", \"key\": "
         "\"eval_error\", \"value\": 0.01, \"metadata\": {\"file\": \"x.py\", \"lineno\": 4}}\n";
  const CliResult r = run_cli(kPlugins + "--workload linreg --data " + data.string() + " --borrow-hparams " +
                              (dir / "other.txt").string() + " --runs 0 --org acme --system box --seed 11 --output " +
                              (dir / "sub").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path results = dir / "sub" / "acme" / "results" / "box" / "strong" / "linreg";
  for (int i = 0; i < 3; ++i) {
    const auto values = mllog_values(results / ("result_" + std::to_string(i) + ".txt"));
    EXPECT_EQ(values.at("global_batch_size"), "8") << i;  // batch 8 on one rank
    EXPECT_EQ(values.at("opt_base_learning_rate"), "0.05") << i;
    EXPECT_EQ(values.at("seed"), std::to_string(11 + i));
  }
  EXPECT_FALSE(fs::exists(results / "result_3.txt"));
  EXPECT_TRUE(fs::exists(dir / "sub" / "acme" / "systems" / "box.json"));
}

TEST(ThirdWorkload, BorrowingErrorsNameTheLogKey) {
  const fs::path dir = fresh_dir("linreg-borrow-errors");
  const auto error_of = [&](const std::string& yaml) {
    std::ofstream(dir / "h.yaml") << yaml;
    const CliResult r = run_cli(kPlugins + "--workload linreg --borrow-hparams " + (dir / "h.yaml").string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    return r.output;
  };
  const std::string range = error_of("opt_base_learning_rate: -0.1\n");
  EXPECT_NE(range.find("opt_base_learning_rate = -0.1 (as optimizer.lr=-0.1)"), std::string::npos) << range;
  EXPECT_NE(range.find("the learning rate must be > 0"), std::string::npos) << range;
  EXPECT_NE(error_of("global_batch_size: 4.5\n").find("global_batch_size = 4.5: must be a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of("learning_rate: 0.1\n").find("'learning_rate' is not a linreg hyperparameter log key"),
            std::string::npos);
  EXPECT_NE(error_of("benchmark: cosmoflow\n").find("benchmark cosmoflow does not match this run's linreg"),
            std::string::npos);
}

// The same workload as an ABI 1.2 build: it still trains; its eval outputs count as summed (whole
// global batches, although it sets the 1.3 flag where 1.2 has padding); borrowing and the default
// run count, which it cannot state, are refused in one line.
TEST(OlderWorkload, Abi12WorkloadRunsWithoutTheNewFacts) {
  const fs::path data = generate("linreg-abi12");
  const fs::path out = fresh_dir("linreg-abi12-out");
  const std::string run = kPlugins + "--workload linreg-abi12 --seed 3 --data " + data.string() + " --output " + out.string();
  const CliResult r = run_cli(run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(mllog_values(out / "result_0.txt").at("eval_samples"), "28");
  std::ofstream(out / "h.yaml") << "opt_base_learning_rate: 0.05\n";
  const CliResult borrow = run_cli(run + " --borrow-hparams " + (out / "h.yaml").string());
  EXPECT_EQ(borrow.exit_code, 2);
  EXPECT_NE(borrow.output.find("workload linreg-abi12 (ABI 1.2) cannot borrow hyperparameters"), std::string::npos)
      << borrow.output;
  const CliResult runs = run_cli(run + " --runs 0");
  EXPECT_EQ(runs.exit_code, 2);
  EXPECT_NE(runs.output.find("does not say how many runs a submission needs; give --runs N"), std::string::npos)
      << runs.output;
}
