// mlperf-run given what an attacker or a careless user would give it (issue 16): configuration
// values that a narrowing cast or an undefined shift turned into other values, --output paths
// that crashed it, and YAML and JSON alias bombs. Each must end in one line naming the file, key
// or path, exit status 2 (refused before a run starts), in bounded time and memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli.hpp"

using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

bool has_deepcam() { return fs::exists(fs::path(MLPH_PLUGIN_DIR) / "libmlph-workload-deepcam.so"); }

size_t lines(const std::string& output) { return static_cast<size_t>(std::count(output.begin(), output.end(), '\n')); }

// Refused before any run: exit 2 and exactly `message` as the one line printed.
void expect_refused(const CliResult& r, const std::string& message) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "mlperf-run: error: " + message + "\n");
}

// Nine anchors, each nine aliases of the one before: 9^9 (387 million) leaves from a few hundred bytes.
std::string yaml_map_bomb() {
  std::string yaml = "a: &a {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1}\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    yaml += std::string(1, level) + ": &" + level + " {";
    for (char k = 'a'; k <= 'i'; ++k) yaml += std::string(k == 'a' ? "" : ", ") + k + ": *" + char(level - 1);
    yaml += "}\n";
  }
  return yaml;
}

// The same as one flow list (what a JSON value in a log line or a YAML of log keys can hold).
std::string flow_list_bomb() {
  std::string list = "[&a [1, 1, 1, 1, 1, 1, 1, 1, 1]";
  for (char level = 'b'; level <= 'i'; ++level) {
    list += std::string(", &") + level + " [";
    for (int k = 0; k < 9; ++k) list += std::string(k ? ", *" : "*") + char(level - 1);
    list += "]";
  }
  return list + "]";
}

fs::path write(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary) << text;
  return file;
}

// A refusal in bounded time and memory; the limits of run_cli_bounded end a regression that grows.
void expect_bounded_refusal(const BoundedResult& r, const std::string& message) {
  EXPECT_FALSE(r.signaled) << r.output;
  expect_refused(r, message);
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_LT(r.max_rss_mib, kSanitized ? 1024 : 256) << "peak memory";
}

}  // namespace

// 1. batchnorm_group_size 2^32 passed the range check, became 0 in 32 bits, and was divided by: SIGFPE.
TEST(BadValue, BatchNormGroupOf2To32IsOutOfRange) {
  if (!has_deepcam()) GTEST_SKIP() << "deepcam not built (HDF5)";
  expect_refused(run_cli("--workload deepcam --set train.batchnorm_group_size=4294967296"),
                 "--set: 'train.batchnorm_group_size' = 4294967296 is out of range: must be >= 1 and <= 4294967295 "
                 "(MLPerf HPC rules: batchnorm_group_size must be >= 1)");
}

// 14. Range-checked as 64 bits, then cut to 32: a batch of 4, 0 epochs, an infinite learning rate.
TEST(BadValue, IntegersAreNotNarrowed) {
  expect_refused(run_cli("--workload cosmoflow --set train.batch_size=4294967300"),
                 "--set: 'train.batch_size' = 4294967300 is out of range: must be > 0 and <= 65536");
  expect_refused(run_cli("--workload cosmoflow --set train.epochs=4294967296"),
                 "--set: 'train.epochs' = 4294967296 is out of range: must be >= 1 and <= 4294967295");
  expect_refused(run_cli("--workload cosmoflow --set optimizer.base_batch_size=4294967296"),
                 "--set: 'optimizer.base_batch_size' = 4294967296 is out of range: must be > 0 and <= 2147483647");
  const fs::path dir = fresh_dir("narrowing");
  const fs::path config = write(dir / "c.yaml", "workload: cosmoflow\ntrain:\n  epochs: 99999999999999999999\n");
  expect_refused(run_cli("--config " + config.string()),
                 config.string() + ":3: 'train.epochs' = \"99999999999999999999\" is out of range: must be an integer "
                                   "from -9223372036854775808 to 9223372036854775807");
  if (!has_deepcam()) return;
  expect_refused(run_cli("--workload deepcam --set train.gradient_accumulation_frequency=4294967297"),
                 "--set: 'train.gradient_accumulation_frequency' = 4294967297 is out of range: must be >= 1 and <= "
                 "4294967295 (MLPerf HPC rules: gradient_accumulation_frequency must be >= 1)");
}

