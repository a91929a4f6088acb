// tools/slurm/mlperf.sbatch outside Slurm (issue 36): the script's own decisions, with fake launchers
// and a fake scontrol on PATH. How the run ended is read from what the run left (--status-file), not
// from the launcher (defect 4: mpirun, itself sent SIGTERM, exits 1 after its ranks saved and exited
// 3); the script reads mlperf-run's options as mlperf-run does and never doubles one (defect 6), and
// mlperf-run takes whole option names only. (tests/slurm runs the script under a real Slurm.)
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "cli.hpp"
#include "mlph/core/checkpoint_file.hpp"
#include "mlph/test/tiny_run.hpp"

using namespace mlph;
using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

const std::string kScript = MLPH_SOURCE_DIR "/tools/slurm/mlperf.sbatch";
const std::string kRun = MLPH_BINARY_DIR "/bin/mlperf-run";

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_program(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
  fs::permissions(file, fs::perms::owner_all);
}

// srun that records its arguments, one per line, and exits 0 (the run is not started).
fs::path recording_srun(const fs::path& dir) {
  fs::create_directories(dir / "bin");
  write_program(dir / "bin" / "srun", "#!/bin/bash\nprintf '%s\\n' \"$@\" >\"$FAKE_ARGS\"\n");
  return dir / "bin";
}

// The words srun was given for `args` (the script run with MLPERF_RUN=/bin/true).
std::vector<std::string> launched(const fs::path& dir, const std::vector<std::string>& args) {
  const fs::path bin = recording_srun(dir), record = dir / "args.txt";
  fs::remove(record);
  std::string command = "cd " + dir.string() + " && env PATH=" + bin.string() + ":$PATH FAKE_ARGS=" + record.string() +
                        " MLPERF_RUN=/bin/true bash " + kScript;
  for (const std::string& a : args) command += " '" + a + "'";
  const CliResult r = run_command(command);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> words;
  std::istringstream in(slurp(record));
  for (std::string w; std::getline(in, w);) words.push_back(w);
  return words;
}

// The words srun was given before the program `program` when `script` ran (with `env` before it):
// the launch options, the part both job scripts must agree on.
std::vector<std::string> srun_options(const fs::path& dir, const std::string& env, const std::string& script,
                                      const std::string& program) {
  const fs::path bin = recording_srun(dir), record = dir / "args.txt";
  fs::remove(record);
  const CliResult r = run_command("cd " + dir.string() + " && env PATH=" + bin.string() + ":$PATH FAKE_ARGS=" +
                                  record.string() + " " + env + " bash " + script);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> words;
  std::istringstream in(slurp(record));
  for (std::string w; std::getline(in, w) && w != program;) words.push_back(w);
  return words;
}

}  // namespace

// Issue 40: the campaign's job array (mlperf-run --runs N --slurm) launches each run as mlperf.sbatch
// launches its run: the same srun options, the task's CPUs bound to cores unless MLPERF_SRUN_ARGS says
// otherwise (the binding is every backend's default thread count). Both come from one line
// (core::kSrunLaunch; the script's own copy is pinned here).
TEST(JobScript, TheCampaignsJobArrayLaunchesAsMlperfSbatchDoes) {
  const fs::path dir = fresh_dir("job-script-campaign");
  const CliResult wrote = run_cli("--workload cosmoflow --division open --comms mpi --runs 2 --slurm --org acme --system "
                                  "box1 --seed 5 --output " + (dir / "out").string());
  ASSERT_EQ(wrote.exit_code, 0) << wrote.output;
  const std::string array = (dir / "out" / "slurm" / "box1-cosmoflow.sbatch").string();
  for (const std::string& binding : {std::string(), std::string("MLPERF_SRUN_ARGS=--cpu-bind=none")}) {
    const std::vector<std::string> sbatch = srun_options(dir, binding + " MLPERF_RUN=/bin/true", kScript, "/bin/true");
    const std::vector<std::string> campaign = srun_options(dir, binding + " SLURM_ARRAY_TASK_ID=1", array, kRun);
    const std::vector<std::string> expected = {"--mpi=pmix", "--kill-on-bad-exit=1",
                                               binding.empty() ? "--cpu-bind=cores" : "--cpu-bind=none"};
    EXPECT_EQ(sbatch, expected) << binding;
    EXPECT_EQ(campaign, expected) << binding;
  }
  // A launcher given with --launcher is the campaign's own choice: taken as written.
  ASSERT_EQ(run_cli("--workload cosmoflow --division open --runs 2 --slurm --org acme --system box2 --launcher "
                    "\"srun --cpu-bind=sockets\" --output " + (dir / "out").string()).exit_code, 0);
  EXPECT_EQ(srun_options(dir, "SLURM_ARRAY_TASK_ID=0", (dir / "out" / "slurm" / "box2-cosmoflow.sbatch").string(), kRun),
            std::vector<std::string>{"--cpu-bind=sockets"});
}

