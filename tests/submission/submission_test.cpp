// Scoring, checking and hyperparameter borrowing on hand-built trees (numbers worked out by hand
// in the comments), one tree compared byte for byte with the official result summarizer, and
// mlperf-run --runs 3 end to end.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

#include "mlph/core/borrow.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/test/tiny_run.hpp"
#include "report.hpp"
#include "scoring.hpp"
#include "tree.hpp"

using namespace mlph;
using namespace mlph::submission;
using mlph::test::FakeRun;
namespace fs = std::filesystem;

namespace {

const fs::path kShared = fs::path(MLPH_SOURCE_DIR) / ".." / "shared";

fs::path strong_dir(const fs::path& org) { return org / "results" / "test-system" / "strong" / "cosmoflow"; }
fs::path weak_dir(const fs::path& org) { return org / "results" / "test-system" / "weak" / "cosmoflow"; }

// Ten runs; run i takes minutes[i].
void write_runs(const fs::path& dir, const std::vector<double>& minutes, const std::vector<int>& not_converged = {}) {
  for (size_t i = 0; i < minutes.size(); ++i) {
    FakeRun r;
    r.seed = 1000 + static_cast<long long>(i);
    r.start_ms = 1.7e12 + 3.6e6 * static_cast<double>(i);
    r.minutes = minutes[i];
    r.converged = std::find(not_converged.begin(), not_converged.end(), static_cast<int>(i)) == not_converged.end();
    test::write_log(dir / fmt::format("result_{}.txt", i), r);
  }
}

BenchmarkResult score_strong(const fs::path& dir) { return score_directory(dir, "strong", "cosmoflow", "3.0.0", true, 10); }

bool mentions(const std::vector<std::string>& messages, const std::string& a, const std::string& b = "") {
  return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) {
    return m.find(a) != std::string::npos && m.find(b) != std::string::npos;
  });
}

struct Cli {
  int code = -1;
  std::string output;
};
Cli run(const std::string& command) {
  Cli r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer{};
  while (pipe && fgets(buffer.data(), buffer.size(), pipe)) r.output += buffer.data();
  const int status = pipe ? pclose(pipe) : -1;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

TEST(Olympic, DropsFastestAndSlowest) {
  EXPECT_DOUBLE_EQ(*olympic_mean({12, 10, 15, 11, 19, 13, 14, 16, 18, 17}, 0), 14.5);  // mean of 11..18
  // one dropped run took the slowest slot: drop only the fastest of the 9 kept (10), mean of 11..18
  EXPECT_DOUBLE_EQ(*olympic_mean({10, 11, 12, 13, 14, 15, 16, 17, 18}, 1), 14.5);
  EXPECT_FALSE(olympic_mean({10, 11, 12, 13, 14, 15, 16, 17}, 2));
}

TEST(Strong, TenRunsScoreIsTheOlympicMean) {
  const fs::path org = test::fresh_tree("strong10");
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17});
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_TRUE(b.errors.empty()) << b.errors.front();
  ASSERT_TRUE(b.score);
  EXPECT_DOUBLE_EQ(*b.score, 14.5);
  EXPECT_DOUBLE_EQ(b.runs[4].minutes, 19.0);
  EXPECT_EQ(b.runs[0].epochs_to_converge, 3);
}

TEST(Strong, OneNonConvergedRunTakesTheSlowestSlot) {
  const fs::path org = test::fresh_tree("strong-one-nc");
  // run 3 (1 minute, the fastest!) does not converge: it is dropped and counts as the slowest.
  write_runs(strong_dir(org), {12, 10, 15, 1, 11, 13, 14, 16, 18, 17}, {3});
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_TRUE(b.errors.empty());
  EXPECT_TRUE(mentions(b.notices, "result_3.txt", "slowest slot"));
  EXPECT_FALSE(b.runs[3].verdict.valid);
  EXPECT_TRUE(mentions(b.runs[3].verdict.errors, "eval_error", "quality target"));
  ASSERT_TRUE(b.score);
  EXPECT_DOUBLE_EQ(*b.score, (11 + 12 + 13 + 14 + 15 + 16 + 17 + 18) / 8.0);  // 10 dropped as fastest
}

TEST(Strong, TwoNonConvergedRunsAreAnError) {
  const fs::path org = test::fresh_tree("strong-two-nc");
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17}, {2, 7});
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_FALSE(b.score);
  EXPECT_TRUE(mentions(b.errors, "2 files do not comply", "result_2.txt, result_7.txt"));
}

