// Checkpoints through mlperf-run. A run killed with SIGKILL in the middle of an epoch and resumed from
// its last checkpoint ends with bitwise the weights and metrics of a run never interrupted (same backend, same thread count), for CosmoFlow (dropout: the micro-batch counter) and
// DeepCAM (LAMB, batch-norm statistics, an accumulation window open across the epoch's end), on the
// reference and onednn-cpu backends. A run stopped by SIGUSR1 or SIGTERM (Slurm's warning before the
// time limit, the limit itself) saves a checkpoint at the next step, inside the epoch, exits 3, and
// `--resume auto` goes on from it to the same bits. A checkpoint that is truncated, corrupt, foreign
// or of another run gets one line naming the file and what differs, exit status 2 and no log.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "cli.hpp"
#include "mlph/core/checkpoint_file.hpp"
#include "mlph/test/tiny_run.hpp"

using namespace mlph;
using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

const std::string kCosmoFlowSeedless =
    tiny_cosmoflow(2) +
    "--set train.epochs=3 --set optimizer.warmup_epochs=0 --set train.target_mae=0.0001 --set backend.threads=2 ";
const std::string kCosmoFlow = kCosmoFlowSeedless + "--seed 1234 ";
const std::string kCosmoFlowData = "--set data.synthetic.train=8 --set data.synthetic.valid=4 ";
// 3 micro-batches an epoch in windows of 2: the window of micro-batches 3 and 4 spans the first epoch's end.
const std::string kDeepCam =
    "--workload deepcam --division open --seed 99 --set data.height=32 --set data.width=48 --set train.batch_size=1 "
    "--set train.epochs=2 --set train.target_iou=0.9999 --set train.gradient_accumulation_frequency=2 "
    "--set backend.threads=2 ";
const std::string kDeepCamData = "--set data.synthetic.train=3 --set data.synthetic.valid=1 ";

bool has_plugin(const std::string& file) { return fs::exists(fs::path(MLPH_PLUGIN_DIR) / file); }

