// The deepcam plug-in through mlperf-run: --generate-data, a one-epoch run on 16x16 weather with the
// reference backend (every DeepCAM log key), and the closed division refusing a changed target.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <set>

#include "../../integration/cli.hpp"

using namespace mlph::test;

TEST(DeepCamRun, GenerateDataThenOneEpochLogsTheReferenceKeys) {
  const auto dir = fresh_dir("deepcam-run");
  const std::string shape = " --set data.height=16 --set data.width=16";
  const CliResult generated = run_cli("--workload deepcam --generate-data " + (dir / "data").string() + shape +
                                      " --set data.synthetic.train=4 --set data.synthetic.valid=2");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  const CliResult run = run_cli("--workload deepcam --data " + (dir / "data").string() + shape +
                                " --set train.batch_size=2 --set train.epochs=1 --set backend.threads=2 --seed 3"
                                " --set scheduler.lr_warmup_steps=1 --output " + (dir / "out").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;  // one epoch does not reach IoU 0.82: aborted, not an error
  std::set<std::string> keys;
  for (const std::string& line : read_lines(dir / "out" / "result_0.txt")) keys.insert(mllog_key(line));
  for (const char* key : {"submission_benchmark", "global_batch_size", "batchnorm_group_size",
                          "gradient_accumulation_frequency", "opt_name", "opt_lr", "opt_betas", "opt_eps",
                          "opt_weight_decay", "opt_bias_correction", "opt_grad_averaging", "opt_max_grad_norm",
                          "scheduler_type", "scheduler_milestones", "scheduler_decay_rate", "scheduler_lr_warmup_steps",
                          "scheduler_lr_warmup_factor", "train_samples", "eval_samples", "eval_accuracy", "run_stop"})
    EXPECT_EQ(keys.count(key), 1u) << key;
}

// Gradient accumulation through the runner: 3 micro-batches per epoch in windows of 2, so a window
// spans the epoch boundary as in the reference (it counts micro-batches globally); the schedule
// advances once per update.
TEST(DeepCamRun, AccumulationDefersUpdatesAcrossEpochs) {
  const auto dir = fresh_dir("deepcam-accumulation");
  const std::string shape = " --set data.height=32 --set data.width=32";  // batch norm needs 2x2 at the deepest maps
  ASSERT_EQ(run_cli("--workload deepcam --generate-data " + (dir / "data").string() + shape +
                    " --set data.synthetic.train=3 --set data.synthetic.valid=1")
                .exit_code,
            0);
  const std::string trace = (dir / "trace.txt").string();
  const CliResult run = run_cli("--workload deepcam --plugin-dir " MLPH_TEST_PLUGIN_DIR " --backend tracing --set backend.trace=" +
                                trace + " --data " + (dir / "data").string() + shape +
                                " --set train.batch_size=1 --set train.epochs=2 --set train.gradient_accumulation_frequency=2"
                                " --set scheduler.lr_warmup_steps=3 --seed 3 --output " + (dir / "out").string());
  EXPECT_EQ(run.exit_code, 1) << run.output;  // two epochs do not reach the target
  std::ifstream in(trace);
  std::vector<std::array<double, 4>> steps;  // micro_step, step, apply_update, learning rate
  for (std::array<double, 4> s; in >> s[0] >> s[1] >> s[2] >> s[3];) steps.push_back(s);
  ASSERT_EQ(steps.size(), 6u) << run.output;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i][0], double(i));
    EXPECT_EQ(steps[i][1], double(i / 2)) << "the optimizer step counts updates";
    EXPECT_EQ(steps[i][2], i % 2 == 1 ? 1.0 : 0.0) << "the update ends each window of 2, across epochs";
  }
  EXPECT_EQ(steps[0][3], steps[1][3]) << "one learning rate per window";
  EXPECT_LT(steps[1][3], steps[2][3]) << "warm-up: the next update's rate is higher";
  EXPECT_EQ(mllog_values(dir / "out" / "result_0.txt")["gradient_accumulation_frequency"], "2");
}