TEST(Strong, TwoRunsWithoutSuccessStatusAreAnError) {
  const fs::path org = test::fresh_tree("strong-status");
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17});
  for (int i : {2, 7}) {  // compliant values, but run_stop says aborted: the RCP checker counts them as not converged
    FakeRun r;
    r.seed = 500 + i, r.status = "aborted";
    test::write_log(strong_dir(org) / fmt::format("result_{}.txt", i), r);
  }
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_TRUE(mentions(b.errors, "2 runs do not end in run_stop status success", "result_2.txt, result_7.txt"));
  EXPECT_TRUE(b.score);  // the summarizer still scores: it reads only the compliance verdicts
}

TEST(Strong, MissingRunIsAnErrorScoredAsTheSummarizerDoes) {
  const fs::path org = test::fresh_tree("strong-missing");
  write_runs(strong_dir(org), {12, 10, 15, 11, 13, 14, 16, 18, 17});
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_TRUE(mentions(b.errors, "9 result_*.txt files", "exactly 10"));
  ASSERT_TRUE(b.score);  // the summarizer still averages scores[1:8] of the 9: 11..17
  EXPECT_DOUBLE_EQ(*b.score, 14.0);
}

TEST(Strong, ExtraRunIsAnError) {
  const fs::path org = test::fresh_tree("strong-extra");
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17, 20});
  EXPECT_TRUE(mentions(score_strong(strong_dir(org)).errors, "11 result_*.txt files", "exactly 10"));
}

TEST(Strong, DuplicateSeedsAreAnErrorNamingBothFiles) {
  const fs::path org = test::fresh_tree("strong-seeds");
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17});
  FakeRun copy;
  copy.seed = 1002;  // the seed of result_2.txt
  test::write_log(strong_dir(org) / "result_8.txt", copy);
  const BenchmarkResult b = score_strong(strong_dir(org));
  EXPECT_TRUE(mentions(b.errors, "result_8.txt: seed 1002", "already logged by result_2.txt"));
}

TEST(Check, MissingKeyNamesFileKeyAndRule) {
  const fs::path org = test::fresh_tree("missing-key");
  FakeRun r;
  r.skip_key = "opt_name";
  const fs::path log = strong_dir(org) / "result_0.txt";
  test::write_log(log, r);
  const Verdict v = check_log(core::read_mllog(log), "3.0.0");
  EXPECT_FALSE(v.valid);
  EXPECT_TRUE(mentions(v.errors, "result_0.txt: required EXACTLY_ONE occurrence of 'opt_name' but found 0",
                       "hpc_3.0.0/closed_cosmoflow.yaml"));
  EXPECT_EQ(v.errors.size(), 1u);
  // The same log fails the official checker too (same rule).
  const OfficialTools tools = find_official_tools((kShared / "third_party" / "mlperf-logging").string());
  if (!tools.available) GTEST_SKIP() << "official mlperf_logging not available: " << tools.why;
  const OfficialResult official = run_compliance_checker(tools, log, "3.0.0");
  EXPECT_FALSE(official.passed);
  EXPECT_NE(official.output.find("Required EXACTLY_ONE occurrence of 'opt_name' but found 0"), std::string::npos);
}