// 15. n_conv_layers 31 gave "multiple of -2147483648" (1 << 31); the model cannot build that many
// blocks: bounded by the schema, in the open division too.
TEST(BadValue, ConvLayersAreBoundedByWhatTheModelCanBuild) {
  expect_refused(run_cli("--workload cosmoflow --division open --set model.n_conv_layers=31"),
                 "--set: 'model.n_conv_layers' = 31 is out of range: must be >= 1 and <= 10");
  // Within the bound, the edge check names the power of two.
  expect_refused(run_cli("--workload cosmoflow --division open --set model.n_conv_layers=8"),
                 "cosmoflow: 'data.edge' = 128: must be a multiple of 256 (2^model.n_conv_layers: each block halves it)");
}

// 16. inf and 1e30 passed validation, even in the closed division.
TEST(BadValue, LearningRatesAreFiniteAndSane) {
  for (const char* division : {"closed", "open"}) {
    const std::string run = std::string("--workload cosmoflow --division ") + division;
    expect_refused(run_cli(run + " --set optimizer.base_lr=inf"), "--set: 'optimizer.base_lr' = \"inf\" is not a finite number");
    expect_refused(run_cli(run + " --set optimizer.base_lr=.nan"), "--set: 'optimizer.base_lr' = \".nan\" is not a finite number");
    expect_refused(run_cli(run + " --set optimizer.base_lr=1e30"),
                   "--set: 'optimizer.base_lr' = 1e30 is out of range: must be > 0 and <= 1000000 (the learning rate "
                   "must be > 0; beyond 1e6 it is a typo)");
  }
  expect_refused(run_cli("--workload cosmoflow --division open --set optimizer.weight_decay=inf"),
                 "--set: 'optimizer.weight_decay' = \"inf\" is not a finite number");
  if (!has_deepcam()) return;
  expect_refused(run_cli("--workload deepcam --set optimizer.lr=Infinity"),
                 "--set: 'optimizer.lr' = \"Infinity\" is not a finite number");
  expect_refused(run_cli("--workload deepcam --set optimizer.betas=[0.9,nan]"),
                 "--set: 'optimizer.betas' = \"nan\" is not a finite number");
}

// 17. A borrowed global batch of 1e300 went through an undefined cast (-9223372036854775808 in the message).
TEST(BadValue, BorrowedBatchIsAnInteger) {
  const fs::path dir = fresh_dir("borrow-1e300");
  const fs::path yaml = write(dir / "h.yaml", "global_batch_size: 1e300\n");
  const CliResult r = run_cli("--workload cosmoflow --borrow-hparams " + yaml.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("global_batch_size = 1e300: must be a positive integer"), std::string::npos) << r.output;
  const fs::path huge = write(dir / "huge.yaml", "global_batch_size: 131072\n");  // fits, but not one rank's batch
  const CliResult h = run_cli("--workload cosmoflow --borrow-hparams " + huge.string());
  EXPECT_EQ(h.exit_code, 2) << h.output;
  EXPECT_NE(h.output.find("global_batch_size = 131072 (as train.batch_size=131072): --set: 'train.batch_size' = 131072 "
                          "is out of range: must be > 0 and <= 65536"),
            std::string::npos)
      << h.output;
}

// 2. --output naming a regular file aborted on an uncaught filesystem_error (also with --runs 1).
TEST(BadPath, OutputThatIsAFile) {
  const fs::path dir = fresh_dir("output-file");
  const fs::path file = write(dir / "taken", "x");
  expect_refused(run_cli("--workload cosmoflow --output " + file.string()), "--output " + file.string() + ": is not a directory");
  expect_refused(run_cli("--workload cosmoflow --runs 1 --output " + file.string()),
                 "--output " + file.string() + ": is not a directory");
  expect_refused(run_cli("--workload cosmoflow --output " + (file / "sub").string()),
                 "--output " + (file / "sub").string() + ": " + file.string() + " is not a directory");
  // The log's own name taken by a directory: one line, no abort.
  fs::create_directories(dir / "out" / "result_0.txt");
  const CliResult taken = run_cli("--workload cosmoflow --output " + (dir / "out").string());
  EXPECT_EQ(taken.exit_code, 2) << taken.output;
  EXPECT_EQ(lines(taken.output), 1u) << taken.output;
  EXPECT_NE(taken.output.find((dir / "out" / "result_0.txt").string()), std::string::npos) << taken.output;
  expect_refused(run_cli("--workload cosmoflow --log-name ../escaped.txt --output " + (dir / "out").string()),
                 "--log-name '../escaped.txt': a file name in --output, without a directory");
}

