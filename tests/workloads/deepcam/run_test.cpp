// The deepcam plug-in through mlperf-run: --generate-data, a one-epoch run on 16x16 weather with the
// reference backend (every DeepCAM log key), and the closed division refusing a changed target.
#include <gtest/gtest.h>

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

TEST(DeepCamRun, ClosedDivisionFixesTheTargetAndEps) {
  const CliResult target = run_cli("--workload deepcam --set train.target_iou=0.5 --data /nonexistent");
  EXPECT_EQ(target.exit_code, 2);
  EXPECT_NE(target.output.find("'train.target_iou' = 0.5: not allowed in the closed division"), std::string::npos)
      << target.output;
  const CliResult eps = run_cli("--workload deepcam --set optimizer.eps=1e-8 --data /nonexistent");
  EXPECT_EQ(eps.exit_code, 2);
  EXPECT_NE(eps.output.find("opt_eps is fixed at 1e-6"), std::string::npos) << eps.output;
}