TEST(Check, StagingBeforeRunStartBreaksOnlyTheOlderRulesets) {
  const fs::path dir = test::fresh_tree("staging");
  test::write_log(dir / "result_0.txt", FakeRun{});
  std::vector<std::string> lines;
  {
    std::ifstream in(dir / "result_0.txt");
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  std::ofstream out(dir / "staged.txt");
  for (const std::string& l : lines) {
    if (l.find("\"init_stop\"") != std::string::npos) {  // staging inside init, before run_start
      out << ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"INTERVAL_START\", \"key\": \"staging_start\", \"value\": null, \"metadata\": {\"file\": \"x\", \"lineno\": 1}}\n";
      out << ":::MLLOG {\"namespace\": \"\", \"time_ms\": 2, \"event_type\": \"INTERVAL_END\", \"key\": \"staging_stop\", \"value\": null, \"metadata\": {\"file\": \"x\", \"lineno\": 2}}\n";
    }
    out << l << "\n";
  }
  out.close();
  const core::ParsedLog log = core::read_mllog(dir / "staged.txt");
  EXPECT_TRUE(check_log(log, "3.0.0").valid);
  const Verdict v2 = check_log(log, "2.0.0");
  EXPECT_FALSE(v2.valid);
  EXPECT_TRUE(mentions(v2.errors, "staging_start: failed check: s['run_started']", "hpc_2.0.0/common.yaml"));
}

// mlperf-run --resume logs mlph_resumed_from: such a run's clock covers only part of the training.
TEST(Check, AResumedRunIsNoTimedResult) {
  const fs::path dir = test::fresh_tree("resumed");
  test::write_log(dir / "result_0.txt", FakeRun{});
  EXPECT_TRUE(check_log(core::read_mllog(dir / "result_0.txt"), "3.0.0").valid);
  std::ofstream(dir / "result_0.txt", std::ios::app)
      << ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": "
         "\"mlph_resumed_from\", \"value\": {\"epochs_done\": 3}, \"metadata\": {\"file\": \"x\", \"lineno\": 1}}\n";
  const Verdict v = check_log(core::read_mllog(dir / "result_0.txt"), "3.0.0");
  EXPECT_FALSE(v.valid);
  EXPECT_TRUE(mentions(v.errors, "mlph_resumed_from: a run resumed from a checkpoint is not a timed MLPerf result"));
  EXPECT_EQ(v.errors.size(), 1u);
}

TEST(Weak, ThroughputIsFirstStartToLastStop) {
  const fs::path org = test::fresh_tree("weak");
  // instances start 0..9 h apart (3.6e6 ms each), run i takes 10+i minutes: last stop 9 h + 19 min
  write_runs(weak_dir(org), {10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  const BenchmarkResult b = score_directory(weak_dir(org), "weak", "cosmoflow", "3.0.0", true, 10);
  EXPECT_TRUE(b.errors.empty());
  ASSERT_TRUE(b.score);
  EXPECT_DOUBLE_EQ(*b.score, 9 * 60 + 19.0);
  EXPECT_EQ(b.models, 10);
  EXPECT_EQ(b.instance_scale, 1);
}

TEST(Weak, InconsistentInstanceScaleIsAnErrorNamingTheFile) {
  const fs::path org = test::fresh_tree("weak-scale");
  write_runs(weak_dir(org), {10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  FakeRun bigger;
  bigger.seed = 77;
  bigger.nodes = 2, bigger.accelerators_per_node = 4;  // instance scale 8, the others 1
  test::write_log(weak_dir(org) / "result_10.txt", bigger);
  const BenchmarkResult b = score_directory(weak_dir(org), "weak", "cosmoflow", "3.0.0", true, 10);
  EXPECT_FALSE(b.score);
  EXPECT_TRUE(mentions(b.errors, "result_10.txt: instance scale 8 differs from 1", "same for every weak-scaling model"));
}

// The tree: strong (one non-converged run) and weak results; our CSV must equal the summarizer's.
TEST(Official, ResultSummarizerCsvIsIdentical) {
  const fs::path org = test::fresh_tree("official") / "test-org";
  write_runs(strong_dir(org), {12.25, 10.5, 15.125, 11, 19, 13.3, 14.7, 16.1, 18, 17}, {4});
  write_runs(weak_dir(org), {10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  test::write_system_json(org, "test-system");
  const Submission sub = score_submission(org, "3.0.0");
  const std::string ours = summary_csv(sub);
  // by hand: kept 10.5 11 12.25 13.3 14.7 15.125 16.1 17 18, drop 10.5 -> mean of the other 8
  EXPECT_NE(ours.find(fmt::format(",{},", sdk::json_number((11 + 12.25 + 13.3 + 14.7 + 15.125 + 16.1 + 17 + 18) / 8))),
            std::string::npos) << ours;
  EXPECT_NE(ours.find(",10.0,1.0,559.0,"), std::string::npos) << ours;  // 10 models, scale 1, 9 h 19 min
  const OfficialTools tools = find_official_tools((kShared / "third_party" / "mlperf-logging").string());
  if (!tools.available) GTEST_SKIP() << "the official summarizer is not available: " << tools.why;
  const fs::path csv = org.parent_path() / "official.csv";
  const OfficialResult official = run_result_summarizer(tools, org, "3.0.0", csv);
  ASSERT_TRUE(official.passed) << official.output;
  std::ifstream in(csv);
  const std::string theirs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(ours, theirs) << official.output;
}

// What mlperf-score reads is someone's file: a system description with YAML aliases (a "billion
// laughs" when walked) is refused naming it; counts too large for their type are no counts, not casts.
TEST(Untrusted, SystemDescriptionAliasesAndHugeCounts) {
  const fs::path org = test::fresh_tree("untrusted") / "test-org";
  write_runs(strong_dir(org), {12, 10, 15, 11, 19, 13, 14, 16, 18, 17});
  test::write_system_json(org, "test-system");
  const fs::path json = org / "systems" / "test-system.json";
  std::ofstream(json, std::ios::app) << "# x: &a [1]\n";
  EXPECT_TRUE(score_submission(org, "3.0.0").systems[0].errors.empty());  // a comment is no anchor
  std::ofstream(json, std::ios::trunc) << "{\"a\": &a [1, 1, 1], \"b\": [*a, *a, *a]}\n";
  const Submission bomb = score_submission(org, "3.0.0");
  ASSERT_EQ(bomb.systems.size(), 1u);
  ASSERT_FALSE(bomb.systems[0].errors.empty());
  EXPECT_EQ(bomb.systems[0].errors[0],
            json.string() + ":1: YAML anchors and aliases are not accepted (an alias can expand without bound)");
  // 2^40 nodes of 2^40 processors: their product does not fit 64 bits, and the column stays empty.
  test::write_system_json(org, "test-system");
  std::string text;
  std::ifstream in(json);
  for (std::string line; std::getline(in, line); text += line + "\n")
    for (const char* field : {"number_of_nodes", "host_processors_per_node"})
      if (line.find(field) != std::string::npos) line = fmt::format("  \"{}\": \"1099511627776\",", field);
  in.close();
  std::ofstream(json, std::ios::trunc) << text;
  const std::string csv = summary_csv(score_submission(org, "3.0.0"));
  EXPECT_NE(csv.find(",1099511627776,\"Test CPU, 2.0 GHz\",,"), std::string::npos) << csv;
}

namespace {
core::LoadedPlugin load_workload(const std::string& workload = "cosmoflow") {
  return core::PluginLoader({MLPH_PLUGIN_DIR}).load(MLPH_KIND_WORKLOAD, workload);
}
// The overrides `source` gives a closed run of `ranks` ranks.
std::vector<std::string> borrowed(const fs::path& source, const core::LoadedPlugin& workload, long long ranks) {
  return core::map_hparams(core::read_hparams(source, workload), workload, true, ranks, source.string());
}
}  // namespace

TEST(Borrow, FromTheNvidiaV3CosmoflowLog) {
  const fs::path log = kShared / "fixtures" / "mllog" / "nvidia_v3.0_cosmoflow_strong_result_0.txt";
  if (!fs::exists(log)) GTEST_SKIP() << log << " is not beside this checkout";
  const core::LoadedPlugin plugin = load_workload();
  const auto sets = borrowed(log, plugin, 4);
  // GBS 512 over 4 ranks; peak 0.024 with warm-up factor 4: base 0.006 over a base batch of 512/4
  const std::vector<std::string> expected = {
      "train.batch_size=128", "optimizer.base_lr=0.006", "optimizer.base_batch_size=128", "optimizer.scaling=linear",
      "optimizer.warmup_epochs=6", "optimizer.decay_boundaries=[20, 22, 23, 24]",
      "optimizer.decay_factors=[0.5, 0.25, 0.125, 0.0625]", "model.dropout=0.0", "optimizer.weight_decay=0.02"};
  EXPECT_EQ(sets, expected);
  EXPECT_THROW(borrowed(log, plugin, 3), core::BorrowError);  // 512 does not split over 3 ranks
}

TEST(Borrow, FromTheNvidiaV3DeepcamLog) {
  const fs::path log = kShared / "fixtures" / "mllog" / "nvidia_v3.0_deepcam_strong_result_0.txt";
  if (!fs::exists(log)) GTEST_SKIP() << log << " is not beside this checkout";
  if (!fs::exists(fs::path(MLPH_PLUGIN_DIR) / "libmlph-workload-deepcam.so")) GTEST_SKIP() << "deepcam not built (HDF5)";
  const core::LoadedPlugin plugin = load_workload("deepcam");
  const auto sets = borrowed(log, plugin, 512);
  // GBS 2048 over 512 ranks; LAMB, lr 0.0055 as float32 printed in double; multistep [800] after 400 warm-up steps.
  const std::vector<std::string> expected = {
      "train.batch_size=4", "train.batchnorm_group_size=2", "train.gradient_accumulation_frequency=1",
      "optimizer.name=LAMB", "optimizer.lr=0.005499999970197678", "optimizer.betas=[0.9, 0.999]",
      "optimizer.eps=1e-06", "optimizer.weight_decay=0.01", "optimizer.max_grad_norm=1.0",
      "scheduler.type=multistep", "scheduler.milestones=[800]", "scheduler.decay_rate=0.1",
      "scheduler.lr_warmup_steps=400", "scheduler.lr_warmup_factor=1.0"};
  EXPECT_EQ(sets, expected);
  const fs::path dir = test::fresh_tree("borrow-deepcam");
  const auto error_of = [&](const std::string& yaml) {
    std::ofstream(dir / "h.yaml") << yaml;
    try {
      core::map_hparams(core::read_hparams(dir / "h.yaml", plugin), plugin, true, 1, "h.yaml");
    } catch (const core::BorrowError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("opt_eps: 1.0e-8\n").find("opt_eps is fixed at 1e-6"), std::string::npos) << error_of("opt_eps: 1.0e-8\n");
  EXPECT_NE(error_of("opt_name: 3\n").find("opt_name = 3: must be a string"), std::string::npos) << error_of("opt_name: 3\n");
  EXPECT_NE(error_of("gradient_accumulation_frequency: 0\n").find("must be >= 1"), std::string::npos);
}

TEST(Borrow, FromYamlAndClosedRuleViolationsNameTheKey) {
  const core::LoadedPlugin plugin = load_workload();
  const fs::path dir = test::fresh_tree("borrow");
  const auto borrow = [&](const std::string& yaml) {
    std::ofstream(dir / "h.yaml") << yaml;
    return borrowed(dir / "h.yaml", plugin, 1);
  };
  const auto sets = borrow("global_batch_size: 8\nopt_base_learning_rate: 0.008\nopt_learning_rate_warmup_factor: 2\n"
                           "opt_learning_rate_decay_boundary_epochs: [3]\nopt_learning_rate_decay_factor: 0.5\ndropout: 0.1\n");
  const std::vector<std::string> expected = {"train.batch_size=8", "optimizer.base_lr=0.004", "optimizer.base_batch_size=4",
                                             "optimizer.scaling=linear", "optimizer.decay_boundaries=[3]",
                                             "optimizer.decay_factors=[0.5]", "model.dropout=0.1"};
  EXPECT_EQ(sets, expected);
  const auto error_of = [&](const std::string& yaml) {
    try {
      borrow(yaml);
    } catch (const core::BorrowError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("dropout: 1.5\n").find("dropout = 1.5"), std::string::npos) << error_of("dropout: 1.5\n");
  EXPECT_NE(error_of("dropout: 1.5\n").find("[0, 1)"), std::string::npos);
  EXPECT_NE(error_of("opt_name: adam\n").find("opt_name = \"adam\": MLPerf HPC rules"), std::string::npos);
  EXPECT_NE(error_of("sgd_opt_momentum: 0.8\n").find("sgd_opt_momentum = 0.8"), std::string::npos);
  EXPECT_NE(error_of("opt_learning_rate_decay_factor: 1.5\n").find("opt_learning_rate_decay_factor"), std::string::npos);
  EXPECT_NE(error_of("learning_rate: 0.1\n").find("'learning_rate' is not a cosmoflow hyperparameter"), std::string::npos);
  EXPECT_NE(error_of("opt_learning_rate_decay_boundary_epochs: [4, 8]\nopt_learning_rate_decay_factor: 0.25\n")
                .find("one factor for 2 boundaries"),
            std::string::npos);
}

// mlperf-run --runs 3 on a tiny config (1 epoch of 8 samples, a generous target in the open
// division, so every run stops with "success"): the tree, distinct seeds, the system description,
// then mlperf-score on it. The checker still holds the logs to the MLPerf target (MAE <= 0.124),
// which one epoch cannot reach: that must be the only rule they break.
TEST(EndToEnd, ThreeRunsMakeAScorableTree) {
  const fs::path root = test::fresh_tree("e2e");
  const std::string run_bin = MLPH_BINARY_DIR "/bin/mlperf-run", score_bin = MLPH_BINARY_DIR "/bin/mlperf-score";
  const std::string tiny =
      test::tiny_cosmoflow(4) + "--set train.epochs=1 --set optimizer.warmup_epochs=0 --set train.target_mae=10 ";
  const Cli gen = run(run_bin + " " + tiny + test::generate_data(8, 4, root / "data"));
  ASSERT_EQ(gen.code, 0) << gen.output;
  const Cli c = run(run_bin + " " + tiny + "--data " + (root / "data").string() + " --runs 3 --org acme --system box1 " +
                    "--seed 41 --output " + (root / "out").string());
  ASSERT_EQ(c.code, 0) << c.output;
  const fs::path org = root / "out" / "acme";
  const fs::path dir = org / "results" / "box1" / "strong" / "cosmoflow";
  for (int i = 0; i < 3; ++i) {
    const RunResult r = read_run(dir / fmt::format("result_{}.txt", i), "3.0.0");
    ASSERT_EQ(r.verdict.errors.size(), 1u);
    EXPECT_NE(r.verdict.errors[0].find("eval_error: no value passes"), std::string::npos) << r.verdict.errors[0];
    EXPECT_EQ(r.seed.value_or(0), 41 + i);
    EXPECT_EQ(r.status, "success");
  }
  EXPECT_TRUE(fs::exists(org / "systems" / "box1.json"));
  EXPECT_TRUE(fs::exists(org / "benchmarks" / "cosmoflow" / "implementations" / "mlperf-hpc" / "README.md"));
  const Submission sub = score_submission(org, "3.0.0");
  ASSERT_EQ(sub.systems.size(), 1u);
  EXPECT_TRUE(sub.systems[0].errors.empty()) << sub.systems[0].errors.front();
  EXPECT_EQ(sub.systems[0].desc.at("submitter"), "acme");
  const Cli scored = run(score_bin + " score " + org.string());
  EXPECT_EQ(scored.code, 1) << scored.output;  // 3 runs, the rules want 10
  EXPECT_NE(scored.output.find("3 result_*.txt files, a strong-scaling cosmoflow result needs exactly 10"), std::string::npos)
      << scored.output;
  EXPECT_NE(scored.output.find("3 files do not comply"), std::string::npos) << scored.output;
  const Cli report = run(score_bin + " report " + org.string() + " --out " + (root / "report").string());
  EXPECT_EQ(report.code, 0) << report.output;
  EXPECT_TRUE(fs::exists(root / "report" / "summary.md"));
}

// --runs 3 --slurm writes the campaign as one job array instead of running it: the tree's
// implementation notes, no result yet, and a script (bash syntax checked) whose task i runs run i
// with its seed and log name through srun, then describes the system from its log. Run outside
// sbatch it refuses in one line. (tests/slurm submits one to a real Slurm.)
TEST(EndToEnd, SlurmWritesTheCampaignAsOneJobArray) {
  const fs::path root = test::fresh_tree("slurm-array");
  const std::string run_bin = MLPH_BINARY_DIR "/bin/mlperf-run";
  const Cli c = run(run_bin + " --workload cosmoflow --division open --comms mpi --data /data/cosmo --runs 3 --slurm "
                              "--org acme --system box1 --seed 41 --output " + (root / "out").string());
  ASSERT_EQ(c.code, 0) << c.output;
  const fs::path script = root / "out" / "slurm" / "box1-cosmoflow.sbatch";
  ASSERT_TRUE(fs::exists(script)) << c.output;
  EXPECT_NE(c.output.find("sbatch [options for one run] " + script.string()), std::string::npos) << c.output;
  std::ifstream in(script);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const std::string& line : std::vector<std::string>{"#SBATCH --array=0-2\n", "seeds=(41 42 43)\n",
                                 "srun --mpi=pmix --kill-on-bad-exit=1 ${MLPERF_SRUN_ARGS:---cpu-bind=cores} " + run_bin + " --workload cosmoflow --comms mpi "
                                 "--data /data/cosmo --division open --set 'mlperf.org=acme' --set 'mlperf.platform=box1' "
                                 "--seed \"${seeds[$i]}\" --output ",
                                 "--log-name \"result_$i.txt\"\n", " --describe-system "})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_EQ(run("bash -n " + script.string()).code, 0);
  const fs::path org = root / "out" / "acme";
  EXPECT_TRUE(fs::exists(org / "benchmarks" / "cosmoflow" / "implementations" / "mlperf-hpc" / "README.md"));
  EXPECT_TRUE(fs::is_empty(org / "results" / "box1" / "strong" / "cosmoflow"));
  const Cli outside = run("env -u SLURM_ARRAY_TASK_ID bash " + script.string());
  EXPECT_NE(outside.code, 0);
  EXPECT_NE(outside.output.find("run this script with sbatch: it is a job array"), std::string::npos) << outside.output;
  const Cli weak = run(run_bin + " --workload cosmoflow --runs 3 --slurm --weak --output " + (root / "weak").string());
  EXPECT_EQ(weak.code, 2) << weak.output;
  EXPECT_NE(weak.output.find("--weak --slurm: a throughput campaign runs its instances at once"), std::string::npos)
      << weak.output;
}

// Issue 36, defect 2: an org or system name that is not a plain name (a newline would become a command
// of the job, '/' and '..' put the tree and the script outside --output) is refused before anything
// is written, from --system, --org or a config's mlperf.platform; every value the script holds is
// quoted, so a path with quotes, blanks and $(...) stays one word. Defect 10: --runs is bounded.
TEST(EndToEnd, SlurmRefusesNamesThatAreNotPlainAndQuotesEveryValue) {
  const fs::path root = test::fresh_tree("slurm-names");
  const std::string campaign = MLPH_BINARY_DIR "/bin/mlperf-run --workload cosmoflow --division open --slurm "
                               "--data /data/cosmo --seed 41 --output " + (root / "out").string() + " ";
  for (const std::string& names : {std::string("--org acme --system \"$(printf 'box\\ntouch pwned')\""),
                                   std::string("--org acme --system ../../escape"), std::string("--org a/b --system box"),
                                   std::string("--org acme --set mlperf.platform=..")}) {
    const Cli c = run(campaign + "--runs 2 " + names);
    EXPECT_EQ(c.code, 2) << names << "\n" << c.output;
    EXPECT_NE(c.output.find("is not a plain name"), std::string::npos) << c.output;
    EXPECT_FALSE(fs::exists(root / "out")) << names << ": nothing is written";
    EXPECT_FALSE(fs::exists(root / "escape-cosmoflow.sbatch"));
  }
  const Cli ok = run(MLPH_BINARY_DIR "/bin/mlperf-run --workload cosmoflow --division open --runs 2 --slurm --org acme "
                     "--system box1 --seed 41 --data \"/data/it's a \\$(touch pwned) \\`x\\`\" --output " +
                     (root / "out").string());
  ASSERT_EQ(ok.code, 0) << ok.output;
  const fs::path script = root / "out" / "slurm" / "box1-cosmoflow.sbatch";
  std::ifstream in(script);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(" --data '/data/it'\\''s a $(touch pwned) `x`' "), std::string::npos) << text;
  EXPECT_EQ(run("bash -n " + script.string()).code, 0);
  std::ifstream readme(root / "out" / "acme" / "benchmarks" / "cosmoflow" / "implementations" / "mlperf-hpc" / "README.md");
  const std::string notes((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  EXPECT_NE(notes.find(" --data '/data/it'\\''s a $(touch pwned) `x`' "), std::string::npos) << notes;
  const Cli many = run(campaign + "--org acme --system box2 --runs 1001");
  EXPECT_EQ(many.code, 2) << many.output;
  EXPECT_NE(many.output.find("--runs 1001: from 0 to 1000"), std::string::npos) << many.output;
}

// --describe-system writes the system description from a log, as each array task does after its run;
// without the tree's names it refuses.
TEST(EndToEnd, DescribeSystemWritesTheTreesSystemJson) {
  const fs::path root = test::fresh_tree("describe-system");
  FakeRun r;
  r.seed = 7;
  test::write_log(root / "result_0.txt", r);
  const std::string run_bin = MLPH_BINARY_DIR "/bin/mlperf-run";
  const Cli ok = run(run_bin + " --describe-system " + (root / "result_0.txt").string() + " --org acme --system box1 "
                     "--output " + (root / "out").string());
  ASSERT_EQ(ok.code, 0) << ok.output;
  std::ifstream json(root / "out" / "acme" / "systems" / "box1.json");
  const std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"submitter\": \"acme\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"system_name\": \"box1\""), std::string::npos) << text;
  const Cli missing = run(run_bin + " --describe-system " + (root / "result_0.txt").string() + " --output " +
                          (root / "out").string());
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("--describe-system needs --org and --system"), std::string::npos) << missing.output;
}