// Property test of the script's argument scan: random arrangements of the options it looks for, in
// each spelling mlperf-run takes (--opt V, --opt=V, -o V, -oV), among others. The run gets --resume
// exactly once when it has checkpoints (the user's, or `auto` added), never twice, and its status file
// lies in the --output mlperf-run will use.
TEST(JobScript, OptionsAreReadAsMlperfRunReadsThemAndNeverDoubled) {
  const fs::path dir = fresh_dir("job-script-args");
  std::mt19937 rng(36);
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::vector<std::string>> groups = {{"--seed", "3"}, {"--set", "train.epochs=2"}};
    const size_t checkpoint = pick(3), resume = pick(4), output = pick(5);
    if (checkpoint == 1) groups.push_back({"--checkpoint-dir", "ck dir"});
    if (checkpoint == 2) groups.push_back({"--checkpoint-dir=ck"});
    if (resume == 1) groups.push_back({"--resume", "ck/epoch-000001"});
    if (resume == 2) groups.push_back({"--resume=auto"});
    if (resume == 3) groups.push_back({"--resume", "auto"});
    const std::string out = "out" + std::to_string(trial);
    if (output == 1) groups.push_back({"--output", out});
    if (output == 2) groups.push_back({"--output=" + out});
    if (output == 3) groups.push_back({"-o", out});
    if (output == 4) groups.push_back({"-o" + out});
    std::shuffle(groups.begin(), groups.end(), rng);
    std::vector<std::string> args;
    for (const auto& g : groups) args.insert(args.end(), g.begin(), g.end());
    const std::vector<std::string> words = launched(dir, args);
    size_t resumes = 0;
    for (const std::string& w : words) resumes += w == "--resume" || w.rfind("--resume=", 0) == 0;
    EXPECT_EQ(resumes, resume != 0 || checkpoint != 0 ? 1u : 0u) << trial;
    const auto status = std::find(words.begin(), words.end(), "--status-file");
    ASSERT_NE(status, words.end()) << trial;
    EXPECT_EQ(*(status + 1), (output == 0 ? "out" : out) + "/.result_0.status") << trial;
    EXPECT_EQ(std::vector<std::string>(words.end() - static_cast<std::ptrdiff_t>(args.size()) -
                                           (resume == 0 && checkpoint != 0 ? 2 : 0),
                                       words.end() - (resume == 0 && checkpoint != 0 ? 2 : 0)),
              args)
        << trial << ": the user's words, in order, untouched";
  }
  // mlperf-run takes no guessed abbreviation, which the script would not recognise.
  const CliResult guessed = run_cli("--workload cosmoflow --checkpoint-d " + (dir / "ck").string());
  EXPECT_EQ(guessed.exit_code, 2) << guessed.output;
  EXPECT_NE(guessed.output.find("unrecognised option '--checkpoint-d'"), std::string::npos) << guessed.output;
  EXPECT_FALSE(fs::exists(dir / "ck"));
}

