// mlperf-run under a real Slurm (tools/slurm/local-cluster.sh start: one node, Slurm 22.05, PMIx),
// as HPC sites run it: the job scripts of tools/slurm/ submitted with sbatch. A 2-task job trains the
// CosmoFlow mini with srun --mpi=pmix and with mpirun inside the allocation; Slurm's placement and CPU
// binding reach the log and the backend; a requeue (preemption) and the time limit's warning stop
// the run at a step with a checkpoint from which the requeued job goes on by itself, to the weights
// of a run never stopped; a task killed outright ends the job within comms.timeout_s, leaving no
// staged copy and the last checkpoint whole; a submission campaign is one job array.
//
// Skipped without a cluster (SLURM_CONF unset or its slurmctld down). The jobs take the node's 2
// CPUs each, so the tests run one at a time (CI: `ctest -L slurm_test -j1`, after `local-cluster.sh
// start`); each prints the figures it measures (FIGURE lines).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "../integration/cli.hpp"
#include "mlph/core/checkpoint_file.hpp"
#include "scoring.hpp"

using namespace mlph;
using namespace mlph::test;
using namespace mlph::submission;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kRun = MLPH_BINARY_DIR "/bin/mlperf-run";
const std::string kJob = MLPH_SOURCE_DIR "/tools/slurm/mlperf.sbatch";

// The CosmoFlow mini, cut to CI's size: 32^3 samples, 2 ranks of batch 2 (16 samples: 4 steps an
// epoch), one thread per rank (a task's one CPU; the same for the runs compared bit for bit).
const std::string kMiniSeedless = "--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --division open "
                                  "--set optimizer.warmup_epochs=0 --set train.batch_size=2 --set backend.threads=1 ";
const std::string kMini = kMiniSeedless + "--seed 4242 ";

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool cluster_up() {
  if (!std::getenv("SLURM_CONF")) return false;
  return run_command("timeout 10 scontrol ping").output.find("is UP") != std::string::npos;
}

#define REQUIRE_CLUSTER()                                                                                  \
  if (!cluster_up())                                                                                       \
  GTEST_SKIP() << "no Slurm cluster: eval \"$(tools/slurm/local-cluster.sh start)\" (SLURM_CONF names it)"

void figure(const std::string& what, double seconds) {
  std::printf("FIGURE %s: %.2f s\n", what.c_str(), seconds);
  testing::Test::RecordProperty(what, std::to_string(seconds));
}