// The reference evaluates every validation sample (eval_samples is checked against the real set's
// 15158): a partial last batch is padded with a copy of its last sample, left out of the mean. Two
// datasets share their training file; their 3 validation files hold samples a, a, b and a, b, a (in
// file-name order). Trained alike with batches of 2, the mean IoU must be the same, (2a + b) / 3;
// counting the padding would give (2a + 2b) / 4 and (3a + b) / 4.
TEST(DeepCamRun, EveryValidationSampleCountsOnceWhateverTheBatch) {
  namespace fs = std::filesystem;
  const auto dir = fresh_dir("deepcam-eval");
  const std::string shape = " --set data.height=32 --set data.width=32";
  ASSERT_EQ(run_cli("--workload deepcam --generate-data " + (dir / "data").string() + shape +
                    " --set data.synthetic.train=4 --set data.synthetic.valid=2")
                .exit_code,
            0);
  std::vector<fs::path> samples;
  for (const auto& e : fs::directory_iterator(dir / "data" / "validation")) samples.push_back(e.path());
  std::sort(samples.begin(), samples.end());
  ASSERT_EQ(samples.size(), 2u);
  std::vector<std::string> accuracies, counts;
  for (const std::vector<int>& layout : {std::vector<int>{0, 0, 1}, std::vector<int>{0, 1, 0}}) {
    const fs::path data = dir / ("layout" + std::to_string(layout[1]));
    fs::create_directories(data / "validation");
    fs::copy(dir / "data" / "train", data / "train");
    fs::copy_file(dir / "data" / "stats.h5", data / "stats.h5");
    for (size_t f = 0; f < layout.size(); ++f)
      fs::copy_file(samples[layout[f]], data / "validation" / ("data-" + std::to_string(f) + ".h5"));
    const CliResult r = run_cli("--workload deepcam --data " + data.string() + shape +
                                " --set train.epochs=1 --set train.batch_size=2 --set backend.threads=1 --seed 9"
                                " --output " + (data / "out").string());
    EXPECT_EQ(r.exit_code, 1) << r.output;  // not converged: a finished run
    std::map<std::string, std::string> values = mllog_values(data / "out" / "result_0.txt");
    counts.push_back(values["eval_samples"]);
    accuracies.push_back(values["eval_accuracy"]);
  }
  EXPECT_EQ(counts, (std::vector<std::string>{"3", "3"}));
  ASSERT_EQ(accuracies.size(), 2u);
  EXPECT_NEAR(std::stod(accuracies[0]), std::stod(accuracies[1]), 1e-6) << "the padded copy must not count";
}

TEST(DeepCamRun, AccumulationIsRefusedWithABackendOlderThanAbi12) {
  const CliResult r = run_cli("--workload deepcam --plugin-dir " MLPH_TEST_PLUGIN_DIR
                              " --backend abi11 --set train.gradient_accumulation_frequency=2 --data /nonexistent");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("backend abi11 (ABI 1.1) cannot accumulate gradients over 2 micro-batches"), std::string::npos)
      << r.output;
}

// NVIDIA's v3.0 log shares batch-norm statistics over pairs of ranks: borrowed on one rank, the run
// says why it cannot follow, naming the key.
TEST(DeepCamRun, BorrowingNvidiasHyperparametersNamesWhatItCannotRun) {
  const std::filesystem::path log = MLPH_SOURCE_DIR "/../shared/fixtures/mllog/nvidia_v3.0_deepcam_strong_result_0.txt";
  if (!std::filesystem::exists(log)) GTEST_SKIP() << log << " is not beside this checkout";
  const CliResult r = run_cli("--workload deepcam --borrow-hparams " + log.string() + " --data /nonexistent");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'train.batchnorm_group_size' = 2: must divide the 1 ranks of this run"), std::string::npos)
      << r.output;
}

TEST(DeepCamRun, ClosedDivisionFixesTheTargetAndEps) {
  const CliResult target = run_cli("--workload deepcam --set train.target_iou=0.5 --data /nonexistent");
  EXPECT_EQ(target.exit_code, 2);
  EXPECT_NE(target.output.find("'train.target_iou' = 0.5: not allowed in the closed division"), std::string::npos)
      << target.output;
  const CliResult eps = run_cli("--workload deepcam --set optimizer.eps=1e-8 --data /nonexistent");
  EXPECT_EQ(eps.exit_code, 2);
  EXPECT_NE(eps.output.find("opt_eps is fixed at 1e-6"), std::string::npos) << eps.output;
}

// Issue 16 #3 and #8: stats.h5 as a FIFO hung the run; as /dev/zero it read until memory ran out; as
// a directory it failed with a library message naming nothing. Each is now one line naming it.
TEST(DeepCamRun, AStatsFileThatIsNoRegularFileIsNamedWithoutHanging) {
  namespace fs = std::filesystem;
  const auto dir = fresh_dir("deepcam-bad-stats");
  const std::string shape = " --set data.height=16 --set data.width=16";
  ASSERT_EQ(run_cli("--workload deepcam --generate-data " + (dir / "data").string() + shape +
                    " --set data.synthetic.train=2 --set data.synthetic.valid=1")
                .exit_code,
            0);
  const fs::path stats = dir / "data" / "stats.h5";
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"a FIFO", [&] { ASSERT_EQ(::mkfifo(stats.c_str(), 0600), 0); }},
      {"a character device", [&] { fs::create_symlink("/dev/zero", stats); }},
      {"a directory", [&] { fs::create_directory(stats); }}};
  for (const auto& [kind, make] : cases) {
    fs::remove_all(stats);
    make();
    const CliResult r = run_command("timeout 60 " MLPH_BINARY_DIR "/bin/mlperf-run --workload deepcam --data " +
                                    (dir / "data").string() + shape + " --set train.epochs=1 --output " +
                                    (dir / "out").string());
    EXPECT_NE(r.exit_code, 124) << kind << ": still hangs after 60 s";
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(stats.string() + ": is " + kind + ", not a regular file"), std::string::npos) << r.output;
  }
}