// Defect 4: under mpirun, SIGTERM at the time limit reaches the launcher too. The fake mpirun passes it
// to its rank and exits 1 once the rank has ended, as Open MPI's does; the rank stops at its next step,
// saves and exits 3. The script reads the run's status (3) and requeues the job (fake scontrol).
TEST(JobScript, MpirunExitingOneAfterTheRunSavedIsRequeued) {
  if (!fs::exists(fs::path(MLPH_PLUGIN_DIR) / "libmlph-comms-mpi.so")) GTEST_SKIP() << "no MPI comms plug-in";
  const fs::path dir = fresh_dir("job-script-mpirun");
  const std::string flags = tiny_cosmoflow(2) +
                            "--set train.epochs=3 --set optimizer.warmup_epochs=0 --set train.target_mae=0.0001 "
                            "--set backend.threads=1 --seed 1234 ";
  ASSERT_EQ(run_cli(flags + generate_data(8, 4, dir / "data")).exit_code, 0);
  fs::create_directories(dir / "bin");
  write_program(dir / "bin" / "mpirun",
                "#!/usr/bin/python3\n"
                "import os, signal, subprocess, sys\n"
                "rank = subprocess.Popen(sys.argv[1:])\n"
                "signal.signal(signal.SIGTERM, lambda s, f: rank.send_signal(signal.SIGTERM))\n"
                "signal.signal(signal.SIGUSR1, lambda s, f: rank.send_signal(signal.SIGUSR1))\n"
                "open(os.environ['FAKE_MPIRUN_PID'], 'w').write(str(os.getpid()))\n"
                "rank.wait()\n"
                "sys.exit(1)  # Open MPI's mpirun, sent SIGTERM, whatever its ranks did\n");
  write_program(dir / "bin" / "scontrol",
                "#!/bin/bash\n"
                "case $1 in\n"
                "  show) echo \"JobId=$3 JobState=RUNNING Reason=None\" ;;\n"
                "  requeue) echo \"requeue $2\" >>\"$FAKE_SCONTROL_LOG\" ;;\n"
                "esac\n");
  const std::string command = "cd " + dir.string() + " && exec env PATH=" + (dir / "bin").string() +
                              ":$PATH OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MLPERF_LAUNCHER=mpirun MLPERF_RUN=" + kRun + " SLURM_JOB_ID=4242 FAKE_MPIRUN_PID=" +
                              (dir / "mpirun.pid").string() + " FAKE_SCONTROL_LOG=" + (dir / "scontrol.log").string() +
                              " bash " + kScript + " " + flags + "--data data --output out --checkpoint-dir ck >" +
                              (dir / "job.out").string() + " 2>&1";
  const pid_t job = fork();
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool sent = false;
  int status = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!sent && slurp(dir / "job.out").find("epoch 2/3  step 1/") != std::string::npos &&
        fs::exists(dir / "mpirun.pid")) {
      kill(std::stoi(slurp(dir / "mpirun.pid")), SIGTERM);
      sent = true;
    }
    if (waitpid(job, &status, WNOHANG) == job) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string printed = slurp(dir / "job.out");
  ASSERT_TRUE(sent) << printed;
  ASSERT_TRUE(WIFEXITED(status)) << status << "\n" << printed;
  EXPECT_EQ(WEXITSTATUS(status), 0) << printed;
  EXPECT_NE(printed.find("mpirun exited 1; the run's status is 3"), std::string::npos) << printed;
  EXPECT_EQ(slurp(dir / "scontrol.log"), "requeue 4242\n") << printed;
  const fs::path saved = core::latest_checkpoint(dir / "ck");
  EXPECT_EQ(saved.filename().string().rfind("epoch-000001-step-", 0), 0u) << saved << "\n" << printed;
  if (!testing::Test::HasFailure()) fs::remove_all(dir);
}