// The test's dataset: `train` training and `valid` validation samples (one global batch at least).
fs::path dataset(int train = 16, int valid = 4) {
  const fs::path d = fresh_dir(std::string("slurm-data-") + testing::UnitTest::GetInstance()->current_test_info()->name());
  const CliResult r = run_cli(kMini + "--set data.synthetic.format=tfrecord --set data.synthetic.valid=" +
                              std::to_string(valid) + " --set data.synthetic.train=" + std::to_string(train) +
                              " --generate-data " + d.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return d;
}

// `scontrol show job -o`, as key -> value.
std::map<std::string, std::string> job_fields(const std::string& id) {
  std::map<std::string, std::string> fields;
  std::istringstream words(run_command("scontrol show job -o " + id).output);
  for (std::string word; words >> word;)
    if (const size_t eq = word.find('='); eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  return fields;
}

struct Job {
  std::string id;
  fs::path output;  // the job's stdout and stderr (all its attempts)
  Clock::time_point submitted;
};

// sbatch with `options`, the environment `env` (VAR=value ...) and `script` + `args`.
Job submit(const std::string& env, const std::string& options, const std::string& script, const std::string& args,
           const fs::path& output) {
  Job job{"", output, Clock::now()};
  const CliResult r = run_command(env + " sbatch --parsable -o " + output.string() + " " + options + " " + script + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  job.id = r.output.substr(0, r.output.find_first_of(";\n"));
  return job;
}

struct Ended {
  std::string state;
  int exit_code = -1;
  int restarts = 0;
  double queued_s = -1, total_s = 0;  // sbatch to the first RUNNING, sbatch to the end
};

// Polls the job until it has ended for good (a requeued job runs again), calling `watch` with its
// state meanwhile; fails the test past `limit`.
Ended wait_for(const Job& job, std::chrono::seconds limit, const std::function<void(const std::string&)>& watch = {}) {
  Ended ended;
  for (;;) {
    std::map<std::string, std::string> f = job_fields(job.id);
    const std::string state = f.count("JobState") ? f.at("JobState") : "";
    const double since = std::chrono::duration<double>(Clock::now() - job.submitted).count();
    if (state == "RUNNING" && ended.queued_s < 0) ended.queued_s = since;
    if (state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT" ||
        state == "NODE_FAIL" || state == "OUT_OF_MEMORY" || state == "PREEMPTED") {
      ended.state = state, ended.total_s = since;
      ended.exit_code = std::atoi(f["ExitCode"].c_str());
      ended.restarts = std::atoi(f["Restarts"].c_str());
      return ended;
    }
    if (Clock::now() - job.submitted > limit) {
      run_command("scancel " + job.id);
      ADD_FAILURE() << "job " << job.id << " still " << state << " after " << limit.count() << " s\n" << slurp(job.output);
      return ended;
    }
    if (watch) watch(state);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Waits until `file` holds `text` (or the limit passes: false).
bool wait_for_text(const fs::path& file, const std::string& text, std::chrono::seconds limit) {
  for (const auto start = Clock::now(); Clock::now() - start < limit;) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string last_line(const fs::path& log) {
  const std::vector<std::string> lines = read_lines(log);
  return lines.empty() ? "" : lines.back();
}

// The pid of the mlperf-run that is task `task` of `job_id`, or -1.
pid_t task_pid(const std::string& job_id, int task) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (slurp(entry.path() / "cmdline").find("mlperf-run") == std::string::npos) continue;
    const std::string env = slurp(entry.path() / "environ");
    if (env.find("SLURM_JOB_ID=" + job_id + '\0') != std::string::npos &&
        env.find("SLURM_PROCID=" + std::to_string(task) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

std::string env_for(const std::string& more = "") { return "MLPERF_RUN=" + kRun + " " + more; }

}  // namespace

// Item 1 and 2: sbatch of the 2-task job script, srun --mpi=pmix. The log passes the official
// checker and says 2 ranks on 1 node; srun's placement and the task's one CPU (--cpu-bind=cores)
// are in it, and the backend ran one thread (backend.threads left to its default).
TEST(Slurm, SbatchSrunPmixTrainsTheMini) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-srun");
  const std::string args = "--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --division open --seed 4242 "
                           "--set optimizer.warmup_epochs=0 --set train.batch_size=2 --set train.epochs=1 "
                           "--set train.target_mae=10 --data " + dataset().string() + " --output " + (dir / "out").string();
  const Job job = submit(env_for(), "", kJob, args, dir / "job.out");
  const Ended ended = wait_for(job, std::chrono::seconds(120));
  ASSERT_EQ(ended.state, "COMPLETED") << slurp(job.output);
  EXPECT_EQ(ended.exit_code, 0);
  figure("sbatch to the job's start", ended.queued_s);
  figure("sbatch to the job's end (1 epoch of the mini on 2 tasks)", ended.total_s);
  const fs::path log = dir / "out" / "result_0.txt";
  std::map<std::string, std::string> values = mllog_values(log);
  EXPECT_EQ(values["number_of_ranks"], "2");
  EXPECT_EQ(values["number_of_nodes"], "1");
  EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
  const std::string slurm = slurp(log).substr(slurp(log).find("\"key\": \"mlph_slurm\""));
  EXPECT_NE(slurm.find("\"job_id\": \"" + job.id + "\""), std::string::npos) << slurm.substr(0, 300);
  EXPECT_NE(slurm.find("\"tasks\": 2, \"tasks_on_node\": 2, \"local_rank\": 0, \"cpus\": 1"), std::string::npos)
      << slurm.substr(0, 300);
  const std::string checker = official_checker();
  if (checker.empty()) GTEST_SKIP() << "../shared/tools/mllog-check is not beside this checkout: checker not run";
  const CliResult check = run_command("PATH=/usr/bin:$PATH " + checker + " " + with_eval_error_under_target(log).string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

// Item 1: mpirun inside the allocation (Open MPI takes the 2 tasks from Slurm). Its ranks are not
// srun's tasks: the log has no mlph_slurm, the topology is MPI's.
TEST(Slurm, MpirunInsideTheAllocation) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-mpirun");
  const std::string args = kMini + "--set train.epochs=1 --set train.target_mae=10 --data " + dataset().string() +
                           " --output " + (dir / "out").string();
  const Job job = submit(env_for("MLPERF_LAUNCHER=mpirun OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                 "OMPI_MCA_btl_vader_single_copy_mechanism=none"),
                         "", kJob, args, dir / "job.out");
  const Ended ended = wait_for(job, std::chrono::seconds(120));
  ASSERT_EQ(ended.state, "COMPLETED") << slurp(job.output);
  const fs::path log = dir / "out" / "result_0.txt";
  std::map<std::string, std::string> values = mllog_values(log);
  EXPECT_EQ(values["number_of_ranks"], "2");
  EXPECT_EQ(values["number_of_nodes"], "1");
  EXPECT_EQ(values.count("mlph_slurm"), 0u);
  EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
}

// Item 2: srun starting tasks that each see one rank (--comms local) is refused in one line before
// any log, instead of training two runs into one log. (Without PMIx, Open MPI itself refuses to
// start under srun: no log either.)
TEST(Slurm, TasksThatEachSeeOneRankAreRefused) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-local");
  const std::string run = kMini + "--data " + dataset().string() + " --output " + (dir / "out").string();
  const CliResult local = run_command("srun -n 2 " + kRun + " --comms local " + run);
  EXPECT_NE(local.exit_code, 0) << local.output;
  EXPECT_NE(local.output.find("srun started 2 tasks (SLURM_STEP_NUM_TASKS) but comms local sees one rank in each"),
            std::string::npos)
      << local.output;
  const CliResult no_pmix = run_command("srun -n 2 --mpi=none " + kRun + " --comms mpi " + run);
  EXPECT_NE(no_pmix.exit_code, 0) << no_pmix.output;
  EXPECT_FALSE(fs::exists(dir / "out" / "result_0.txt"));
}

// Item 3, preemption: `scontrol requeue` sends the job SIGTERM; the run stops at the next step with a
// checkpoint inside the epoch, Slurm requeues the job, and the next attempt goes on from the
// checkpoint (--resume auto) to the weights of a run never stopped, bit for bit (that run: mpirun
// outside Slurm, one thread a rank as here). The first attempt's log is kept, aborted with the reason.
TEST(Slurm, RequeuedJobGoesOnFromItsCheckpointBitwise) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-requeue");
  const std::string run = kMini + "--set train.epochs=1 --set train.target_mae=10 --data " + dataset(32).string();
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1), setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  const CliResult whole = run_command(MLPH_MPIEXEC " --oversubscribe -np 2 " + kRun + " --comms mpi " + run + " --output " +
                                      (dir / "whole").string() + " --export-weights " + (dir / "whole.npz").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  const Job job = submit(env_for(), "", kJob,
                         run + " --output " + (dir / "out").string() + " --checkpoint-dir " + (dir / "ck").string() +
                             " --export-weights " + (dir / "stopped.npz").string(),
                         dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 1/1  step 2/", std::chrono::seconds(120))) << slurp(job.output);
  ASSERT_EQ(run_command("scontrol requeue " + job.id).exit_code, 0);
  const Ended ended = wait_for(job, std::chrono::seconds(240));
  ASSERT_EQ(ended.state, "COMPLETED") << slurp(job.output);
  EXPECT_EQ(ended.restarts, 1);
  const std::string printed = slurp(job.output);
  EXPECT_NE(printed.find("mlperf-run: SIGTERM (the time limit, a preemption or requeue"), std::string::npos) << printed;
  EXPECT_NE(printed.find("--resume auto: going on from the newest checkpoint"), std::string::npos) << printed;
  const std::string first = last_line(dir / "out" / "result_0.attempt-1.txt");
  EXPECT_NE(first.find("\"status\": \"aborted\""), std::string::npos) << first;
  EXPECT_NE(first.find("checkpoint " + (dir / "ck").string() + "/epoch-000000-step-"), std::string::npos) << first;
  const fs::path log = dir / "out" / "result_0.txt";
  EXPECT_NE(slurp(log).find("mlph_resumed_from"), std::string::npos);
  EXPECT_NE(slurp(log).find("\"restarts\": 1"), std::string::npos);
  EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
  EXPECT_TRUE(slurp(dir / "whole.npz") == slurp(dir / "stopped.npz")) << "the requeued run's weights differ";
}

// Item 3, the time limit: with --time=1 and --signal=B:USR1@55 (the script's own B:USR1, at the
// latest), Slurm warns the batch script within about 35 s (it checks limits every 30 s); the script
// passes the warning on, the run stops at the next step with a checkpoint and exits 3, the script
// requeues the job, and the next attempt goes on from the checkpoint. scancel then ends it for good:
// the run saves again (SIGTERM) and the script does not requeue a cancelled job. Figure: from the
// warning to the checkpoint on disk.
TEST(Slurm, TimeLimitWarningCheckpointsAndTheJobRequeuesItself) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-time-limit");
  const fs::path checkpoints = dir / "ck";
  const Job job = submit(env_for(), "--time=1 --signal=B:USR1@55", kJob,
                         kMini + "--set train.epochs=1000 --set train.target_mae=0.0001 --data " + dataset().string() +
                             " --output " + (dir / "out").string() + " --checkpoint-dir " + checkpoints.string(),
                         dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "attempt 2", std::chrono::seconds(150))) << slurp(job.output);
  const std::string printed = slurp(job.output);
  const size_t warned = printed.find("mlperf.sbatch: SIGUSR1 at ");
  ASSERT_NE(warned, std::string::npos) << printed;
  EXPECT_NE(printed.find("mlperf-run: SIGUSR1 (Slurm's warning before the time limit"), std::string::npos) << printed;
  EXPECT_NE(printed.find("requeueing job " + job.id), std::string::npos) << printed;
  // The warning's time (the script's clock) to the checkpoint's manifest on disk.
  const double signal_time = std::stod(printed.substr(warned + 26));
  const std::string first = last_line(dir / "out" / "result_0.attempt-1.txt");
  const std::string lead = "checkpoint " + checkpoints.string() + "/";
  const size_t named = first.find(lead);
  ASSERT_NE(named, std::string::npos) << first;
  const std::string name = first.substr(named + lead.size(), first.find(" saved", named) - named - lead.size());
  const auto written = fs::last_write_time(checkpoints / name / "manifest.json");
  const double written_s = std::chrono::duration<double>(
      std::chrono::file_clock::to_sys(written).time_since_epoch()).count();
  if (written_s >= signal_time)  // else the warning came as the epoch's own checkpoint was written: reused
    figure("SIGUSR1 to the checkpoint on disk", written_s - signal_time);
  EXPECT_LT(written_s - signal_time, 30.0);

  // The second attempt trains on from the checkpoint ("resumed at step ..." inside an epoch, "resumed
  // after epoch ..." when the warning came before a first step or at an epoch's end); scancel ends it.
  ASSERT_TRUE(wait_for_text(job.output, "note: resumed ", std::chrono::seconds(60))) << slurp(job.output);
  for (const auto start = Clock::now(); Clock::now() - start < std::chrono::seconds(60);) {
    const std::string now = slurp(job.output);
    if (now.find("  step ", now.find("note: resumed ")) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  run_command("scancel " + job.id);
  const Ended ended = wait_for(job, std::chrono::seconds(60));
  EXPECT_EQ(ended.state, "CANCELLED");
  EXPECT_GE(ended.restarts, 1);
  const std::string all = slurp(job.output);
  EXPECT_NE(all.find("mlperf-run: SIGTERM (the time limit"), std::string::npos) << all;
  EXPECT_NE(all.find("not requeued here"), std::string::npos) << all;
}

// Item 3: srun sends SIGKILL only KillWait after SIGTERM, so under it a run without checkpoints
// also waits for its step to end (steps of 8 samples: longer than the half second it waits elsewhere)
// and its log says where it stopped, instead of "blocked in a step or collective".
TEST(Slurm, ScancelEndsARunAtItsNextStep) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-scancel");
  const Job job = submit(env_for(), "", kJob,
                         kMini + "--set train.batch_size=8 --set train.epochs=1000 --set train.target_mae=0.0001 "
                                 "--data " + dataset(16, 16).string() + " --output " + (dir / "out").string(),
                         dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 1/1000  step 1/1", std::chrono::seconds(120))) << slurp(job.output);
  run_command("scancel " + job.id);
  const Ended ended = wait_for(job, std::chrono::seconds(60));
  EXPECT_EQ(ended.state, "CANCELLED");
  const std::string last = last_line(dir / "out" / "result_0.txt");
  EXPECT_NE(last.find("SIGTERM (the time limit, a preemption or requeue, scancel, or a launcher ending the job): "
                      "stopped before training step 1 of 1"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("no checkpoint (no --checkpoint-dir)"), std::string::npos) << last;
}

// Item 4: a task killed outright (a node failing) mid-epoch, with checkpoints and staged data: the
// other rank's next collective times out (comms.timeout_s = 5) or srun ends it, so every rank ends
// within the timeout; the job fails, rank 0's log ends aborted, no staged copy is left, and the
// checkpoint of the epoch before is whole.
TEST(Slurm, AKilledTaskFailsTheJobLeavingNothingStagedAndTheCheckpointWhole) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-kill");
  fs::create_directories(dir / "target");
  const Job job = submit(env_for(), "", kJob,
                         kMini + "--set train.epochs=10 --set train.target_mae=0.0001 --set comms.timeout_s=5 "
                                 "--storage stage --set storage.target=" + (dir / "target").string() + " --data " +
                             dataset().string() + " --output " + (dir / "out").string() + " --checkpoint-dir " +
                             (dir / "ck").string(),
                         dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 2/10  step 1/", std::chrono::seconds(120))) << slurp(job.output);
  const pid_t victim = task_pid(job.id, 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  const auto killed = Clock::now();
  const Ended ended = wait_for(job, std::chrono::seconds(90));
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  figure("a task killed to the job's end", took);
  EXPECT_LT(took, 5.0 + 10.0) << "comms.timeout_s 5 plus Slurm's bookkeeping";
  EXPECT_EQ(ended.state, "FAILED") << slurp(job.output);
  const std::string last = last_line(dir / "out" / "result_0.txt");
  EXPECT_EQ(mllog_key(last), "run_stop") << last;
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  EXPECT_TRUE(fs::is_empty(dir / "target")) << "a staged copy was left behind";
  const core::CheckpointReader checkpoint(dir / "ck");  // checked: sizes and every tensor's CRC
  EXPECT_EQ(checkpoint.dir().filename(), "epoch-000001");
}

// Item 5: mlperf-run --runs 2 --slurm writes the campaign as one job array; one sbatch runs it; each
// task writes its log into the submission tree and the system description from it; mlperf-score
// reads the tree (3.0.0 rules: 2 runs of 10, and 1 epoch cannot reach the closed target).
TEST(Slurm, ACampaignIsOneJobArray) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("slurm-campaign");
  const CliResult written = run_cli(kMiniSeedless + "--comms mpi --set train.epochs=1 --set train.target_mae=10 --data " +
                                    dataset().string() + " --runs 2 --slurm --org acme --system box1 --seed 41 --output " +
                                    (dir / "sub").string());
  ASSERT_EQ(written.exit_code, 0) << written.output;
  const fs::path script = dir / "sub" / "slurm" / "box1-cosmoflow.sbatch";
  ASSERT_TRUE(fs::exists(script)) << written.output;
  const Job job = submit("", "-n 2", script.string(), "", dir / "array.out");
  // The array's tasks are jobs <id>_0 and <id>_1; each must end.
  for (int i = 0; i < 2; ++i) {
    const Job task{job.id + "_" + std::to_string(i), dir / "array.out", job.submitted};
    const Ended ended = wait_for(task, std::chrono::seconds(180));
    EXPECT_EQ(ended.state, "COMPLETED") << i;
  }
  const fs::path results = dir / "sub" / "acme" / "results" / "box1" / "strong" / "cosmoflow";
  for (int i = 0; i < 2; ++i) {
    const fs::path log = results / ("result_" + std::to_string(i) + ".txt");
    EXPECT_EQ(mllog_values(log)["seed"], std::to_string(41 + i));
    EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
  }
  // The tree as the package checker reads it: a whole system description, both logs read; each run
  // breaks only the closed target rule (one epoch cannot reach it).
  const Submission sub = score_submission(dir / "sub" / "acme", "3.0.0");
  ASSERT_EQ(sub.systems.size(), 1u);
  EXPECT_TRUE(sub.systems[0].errors.empty()) << sub.systems[0].errors.front();
  EXPECT_EQ(sub.systems[0].desc.at("number_of_nodes"), "1");
  ASSERT_EQ(sub.systems[0].benchmarks.size(), 1u);
  const BenchmarkResult& b = sub.systems[0].benchmarks[0];
  ASSERT_EQ(b.runs.size(), 2u);
  for (const RunResult& r : b.runs) {
    ASSERT_EQ(r.verdict.errors.size(), 1u) << r.verdict.errors.front();
    EXPECT_NE(r.verdict.errors[0].find("eval_error: no value passes"), std::string::npos) << r.verdict.errors[0];
  }
}