TEST(BadPath, ConfigAndSystemInfoThatAreNoFiles) {
  const fs::path dir = fresh_dir("bad-paths");
  expect_refused(run_cli("--workload cosmoflow --config " + dir.string()), dir.string() + ": is a directory, not a regular file");
  expect_refused(run_cli("--workload cosmoflow --runs 1 --output " + (dir / "sub").string() + " --config " + dir.string()),
                 dir.string() + ": is a directory, not a regular file");
  // --system-info is read before the first run: nothing is run or written for a missing one.
  expect_refused(run_cli("--workload cosmoflow --runs 1 --output " + (dir / "sub").string() + " --system-info " +
                         (dir / "none.yaml").string()),
                 "--system-info " + (dir / "none.yaml").string() + ": system description not found");
  EXPECT_FALSE(fs::exists(dir / "sub"));
  expect_refused(run_cli("--workload cosmoflow --borrow-hparams " + dir.string()), dir.string() + ": is a directory, not a regular file");
}

// 4. Alias bombs: a config took gigabytes and ended in a bare std::bad_alloc.
TEST(Bomb, ConfigAliases) {
  const fs::path dir = fresh_dir("bomb-config");
  const fs::path config = write(dir / "bomb.yaml", yaml_map_bomb());
  ASSERT_LT(fs::file_size(config), 700u);
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --config " + config.string()),
                         config.string() + ":1: YAML anchors and aliases are not accepted (an alias can expand without bound)");
}

// ... a 576-byte MLPerf log given to --borrow-hparams took 6.1 GB and printed a 71.6 MB line.
TEST(Bomb, LogAndYamlOfLogKeysAliases) {
  const fs::path dir = fresh_dir("bomb-log");
  const fs::path log = write(dir / "result_0.txt",
                             ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", "
                             "\"key\": \"global_batch_size\", \"value\": " + flow_list_bomb() +
                                 ", \"metadata\": {\"file\": \"x.py\", \"lineno\": 1}}\n");
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --borrow-hparams " + log.string()),
                         log.string() + ":1: unreadable MLLOG line: YAML anchors and aliases are not accepted (an alias "
                                        "can expand without bound)");
  const fs::path yaml = write(dir / "h.yaml", "opt_learning_rate_decay_boundary_epochs: " + flow_list_bomb() + "\n");
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --borrow-hparams " + yaml.string()),
                         yaml.string() + ":1: YAML anchors and aliases are not accepted (an alias can expand without bound)");
}

// Without aliases, size is the only lever: the files and the lines are bounded before they are read.
TEST(Bomb, HugeFilesAndLines) {
  const fs::path dir = fresh_dir("bomb-size");
  const fs::path config = write(dir / "huge.yaml", "");
  fs::resize_file(config, uint64_t{3} << 30);  // sparse: 3 GiB that take no disk
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --config " + config.string()),
                         config.string() + ": 3221225472 bytes, more than the 1048576 bytes allowed");
  const fs::path log = write(dir / "huge.txt", "");
  fs::resize_file(log, 70'000'000);  // one line of 70 MB
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --borrow-hparams " + log.string()),
                         log.string() + ": 70000000 bytes, more than the 8388608 bytes allowed");
  const fs::path long_line = write(dir / "long.txt",
                                   ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": "
                                   "\"submission_benchmark\", \"value\": \"cosmoflow\", \"metadata\": {}}\n" +
                                       std::string(2u << 20, ' ') + ":::MLLOG {}\n");
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --borrow-hparams " + long_line.string()),
                         long_line.string() + ":2: unreadable MLLOG line: 2097163 bytes, more than the 1048576 allowed "
                                              "for a line");
  std::string nested = "model: ";
  for (int i = 0; i < 100'000; ++i) nested += "{a: ";
  const fs::path deep = write(dir / "deep.yaml", nested + std::string(100'000, '}') + "\n");
  expect_bounded_refusal(run_cli_bounded("--workload cosmoflow --config " + deep.string()),
                         deep.string() + ":1: invalid YAML: nested 500 levels deep");
}