// DeepCAM's checkpoints are 650 MB each: a test that passed leaves none behind in TMPDIR.
void remove_if_passed(const fs::path& dir) {
  if (!testing::Test::HasFailure()) fs::remove_all(dir);
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Starts mlperf-run with its output going to `log`; the pid is mlperf-run's own (exec).
pid_t spawn_cli(const std::string& args, const fs::path& log) {
  const std::string command = "exec " MLPH_BINARY_DIR "/bin/mlperf-run " + args + " >" + log.string() + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Sends `signal` once `log` shows `marker` (a progress line inside an epoch) and returns the run's
// wait status; -1 if the run ended first.
int signal_at(pid_t pid, const fs::path& log, const std::string& marker, int signal) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(log).find(marker) != std::string::npos) {
      kill(pid, signal);
      int status = 0;
      waitpid(pid, &status, 0);
      return status;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

bool kill_at(pid_t pid, const fs::path& log, const std::string& marker) {
  const int status = signal_at(pid, log, marker, SIGKILL);
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::string last_value(const fs::path& log, const std::string& key) {
  std::string value;
  for (const std::string& line : read_lines(log))
    if (mllog_key(line) == key) value = mllog_value(line);
  return value;
}

// Run A never stops; run B is killed in epoch 2 (after its first checkpoint) and resumed from it. Both
// export their final weights (every parameter, batch-norm statistics included): equal bytes. The
// optimizer state and the counters are compared through them: every update of the resumed epochs uses
// them. (A writes no checkpoints: DeepCAM's are 650 MB.)
void check_resume_is_bitwise(const std::string& name, const std::string& flags, const std::string& data_flags,
                             uint32_t epochs, const std::string& metric_key) {
  const fs::path dir = fresh_dir(name);
  ASSERT_EQ(run_cli(flags + data_flags + "--generate-data " + (dir / "data").string()).exit_code, 0);
  const std::string common = flags + "--data " + (dir / "data").string() + " ";
  const CliResult a = run_cli(common + "--output " + (dir / "a").string() + " --export-weights " + (dir / "a.npz").string());
  ASSERT_EQ(a.exit_code, 1) << a.output;  // the target is out of reach: aborted, not an error

  const fs::path checkpoints = dir / "ck";
  const pid_t pid = spawn_cli(common + "--output " + (dir / "b").string() + " --checkpoint-dir " + checkpoints.string(),
                              dir / "b.txt");
  ASSERT_TRUE(kill_at(pid, dir / "b.txt", "epoch 2/" + std::to_string(epochs) + "  step 1/")) << slurp(dir / "b.txt");
  ASSERT_EQ(core::list_checkpoints(checkpoints).size(), 1u) << "killed in epoch 2: one checkpoint, of epoch 1";
  const CliResult resumed = run_cli(common + "--output " + (dir / "b2").string() + " --checkpoint-dir " +
                                    checkpoints.string() + " --resume " + checkpoints.string() + " --export-weights " +
                                    (dir / "b.npz").string());
  ASSERT_EQ(resumed.exit_code, 1) << resumed.output;
  EXPECT_NE(resumed.output.find("note: resumed after epoch 1"), std::string::npos) << resumed.output;
  EXPECT_TRUE(slurp(dir / "a.npz") == slurp(dir / "b.npz")) << "the resumed run's weights differ";
  EXPECT_EQ(last_value(dir / "a" / "result_0.txt", metric_key), last_value(dir / "b2" / "result_0.txt", metric_key));
  EXPECT_NE(last_value(dir / "b2" / "result_0.txt", "mlph_resumed_from"), "");
  EXPECT_EQ(last_value(dir / "a" / "result_0.txt", "mlph_resumed_from"), "");
  const std::vector<fs::path> kept = core::list_checkpoints(checkpoints);
  ASSERT_EQ(kept.size(), 2u) << "the newest 2 are kept";
  EXPECT_EQ(kept.back().filename(), core::checkpoint_name(epochs));
  EXPECT_EQ(slurp(checkpoints / "latest"), core::checkpoint_name(epochs) + "\n");
}

// Run A never stops; run B (--checkpoint-dir, --resume auto: nothing to resume yet) gets `signal` in
// epoch `epoch` after its step `after_step` and stops at the next step boundary: exit 3, its log ends
// aborted naming the signal and the checkpoint, which lies inside the epoch. The same command again
// goes on from it by itself and ends with A's weights, bit for bit, and its log says it resumed.
// Returns the manifest of the checkpoint B saved (read before the resumed run prunes it).
core::Manifest check_stop_and_auto_resume(const std::string& name, const std::string& flags, const std::string& data_flags,
                                    uint32_t epochs, uint32_t epoch, uint32_t after_step, int signal,
                                    const std::string& metric_key) {
  const fs::path dir = fresh_dir(name);
  EXPECT_EQ(run_cli(flags + data_flags + "--generate-data " + (dir / "data").string()).exit_code, 0);
  const std::string common = flags + "--data " + (dir / "data").string() + " ";
  const CliResult a = run_cli(common + "--output " + (dir / "a").string() + " --export-weights " + (dir / "a.npz").string());
  EXPECT_EQ(a.exit_code, 1) << a.output;  // the target is out of reach: aborted, not an error

  const fs::path checkpoints = dir / "ck";
  const std::string again = common + "--checkpoint-dir " + checkpoints.string() + " --resume auto ";
  const pid_t pid = spawn_cli(again + "--output " + (dir / "b").string(), dir / "b.txt");
  const std::string marker = fmt::format("epoch {}/{}  step {}/", epoch, epochs, after_step);
  const int status = signal_at(pid, dir / "b.txt", marker, signal);
  const std::string printed = slurp(dir / "b.txt");
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 3) << status << "\n" << printed;
  EXPECT_NE(printed.find("--resume auto: no checkpoint in " + checkpoints.string() + " yet: starting afresh"),
            std::string::npos)
      << printed;
  const std::vector<std::string> lines = read_lines(dir / "b" / "result_0.txt");
  const std::string last = lines.empty() ? "" : lines.back();
  EXPECT_EQ(mllog_key(last), "run_stop") << last;
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  const fs::path saved = core::latest_checkpoint(checkpoints);
  const std::string said = std::string("mlperf-run: ") +
                            (signal == SIGUSR1 ? "SIGUSR1 (Slurm's warning" : "SIGTERM (the time limit");
  EXPECT_NE(printed.find(said), std::string::npos) << printed;
  EXPECT_NE(printed.find("checkpoint " + saved.string() + " saved"), std::string::npos) << printed;
  if (signal == SIGUSR1) {  // the log says it too; after SIGTERM a step longer than half a second has the
    // watcher end the log first: "SIGTERM during a step ... a checkpoint is saved if the step ends within"
    EXPECT_NE(last.find("checkpoint " + saved.string() + " saved"), std::string::npos) << last;
  } else {
    EXPECT_NE(last.find("SIGTERM"), std::string::npos) << last;
  }
  const std::string inside = fmt::format("epoch-{:06}-step-", epoch - 1);
  EXPECT_EQ(saved.filename().string().rfind(inside, 0), 0u) << saved << ": not inside epoch " << epoch;
  if (testing::Test::HasFailure()) return {};
  const core::Manifest manifest = core::CheckpointReader(saved).manifest();
  EXPECT_GT(manifest.state.steps_done, 0u);
  EXPECT_EQ(manifest.state.epochs_done, epoch - 1);

  const CliResult resumed = run_cli(again + "--output " + (dir / "b2").string() + " --export-weights " +
                                    (dir / "b.npz").string());
  EXPECT_EQ(resumed.exit_code, 1) << resumed.output;
  const std::string resumed_end = read_lines(dir / "b2" / "result_0.txt").back();
  EXPECT_EQ(resumed_end.find("\"error\""), std::string::npos) << "not the target: a failure\n" << resumed_end;
  EXPECT_NE(resumed.output.find("--resume auto: going on from the newest checkpoint in " + checkpoints.string()),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("note: resumed at step "), std::string::npos) << resumed.output;
  EXPECT_TRUE(slurp(dir / "a.npz") == slurp(dir / "b.npz")) << "the resumed run's weights differ";
  EXPECT_EQ(last_value(dir / "a" / "result_0.txt", metric_key), last_value(dir / "b2" / "result_0.txt", metric_key));
  EXPECT_NE(last_value(dir / "b2" / "result_0.txt", "mlph_resumed_from"), "");
  return manifest;
}

}  // namespace

TEST(Stop, SigusrInsideAnEpochSavesAndAutoResumeIsBitwise) {
  check_stop_and_auto_resume("stop-usr1", kCosmoFlow, kCosmoFlowData, 3, 2, 2, SIGUSR1, "eval_error");
}

TEST(Stop, SigtermInsideAnEpochSavesAndAutoResumeIsBitwiseOnOnednn) {
  if (!has_plugin("libmlph-backend-onednn-cpu.so")) GTEST_SKIP() << "onednn-cpu is not built";
  check_stop_and_auto_resume("stop-term-onednn", kCosmoFlow + "--backend onednn-cpu ", kCosmoFlowData, 3, 2, 1, SIGTERM,
                             "eval_error");
}

// One epoch of 3 micro-batches in windows of 2, stopped inside it: after micro-batch 1 the window is
// open and its pending sum is saved with the checkpoint (650 MB), after 2 it is closed and is not.
TEST(Stop, DeepCamStoppedInsideAnAccumulationWindowResumesBitwise) {
  if (!has_plugin("libmlph-workload-deepcam.so")) GTEST_SKIP() << "deepcam is not built (HDF5)";
  const core::Manifest saved = check_stop_and_auto_resume("stop-deepcam", kDeepCam + "--set train.epochs=1 ",
                                                          kDeepCamData, 1, 1, 1, SIGUSR1, "eval_accuracy");
  if (!HasFailure()) {
    EXPECT_EQ(saved.state.steps_done, saved.state.micro_batches);
    const bool pending = std::any_of(saved.tensors.begin(), saved.tensors.end(), [](const core::TensorRecord& t) {
      return t.name == "xception.conv1.weight" && t.slot == "pending_gradient";
    });
    EXPECT_EQ(pending, saved.state.micro_batches % 2 == 1) << "the pending sum is saved exactly when the window is open";
  }
  remove_if_passed(fs::temp_directory_path() / "mlph-test-stop-deepcam");
}

// A run without --checkpoint-dir stops at the next step all the same, saying it saved nothing: exit 1.
TEST(Stop, WithoutACheckpointDirTheRunStopsAndSaysSo) {
  const fs::path dir = fresh_dir("stop-nothing");
  ASSERT_EQ(run_cli(kCosmoFlow + kCosmoFlowData + "--generate-data " + (dir / "data").string()).exit_code, 0);
  const pid_t pid = spawn_cli(kCosmoFlow + "--data " + (dir / "data").string() + " --output " + (dir / "out").string(),
                              dir / "out.txt");
  const int status = signal_at(pid, dir / "out.txt", "epoch 1/3  step 2/", SIGUSR1);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << slurp(dir / "out.txt");
  const std::string last = read_lines(dir / "out" / "result_0.txt").back();
  EXPECT_NE(last.find("SIGUSR1 (Slurm's warning before the time limit, or a preemption notice): stopped before "
                      "training step "),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("no checkpoint (no --checkpoint-dir)"), std::string::npos) << last;
}

// Issue 36, defect 3: SIGTERM during an evaluation that reaches the target, with --checkpoint-dir, not
// under srun: half a second on, the watcher's last words end the log (run_stop aborted). The run then
// ends stopped after that evaluation, saving there (exit 3), not with success; nothing follows run_stop
// in the log. (32 validation samples: the evaluation lasts seconds after the signal.)
TEST(Stop, SigtermDuringAnEvaluationEndsTheRunStoppedNotSuccessful) {
  const fs::path dir = fresh_dir("stop-in-eval");
  const std::string flags = tiny_cosmoflow(2) +
                            "--set train.epochs=2 --set optimizer.warmup_epochs=0 --set train.target_mae=10 "
                            "--set backend.threads=1 --seed 1234 ";
  ASSERT_EQ(run_cli(flags + generate_data(4, 32, dir / "data")).exit_code, 0);
  const fs::path log = dir / "out" / "result_0.txt";
  const pid_t pid = spawn_cli(flags + "--data " + (dir / "data").string() + " --output " + (dir / "out").string() +
                                  " --checkpoint-dir " + (dir / "ck").string(),
                              dir / "run.txt");
  const int status = signal_at(pid, log, "\"key\": \"eval_start\"", SIGTERM);
  const std::string printed = slurp(dir / "run.txt");
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 3) << status << "\n" << printed;
  EXPECT_EQ(printed.find("run_stop: success"), std::string::npos) << printed;
  EXPECT_NE(printed.find("stopped after epoch 1"), std::string::npos) << printed;
  const std::vector<std::string> lines = read_lines(log);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(mllog_key(lines.back()), "run_stop") << lines.back();
  EXPECT_NE(lines.back().find("\"status\": \"aborted\""), std::string::npos) << lines.back();
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return mllog_key(l) == "run_stop"; }), 1);
  EXPECT_EQ(core::latest_checkpoint(dir / "ck").filename(), "epoch-000001") << printed;
  if (!testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(Stop, ResumeAutoNeedsACheckpointDir) {
  const CliResult r = run_cli(kCosmoFlow + "--data /nonexistent --resume auto");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume auto: needs --checkpoint-dir"), std::string::npos) << r.output;
}

TEST(Resume, CosmoFlowReferenceIsBitwiseAfterSigkill) {
  check_resume_is_bitwise("resume-cosmoflow", kCosmoFlow, kCosmoFlowData, 3, "eval_error");
}

TEST(Resume, CosmoFlowOnednnIsBitwiseAfterSigkill) {
  if (!has_plugin("libmlph-backend-onednn-cpu.so")) GTEST_SKIP() << "onednn-cpu is not built";
  check_resume_is_bitwise("resume-cosmoflow-onednn", kCosmoFlow + "--backend onednn-cpu ", kCosmoFlowData, 3,
                          "eval_error");
}

TEST(Resume, DeepCamReferenceIsBitwiseWithAWindowAcrossTheEpochEnd) {
  if (!has_plugin("libmlph-workload-deepcam.so")) GTEST_SKIP() << "deepcam is not built (HDF5)";
  check_resume_is_bitwise("resume-deepcam", kDeepCam, kDeepCamData, 2, "eval_accuracy");
  // The first checkpoint holds the open window's pending sums (one micro-batch of two).
  const core::CheckpointReader first(fs::temp_directory_path() / "mlph-test-resume-deepcam" / "ck" / "epoch-000001");
  EXPECT_EQ(first.manifest().state.micro_batches, 3u);
  EXPECT_EQ(first.manifest().state.optimizer_steps, 1u);
  EXPECT_NE(first.find("xception.conv1.weight", "pending_gradient"), nullptr);
  EXPECT_NE(first.find("xception.conv1.weight", "m"), nullptr);
  EXPECT_EQ(first.find("xception.conv1.bn.running_mean", "m"), nullptr) << "running statistics have no optimizer state";
  remove_if_passed(fs::temp_directory_path() / "mlph-test-resume-deepcam");
}

TEST(Resume, DeepCamOnednnIsBitwiseWithAWindowAcrossTheEpochEnd) {
  if (!has_plugin("libmlph-workload-deepcam.so") || !has_plugin("libmlph-backend-onednn-cpu.so"))
    GTEST_SKIP() << "deepcam or onednn-cpu is not built";
  check_resume_is_bitwise("resume-deepcam-onednn", kDeepCam + "--backend onednn-cpu ", kDeepCamData, 2, "eval_accuracy");
  remove_if_passed(fs::temp_directory_path() / "mlph-test-resume-deepcam-onednn");
}

// One CosmoFlow checkpoint (after 1 epoch), copied and spoilt by each test. CTest runs each test in a
// process of its own, several at once: each process makes its checkpoint in a directory of its own.
class BadCheckpoint : public testing::Test {
 protected:
  // No assertion here: gtest turns a failed suite set-up into skipped tests, which ctest reports as
  // Skipped. The failure is kept and each test's SetUp fails on it instead.
  static void SetUpTestSuite() {
    dir_ = fresh_dir("bad-checkpoint-" + std::to_string(getpid()));
    const CliResult data = run_cli(kCosmoFlow + kCosmoFlowData + "--generate-data " + (dir_ / "data").string());
    if (data.exit_code != 0) return void(setup_error_ = "generating the data: " + data.output);
    const CliResult r = run_cli(kCosmoFlow + "--set train.epochs=1 --data " + (dir_ / "data").string() + " --output " +
                                (dir_ / "out").string() + " --checkpoint-dir " + (dir_ / "good").string());
    if (r.exit_code != 1) setup_error_ = "the 1-epoch run that writes the checkpoint: " + r.output;
  }
  void SetUp() override {
    ASSERT_EQ(setup_error_, "");
    fs::remove_all(dir_ / "ck");
    fs::copy(dir_ / "good", dir_ / "ck", fs::copy_options::recursive);
    fs::remove_all(dir_ / "resumed");
  }
  fs::path checkpoint() const { return dir_ / "ck" / "epoch-000001"; }
  // A resume that must be refused before anything starts: exit 2, one line, no log.
  CliResult refused(const std::string& flags) const {
    CliResult r = run_cli(flags + "--data " + (dir_ / "data").string() + " --output " + (dir_ / "resumed").string() +
                          " --resume " + (dir_ / "ck").string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "resumed" / "result_0.txt"));
    return r;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
  static inline std::string setup_error_;
};
fs::path BadCheckpoint::dir_;

#define EXPECT_SAYS(output, text) EXPECT_NE((output).find(text), std::string::npos) << (output)

TEST_F(BadCheckpoint, TruncatedTensorsAreNamed) {
  fs::resize_file(checkpoint() / "tensors.bin", fs::file_size(checkpoint() / "tensors.bin") / 2);
  const CliResult r = refused(kCosmoFlow);
  EXPECT_SAYS(r.output, (checkpoint() / "tensors.bin").string());
  EXPECT_SAYS(r.output, "the checkpoint is truncated");
}

TEST_F(BadCheckpoint, ACorruptTensorFailsItsCrc) {
  {
    std::fstream f(checkpoint() / "tensors.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20000);  // inside conv1's velocity
    f.put('\x5a');
  }
  EXPECT_SAYS(refused(kCosmoFlow).output, "tensor 'conv1.kernel/velocity' fails its CRC32 check");
  const CliResult exported = run_command(std::string(MLPH_BINARY_DIR "/bin/mlph-export ") + (dir_ / "ck").string() + " " +
                                         (dir_ / "w.npz").string());
  EXPECT_EQ(exported.exit_code, 2) << exported.output;
  EXPECT_SAYS(exported.output, "fails its CRC32 check");
}

TEST_F(BadCheckpoint, AGarbledOrForeignManifestIsNamed) {
  std::ofstream(checkpoint() / "manifest.json") << "{\"format\": \"safetensors\", \"version\": 1}";
  EXPECT_SAYS(refused(kCosmoFlow).output, "not an mlperf-hpc checkpoint (format 'safetensors'");
  std::ofstream(checkpoint() / "manifest.json") << "{\"format\": \"mlph-che";
  EXPECT_SAYS(refused(kCosmoFlow).output, (checkpoint() / "manifest.json").string() + ": not a readable checkpoint manifest");
}

TEST_F(BadCheckpoint, AnotherBenchmarkIsRefused) {
  if (!has_plugin("libmlph-workload-deepcam.so")) GTEST_SKIP() << "deepcam is not built";
  EXPECT_SAYS(refused("--workload deepcam --division open --seed 1234 ").output,
              "benchmark 'cosmoflow' there, 'deepcam' in this run");
}

TEST_F(BadCheckpoint, AnotherBackendIsRefused) {
  if (!has_plugin("libmlph-backend-onednn-cpu.so")) GTEST_SKIP() << "onednn-cpu is not built";
  EXPECT_SAYS(refused(kCosmoFlow + "--backend onednn-cpu ").output, "backend 'reference' there, 'onednn-cpu' in this run");
}

// --switch-backend: the reference's checkpoint goes on on onednn-cpu (issue 26 asks the same of cuda's):
// it trains the remaining epochs, says so in its note and its log, and its validation error after them
// is the reference's own resumed run's within what two backends' rounding makes of 2 epochs.
TEST_F(BadCheckpoint, AnotherBackendGoesOnWithSwitchBackend) {
  if (!has_plugin("libmlph-backend-onednn-cpu.so")) GTEST_SKIP() << "onednn-cpu is not built";
  const auto resume = [&](const std::string& flags, const char* out) {
    return run_cli(kCosmoFlow + flags + "--data " + (dir_ / "data").string() + " --output " + (dir_ / out).string() +
                   " --resume " + (dir_ / "ck").string());
  };
  const CliResult same = resume("", "on-reference");
  const CliResult switched = resume("--backend onednn-cpu --switch-backend ", "on-onednn");
  ASSERT_EQ(same.exit_code, 1) << same.output;  // trained to the end, short of the unreachable target
  ASSERT_EQ(switched.exit_code, 1) << switched.output;
  EXPECT_SAYS(switched.output, "resumed after epoch 1 from " + (dir_ / "ck").string());
  EXPECT_SAYS(switched.output, "on backend onednn-cpu (backend reference saved it: not bitwise)");
  const fs::path log = dir_ / "on-onednn" / "result_0.txt";
  EXPECT_SAYS(slurp(log), "\"backend\": \"reference\", \"epochs_done\": 1");
  const double expected = std::stod(last_value(dir_ / "on-reference" / "result_0.txt", "eval_error"));
  const double actual = std::stod(last_value(log, "eval_error"));
  EXPECT_NEAR(actual, expected, 1e-3 * expected) << "2 epochs on another backend's rounding";
  EXPECT_EQ(run_cli(kCosmoFlow + "--switch-backend --data " + (dir_ / "data").string()).exit_code, 2)
      << "--switch-backend without --resume";
}

TEST_F(BadCheckpoint, AnotherHyperparameterOrSeedOrGraphIsRefused) {
  EXPECT_SAYS(refused(kCosmoFlow + "--set optimizer.base_lr=0.5 ").output, "'optimizer.base_lr' = '0.001' there, '0.5'");
  EXPECT_SAYS(refused(kCosmoFlowSeedless + "--seed 5 ").output, "seed 1234 there, --seed 5 given");
  EXPECT_SAYS(refused(kCosmoFlow + "--set data.edge=64 ").output, "its graph (fingerprint");
}

TEST_F(BadCheckpoint, AnOccupiedDirectoryIsNotOverwritten) {
  const CliResult r = run_cli(kCosmoFlow + "--data " + (dir_ / "data").string() + " --output " +
                              (dir_ / "resumed").string() + " --checkpoint-dir " + (dir_ / "ck").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_SAYS(r.output, "already holds checkpoints (newest: epoch-000001): go on from them with --resume");
}

TEST_F(BadCheckpoint, GoingOnFromAnOlderOneWouldOverwriteTheNewest) {
  fs::copy(checkpoint(), dir_ / "ck" / "epoch-000002", fs::copy_options::recursive);
  std::ofstream(dir_ / "ck" / "latest") << "epoch-000002\n";
  const CliResult r = run_cli(kCosmoFlow + "--data " + (dir_ / "data").string() + " --output " +
                              (dir_ / "resumed").string() + " --checkpoint-dir " + (dir_ / "ck").string() +
                              " --resume " + checkpoint().string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_SAYS(r.output, "holds a newer checkpoint (epoch-000002) than");
}

TEST_F(BadCheckpoint, ABackendOlderThanAbi14IsRefusedByName) {
  const CliResult r = run_cli(kCosmoFlow + "--plugin-dir " MLPH_TEST_PLUGIN_DIR " --backend tracing-abi13 "
                              "--set backend.trace=/dev/null --data " + (dir_ / "data").string() + " --output " +
                              (dir_ / "resumed").string() + " --checkpoint-dir " + (dir_ / "new").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_SAYS(r.output, "backend tracing-abi13 (ABI 1.3) cannot save or restore its optimizer state");
}

TEST_F(BadCheckpoint, TheUnspoiltCopyResumes) {  // the control for the refusals above
  const CliResult r = run_cli(kCosmoFlow + "--set train.epochs=2 --data " + (dir_ / "data").string() + " --output " +
                              (dir_ / "resumed").string() + " --resume " + checkpoint().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_SAYS(r.output, "epoch 2/2 done");
  EXPECT_EQ(r.output.find("epoch 1/2 done"), std::string::npos) << r.output;
}

// ---- Issue 28: what a run writes is checked and reserved before it starts ---------------------------
// The linear-regression test workload (an epoch in a fraction of a second) on the reference backend;
// CosmoFlow where the export needs a workload that names the reference's parameters.
class RunOutputs : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("run-outputs-" + std::to_string(getpid()));
    const CliResult data = run_cli(kLinReg + "--generate-data " + (dir_ / "data").string());
    if (data.exit_code != 0) setup_error_ = "generating the data: " + data.output;
  }
  void SetUp() override { ASSERT_EQ(setup_error_, ""); }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // A linreg run of `epochs` (the target is out of reach: it ends aborted, exit 1) with `flags`.
  static std::string linreg(const std::string& flags, int epochs = 1) {
    return kLinReg + "--seed 3 --set train.epochs=" + std::to_string(epochs) + " --data " + (dir_ / "data").string() +
           " " + flags;
  }
  static inline const std::string kLinReg = "--plugin-dir " MLPH_TEST_PLUGIN_DIR
                                            " --workload linreg --division open --set train.target_mae=0.0001 ";
  static inline fs::path dir_;
  static inline std::string setup_error_;
};

// Defect 6: a second run saving into the same --checkpoint-dir deleted the first's checkpoints and
// moved `latest` back, silently. A run holds an flock on DIR/.lock: a second is refused while the first
// runs, and goes on once it is gone (SIGKILL included: the kernel drops the lock).
TEST_F(RunOutputs, ACheckpointDirInUseIsRefused) {
  const fs::path ck = dir_ / "ck-busy", out = dir_ / "out-busy";
  const pid_t first = spawn_cli(linreg("--checkpoint-dir " + ck.string() + " --output " + (out / "a").string(), 1000000),
                                dir_ / "first.txt");
  for (int i = 0; i < 6000 && !fs::exists(ck / "latest"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(ck / "latest")) << slurp(dir_ / "first.txt");
  const std::string second = linreg("--checkpoint-dir " + ck.string() + " --resume " + ck.string() + " --output " +
                                    (out / "b").string(), 3);
  const CliResult refused = run_cli(second);
  kill(first, SIGKILL);
  waitpid(first, nullptr, 0);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_SAYS(refused.output, "--checkpoint-dir " + ck.string() + ": another run is saving checkpoints there (it holds " +
                                  (ck / ".lock").string() + ")");
  EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1) << refused.output;
  EXPECT_FALSE(fs::exists(out / "b" / "result_0.txt"));
  const CliResult after = run_cli(second);
  EXPECT_EQ(after.exit_code, 1) << after.output;
  EXPECT_SAYS(after.output, "note: resumed after epoch");
}

// Defect 7: a checkpoint directory that cannot be one (a file is there) failed after the first epoch,
// exit 1; a bad --export-weights path after the run converged. Both fail before the log now, exit 2.
TEST_F(RunOutputs, ACheckpointDirThatCannotBeOneFailsBeforeTheRun) {
  const fs::path out = dir_ / "out-file";
  std::ofstream(dir_ / "a-file") << "x";
  const CliResult r = run_cli(linreg("--checkpoint-dir " + (dir_ / "a-file").string() + " --output " + out.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_SAYS(r.output, "--checkpoint-dir " + (dir_ / "a-file").string() + ": cannot be made a directory");
  EXPECT_FALSE(fs::exists(out / "result_0.txt"));
}

TEST_F(RunOutputs, AnExportThatCannotBeWrittenFailsBeforeTheRun) {
  const fs::path data = dir_ / "cosmoflow-data", out = dir_ / "out-export";
  ASSERT_EQ(run_cli(kCosmoFlow + kCosmoFlowData + "--generate-data " + data.string()).exit_code, 0);
  std::ofstream(dir_ / "not-a-dir") << "x";
  const std::string run = kCosmoFlow + "--set train.epochs=1 --data " + data.string() + " --output " + out.string();
  const CliResult bad = run_cli(run + " --export-weights " + (dir_ / "not-a-dir" / "w.npz").string());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_SAYS(bad.output, (dir_ / "not-a-dir" / "w.npz").string() + ": cannot create a file beside it");
  EXPECT_FALSE(fs::exists(out / "result_0.txt"));
  // Defect 11: nor may the export replace the run's own log.
  const CliResult log = run_cli(run + " --export-weights " + (out / "result_0.txt").string());
  EXPECT_EQ(log.exit_code, 2) << log.output;
  EXPECT_SAYS(log.output, "--export-weights " + (out / "result_0.txt").string() + ": is the run's MLPerf log");
  EXPECT_FALSE(fs::exists(out / "result_0.txt"));
}

// Defect 5: a FIFO where the log goes blocked the run forever; the log replaces whatever is there.
TEST_F(RunOutputs, ALogPathThatIsAFifoIsReplaced) {
  const fs::path out = dir_ / "out-fifo";
  fs::create_directories(out);
  ASSERT_EQ(mkfifo((out / "result_0.txt").c_str(), 0644), 0);
  const CliResult r = run_command("timeout 120 " MLPH_BINARY_DIR "/bin/mlperf-run " + linreg("--output " + out.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // 124: timed out
  ASSERT_TRUE(fs::is_regular_file(out / "result_0.txt"));
  EXPECT_SAYS(read_lines(out / "result_0.txt").back(), "\"key\": \"run_stop\"");
}

// Defect 12: --checkpoint-every -1 and --checkpoint-keep -1 were 4294967295 (and --seed -1 2^64 - 1).
TEST_F(RunOutputs, CountsMustBeInRange) {
  for (const std::string flag : {"--checkpoint-every -1", "--checkpoint-every 0", "--checkpoint-keep -1",
                                  "--checkpoint-keep 4294967296", "--seed -1"}) {
    const CliResult r = run_cli(kLinReg + flag + " --set train.epochs=1 --data " + (dir_ / "data").string() +
                                " --checkpoint-dir " + (dir_ / "ck-range").string() + " --output " +
                                (dir_ / "out-range").string());
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    const std::string option = flag.substr(0, flag.find(' '));
    EXPECT_SAYS(r.output, "'" + option + "' = \"" + flag.substr(flag.find(' ') + 1) + "\" is out of range");
    EXPECT_FALSE(fs::exists(dir_ / "out-range" / "result_0.txt"));
  }
}

// Defect 13: a checkpoint whose tensor has another shape, or lacks one, was refused only once the log
// had begun (exit 1, an earlier result_0.txt replaced); the README promises exit 2 and no log.
TEST_F(RunOutputs, ACheckpointThatDoesNotFitTheGraphIsRefusedBeforeTheLog) {
  const fs::path ck = dir_ / "ck-fit", out = dir_ / "out-fit";
  ASSERT_EQ(run_cli(linreg("--checkpoint-dir " + ck.string() + " --output " + out.string())).exit_code, 1);
  std::ofstream(out / "result_0.txt", std::ios::trunc) << "an earlier run's log\n";
  const fs::path manifest = ck / "epoch-000001" / "manifest.json";
  const std::string good = slurp(manifest);
  const auto refused = [&](const std::string& text, const std::string& expected) {
    std::ofstream(manifest, std::ios::trunc) << text;
    const CliResult r = run_cli(linreg("--resume " + ck.string() + " --output " + out.string(), 2));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_SAYS(r.output, "checkpoint " + (ck / "epoch-000001").string() + ": " + expected);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_EQ(slurp(out / "result_0.txt"), "an earlier run's log\n");
  };
  std::string reshaped = good;
  const std::string w = "\"name\": \"w\", \"slot\": \"\", \"dtype\": \"float32\", \"shape\": [8, 1]";
  ASSERT_NE(reshaped.find(w), std::string::npos) << good;
  reshaped.replace(reshaped.find(w), w.size(), "\"name\": \"w\", \"slot\": \"\", \"dtype\": \"float32\", \"shape\": [1, 8]");
  refused(reshaped, "'w' is float32 [1,8], this run's graph has float32 [8,1]");
  std::string missing = good;  // the record of b's velocity, a line of its own
  const size_t at = missing.find("{\"name\": \"b\", \"slot\": \"velocity\"");
  ASSERT_NE(at, std::string::npos) << good;
  const size_t line = missing.rfind('\n', at);
  missing.erase(line, missing.find('\n', at) - line);
  if (missing.find("}\n  ]") == std::string::npos) missing.replace(missing.find("},\n  ]"), 3, "}\n");
  refused(missing, "has no 'b/velocity'");
  std::ofstream(manifest, std::ios::trunc) << good;
  EXPECT_EQ(run_cli(linreg("--resume " + ck.string() + " --output " + out.string(), 2)).exit_code, 1) << "the control";
}

// Defects 1 and 2 through mlph-export: a CRC-consistent checkpoint of CosmoFlow whose dense kernel has
// 20 dims (their product 1 mod 2^64) crashed it; one of [2^62 + 1, 4] wrote heap bytes into the .npz.
TEST(MlphExport, HostileShapesAreRefusedInOneLine) {
  const fs::path dir = fresh_dir("export-hostile-" + std::to_string(getpid()));
  struct Case {
    int64_t values;     // written: CRC and size are consistent
    std::string shape;  // then stated
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {1, "6280111091792576901, 6139343578876104525, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1",
            "tensor 'dense1.kernel' has 20 dims, more than the 8 of a tensor"},
           {4, "4611686018427387905, 4",
            "tensor 'dense1.kernel' of shape [4611686018427387905,4] is not the 16 bytes the manifest says"}}) {
    const fs::path ck = dir / "ck";
    fs::remove_all(ck);
    core::CheckpointWriter writer(ck, 1);
    const float values[4] = {1, 2, 3, 4};
    writer.add("dense1.kernel", "", MLPH_DTYPE_F32, {c.values}, values);
    core::CheckpointIdentity id;
    id.benchmark = id.workload = "cosmoflow", id.backend = "reference";
    const fs::path written = writer.commit(id, {1, 1, 1, {}}, 2);
    std::string manifest = slurp(written / "manifest.json");
    const size_t from = manifest.find("\"shape\": ["), to = manifest.find(']', from) + 1;
    manifest.replace(from, to - from, "\"shape\": [" + c.shape + "]");
    std::ofstream(written / "manifest.json", std::ios::trunc) << manifest;
    const CliResult r = run_command(std::string(MLPH_BINARY_DIR "/bin/mlph-export ") + ck.string() + " " +
                                    (dir / "w.npz").string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_SAYS(r.output, (written / "manifest.json").string() + ": " + c.expected);
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(dir / "w.npz"));
  }
  fs::remove_all(dir);
}
