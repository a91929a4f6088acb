// mlperf-run across two nodes (tools/cluster/two-nodes.sh: two sets of Linux namespaces on this
// machine, each with its own hostname, node-local disk and /dev/shm, joined by a veth pair), launched
// as on a cluster: Open MPI's mpirun from node1, its daemon on node2 started through a launcher agent,
// the ranks talking over TCP between the nodes. What one node cannot show: number_of_nodes and local
// ranks from a real placement, weights equal to the same ranks on one node, staging into each node's
// own disk, a node that dies mid-epoch, a signal stopping ranks on both nodes, a node that runs
// something else named.
//
// The same job under Slurm across the nodes (sbatch -N 2, srun --mpi=pmix) where the cluster runs it.
//
// Skipped without the cluster (CI: `tools/setup.sh cluster` starts it and its Slurm, runs `ctest -L
// cluster_test` and stops it). Tests run one at a time (RUN_SERIAL); each prints what it measures
// (FIGURE lines).
#include <gtest/gtest.h>
#include <signal.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "../integration/cli.hpp"
#include "mlph/core/checkpoint_file.hpp"

using namespace mlph::test;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kCluster = MLPH_SOURCE_DIR "/tools/cluster/two-nodes.sh";
const std::string kRun = MLPH_BINARY_DIR "/bin/mlperf-run";
// Every launch is bounded: a hang ends in `timeout`, which mpirun passes on to every rank.
const std::string kAcross = "timeout -k 10 150 " + kCluster + " mpirun --oversubscribe ";

// The CosmoFlow mini at CI's size (32^3 samples, batch 2 a rank, one thread a rank, no warm-up), as
// the Slurm tests run it.
const std::string kSettings = "--division open --seed 4242 --set optimizer.warmup_epochs=0 --set train.batch_size=2 "
                              "--set backend.threads=1 ";
const std::string kMini = "--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml " + kSettings;

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool cluster_up() { return run_command(kCluster + " status").exit_code == 0; }

#define REQUIRE_CLUSTER() \
  if (!cluster_up()) GTEST_SKIP() << "no two-node cluster: tools/cluster/two-nodes.sh start (as root)"

void figure(const std::string& what, double seconds) {
  std::printf("FIGURE %s: %.2f s\n", what.c_str(), seconds);
  testing::Test::RecordProperty(what, std::to_string(seconds));
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// mpirun ARGS across both nodes, `per_node` ranks on each.
std::string across(int per_node) {
  return kAcross + "-np " + std::to_string(2 * per_node) + " --map-by ppr:" + std::to_string(per_node) + ":node ";
}

// The same ranks on this machine alone (no cluster): Open MPI's shared-memory path.
std::string on_one_node(int ranks) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  return "timeout -k 10 150 " MLPH_MPIEXEC " --oversubscribe -np " + std::to_string(ranks) + " ";
}

// Without `timeout` (which passes on no SIGUSR1), for the launches a test signals itself.
const std::string kAcrossOnePerNode = kCluster + " mpirun --oversubscribe -np 2 --map-by ppr:1:node ";

// The node-local disk's mount point: the same path on each node, a different disk behind it.
fs::path local_disk() {
  const std::string printed = run_command(kCluster + " disk").output;
  return printed.substr(0, printed.find('\n'));
}

// What `command` prints on `node`.
CliResult on_node(const std::string& node, const std::string& command) {
  return run_command(kCluster + " exec " + node + " sh -c '" + command + "'");
}

fs::path dataset(int train, int valid) {
  const fs::path d = fresh_dir(std::string("cluster-data-") + testing::UnitTest::GetInstance()->current_test_info()->name());
  const CliResult r = run_cli(kMini + "--set data.synthetic.format=tfrecord --set data.synthetic.valid=" +
                              std::to_string(valid) + " --set data.synthetic.train=" + std::to_string(train) +
                              " --generate-data " + d.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return d;
}

std::string last_line(const fs::path& log) {
  const std::vector<std::string> lines = read_lines(log);
  return lines.empty() ? "" : lines.back();
}

void expect_official_checker_passes(const fs::path& log) {
  const std::string checker = official_checker();
  if (checker.empty()) return;  // a fresh clone without ../shared
  const CliResult check = run_command("PATH=/usr/bin:$PATH " + checker + " " + with_eval_error_under_target(log).string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

// Item 1: the mini on 2 nodes x `per_node` ranks. Every rank's place as the plug-in sees it (node,
// local rank, node count); the run succeeds, passes the official checker, says 2 nodes; its weights
// are bitwise those of the same ranks on one node (the same reduction order: Open MPI picks its
// allreduce algorithm by rank count and size, not by the link).
void trains_across_two_nodes(int per_node) {
  const int ranks = 2 * per_node;
  const CliResult places = run_command(across(per_node) + MLPH_PROBE " topology 30");
  ASSERT_EQ(places.exit_code, 0) << places.output;
  for (int r = 0; r < ranks; ++r) {
    const std::string place = "rank " + std::to_string(r) + " of " + std::to_string(ranks) + ": local rank " +
                              std::to_string(r % per_node) + " of " + std::to_string(per_node) + ", 2 nodes, on node" +
                              std::to_string(r / per_node + 1) + "\n";
    EXPECT_NE(places.output.find(place), std::string::npos) << place << places.output;
  }

  const fs::path dir = fresh_dir("cluster-train-" + std::to_string(per_node));
  const std::string run = kRun + " --comms mpi " + kMini + "--set train.epochs=1 --set train.target_mae=10 --data " +
                          dataset(8 * ranks, 2 * ranks).string();
  const auto start = Clock::now();
  const CliResult two = run_command(across(per_node) + run + " --output " + (dir / "two").string() +
                                    " --export-weights " + (dir / "two.npz").string());
  figure("the mini, 1 epoch, 2 nodes x " + std::to_string(per_node) + " ranks", since(start));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const CliResult one = run_command(on_one_node(ranks) + run + " --output " + (dir / "one").string() +
                                    " --export-weights " + (dir / "one.npz").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;

  const fs::path log = dir / "two" / "result_0.txt";
  std::map<std::string, std::string> values = mllog_values(log);
  EXPECT_EQ(values["number_of_nodes"], "2");
  EXPECT_EQ(values["number_of_ranks"], std::to_string(ranks));
  EXPECT_EQ(mllog_values(dir / "one" / "result_0.txt")["number_of_nodes"], "1");
  EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
  expect_official_checker_passes(log);
  EXPECT_TRUE(slurp(dir / "two.npz") == slurp(dir / "one.npz")) << "the weights differ from the run on one node";
}

// A launch in the background (its output in `output`), for a test that signals or kills under it.
struct Launch {
  pid_t pid = -1;
  fs::path output;
  Clock::time_point started = Clock::now();
};

Launch launch(const std::string& command, const fs::path& output) {
  Launch l{-1, output, Clock::now()};
  l.pid = fork();
  if (l.pid == 0) {
    const std::string line = "exec " + command + " >" + output.string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return l;
}

// The launch's exit status (-1: killed by a signal, or still running after `limit`: then killed).
int wait_for(const Launch& l, std::chrono::seconds limit) {
  for (;;) {
    int status = 0;
    if (waitpid(l.pid, &status, WNOHANG) == l.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (Clock::now() - l.started > limit) {
      kill(l.pid, SIGTERM);  // mpirun passes it on to every rank
      std::this_thread::sleep_for(std::chrono::seconds(5));
      kill(l.pid, SIGKILL);
      waitpid(l.pid, &status, 0);
      ADD_FAILURE() << "still running after " << limit.count() << " s:\n" << slurp(l.output);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool wait_for_text(const fs::path& file, const std::string& text, std::chrono::seconds limit) {
  for (const auto start = Clock::now(); Clock::now() - start < limit;) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The newest checkpoint's weights in `checkpoints`, as mlph-export writes them.
std::string exported(const fs::path& checkpoints, const fs::path& npz) {
  const CliResult r = run_command(MLPH_BINARY_DIR "/bin/mlph-export " + checkpoints.string() + " " + npz.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return slurp(npz);
}

// Slurm's daemon on node2 dies with the node's other processes: started again where the cluster runs
// Slurm, for the tests after.
void revive_slurm() {
  if (run_command(kCluster + " slurm run timeout 10 scontrol ping").output.find("is UP") != std::string::npos)
    run_command(kCluster + " slurm start");
}

// What is left on each node's local disk (under `sub`), "" when nothing.
std::string left_on_nodes(const std::string& sub = "") {
  std::string left;
  for (const char* node : {"node1", "node2"}) {
    const CliResult r = on_node(node, "ls -A " + (local_disk() / sub).string());
    if (!r.output.empty()) left += std::string(node) + ": " + r.output;
  }
  return left;
}

}  // namespace

TEST(TwoNodes, CosmoFlowMiniOneRankPerNode) {
  REQUIRE_CLUSTER();
  trains_across_two_nodes(1);
}

TEST(TwoNodes, CosmoFlowMiniTwoRanksPerNode) {
  REQUIRE_CLUSTER();
  trains_across_two_nodes(2);
}

// Figure: an allreduce of CosmoFlow's 8.9 M fp32 gradients between the nodes (TCP over the veth
// pair) against the same 2 ranks on one node (shared memory). Asserts only that both ran.
TEST(TwoNodes, AllreduceRateBetweenNodesAndWithinOne) {
  REQUIRE_CLUSTER();
  const CliResult between = run_command(across(1) + MLPH_PROBE " allreduce-rate 60");
  ASSERT_EQ(between.exit_code, 0) << between.output;
  const CliResult within = run_command(on_one_node(2) + MLPH_PROBE " allreduce-rate 60");
  ASSERT_EQ(within.exit_code, 0) << within.output;
  std::printf("FIGURE between nodes (TCP): %sFIGURE one node (shared memory): %s", between.output.c_str(),
              within.output.c_str());
  EXPECT_NE(between.output.find("over 2 ranks on 2 nodes"), std::string::npos) << between.output;
  EXPECT_NE(within.output.find("over 2 ranks on 1 nodes"), std::string::npos) << within.output;
}

// Item 1 under Slurm (`two-nodes.sh slurm start`: slurmctld on node1, a slurmd on each node): the job
// script as sites submit it, sbatch -N 2 -n 4 --ntasks-per-node 2 (-n: the script's own --ntasks=2 would
// otherwise win over --ntasks-per-node), srun --mpi=pmix starting the tasks on
// both nodes. The log passes the official checker, says 4 ranks on 2 nodes, and records Slurm's
// placement as rank 0 saw it (2 nodes, 2 tasks on its node, local rank 0), checked by mlperf-run
// against the comms plug-in's. Skipped when the cluster has no Slurm.
TEST(TwoNodesUnderSlurm, SbatchOnTwoNodesTrainsTheMini) {
  REQUIRE_CLUSTER();
  const std::string slurm = kCluster + " slurm run ";
  if (run_command(slurm + "timeout 10 scontrol ping").output.find("is UP") == std::string::npos)
    GTEST_SKIP() << "no Slurm on the cluster: tools/cluster/two-nodes.sh slurm start";
  const fs::path dir = fresh_dir("cluster-slurm");
  const std::string args = kMini + "--set train.epochs=1 --set train.target_mae=10 --data " + dataset(32, 8).string() +
                           " --output " + (dir / "out").string();
  const auto start = Clock::now();
  const CliResult submitted = run_command(slurm + "env MLPERF_RUN=" + kRun + " sbatch --parsable -N 2 -n 4 --ntasks-per-node 2 -o " +
                                          (dir / "job.out").string() + " " MLPH_SOURCE_DIR "/tools/slurm/mlperf.sbatch " + args);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string id = submitted.output.substr(0, submitted.output.find_first_of(";\n"));
  std::string state;
  while (since(start) < 150) {
    const std::string fields = run_command(slurm + "scontrol show job -o " + id).output;
    const size_t at = fields.find("JobState=");
    state = at == std::string::npos ? "" : fields.substr(at + 9, fields.find(' ', at) - at - 9);
    if (state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT" || state == "NODE_FAIL") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  figure("sbatch -N 2 to the job's end (1 epoch of the mini on 2 x 2 tasks)", since(start));
  if (state != "COMPLETED") run_command(slurm + "scancel " + id);
  ASSERT_EQ(state, "COMPLETED") << slurp(dir / "job.out");
  const fs::path log = dir / "out" / "result_0.txt";
  std::map<std::string, std::string> values = mllog_values(log);
  EXPECT_EQ(values["number_of_ranks"], "4");
  EXPECT_EQ(values["number_of_nodes"], "2");
  EXPECT_NE(last_line(log).find("\"status\": \"success\""), std::string::npos) << last_line(log);
  const std::string text = slurp(log);
  const std::string placement = text.substr(text.find("\"key\": \"mlph_slurm\""), 400);
  EXPECT_NE(placement.find("\"nodes\": 2, \"tasks\": 4, \"tasks_on_node\": 2, \"local_rank\": 0"), std::string::npos)
      << placement;
  expect_official_checker_passes(log);
}

// Item 2: storage.stage into each node's own disk. Each node holds its ranks' shard only (the plug-in
// checks it: a shared target fails), the run succeeds, the log's mlph_staging_nodes gives each node's
// figures, and nothing is left on either node. A node
// whose disk is too small (node2's, 64 KiB) fails the run in one line naming the node and rank, on
// every rank, and leaves nothing staged on either node.
TEST(TwoNodes, StagingGoesToEachNodesOwnDisk) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("cluster-stage");
  const fs::path disk = local_disk();
  const std::string run = kRun + " --comms mpi " + kMini + "--set train.epochs=1 --set train.target_mae=10 --storage stage --data " +
                          dataset(16, 4).string();
  const auto start = Clock::now();
  const CliResult staged = run_command(across(1) + run + " --set storage.target=" + disk.string() + " --output " +
                                       (dir / "out").string());
  figure("the mini staged and trained, 2 nodes x 1 rank", since(start));
  ASSERT_EQ(staged.exit_code, 0) << staged.output;
  EXPECT_NE(staged.output.find("staged 10 files"), std::string::npos) << staged.output;  // rank 0's: 8 + 2
  EXPECT_EQ(mllog_values(dir / "out" / "result_0.txt")["number_of_nodes"], "2");
  // The figures per node: each node's one rank staged its 8 + 2 files.
  const std::string log = slurp(dir / "out" / "result_0.txt");
  const size_t per_node = log.find("\"key\": \"mlph_staging_nodes\", \"value\": [");
  ASSERT_NE(per_node, std::string::npos) << log;
  const std::string nodes = log.substr(per_node, log.find(']', per_node) - per_node);
  EXPECT_NE(nodes.find("[{\"node\": \"node1\", \"ranks\": 1, \"files\": 10, \"bytes_written\": "), std::string::npos) << nodes;
  EXPECT_NE(nodes.find("}, {\"node\": \"node2\", \"ranks\": 1, \"files\": 10, \"bytes_written\": "), std::string::npos) << nodes;
  EXPECT_EQ(left_on_nodes(), "");

  ASSERT_EQ(on_node("node1", "mkdir -p " + (disk / "small").string()).exit_code, 0);
  ASSERT_EQ(on_node("node2", "mkdir -p " + (disk / "small").string() + " && mount -t tmpfs -o size=64k small " +
                                 (disk / "small").string()).exit_code, 0);
  const CliResult full = run_command(across(1) + run + " --set storage.target=" + (disk / "small").string() +
                                     " --output " + (dir / "full").string());
  EXPECT_EQ(left_on_nodes("small"), "") << "a staged copy left after the failure";
  on_node("node2", "umount " + (disk / "small").string());
  for (const char* node : {"node1", "node2"}) on_node(node, "rmdir " + (disk / "small").string());
  EXPECT_NE(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find("storage/stage: rank 1 on node node2: " + (disk / "small").string() + "/mlperf-stage-"),
            std::string::npos) << full.output;
  EXPECT_NE(full.output.find("no space to stage"), std::string::npos) << full.output;
  EXPECT_NE(full.output.find("storage/stage: rank 0 on node node1: rank 1 on node node2 failed to stage its shard"),
            std::string::npos) << full.output;
  EXPECT_NE(last_line(dir / "full" / "result_0.txt").find("\"status\": \"aborted\""), std::string::npos);
  EXPECT_EQ(left_on_nodes(), "");
}

// Item 3: node2 dies mid-epoch, as the others see a node that fails: its link goes down in the
// second epoch, and nothing of it answers any more. Rank 0 on node1 ends within comms.timeout_s (5 s,
// plus 2 s of listening for the other ranks) in one line naming the lost rank and node, its log ends
// aborted, and the checkpoint directory holds only the whole checkpoint of epoch 1. (The launcher,
// which cannot reach node2's daemon either, ends once the node's processes are gone: killed here.)
// --resume auto on both nodes then goes on from the checkpoint to the weights of a run never
// stopped, bit for bit.
TEST(TwoNodes, ANodeThatDiesMidEpochEndsTheJobAndTheRunGoesOnFromItsCheckpoint) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("cluster-node-dies");
  const std::string run = kRun + " --comms mpi " + kMini + "--set train.epochs=2 --set train.target_mae=0.0001 " +
                          "--set comms.timeout_s=5 --data " + dataset(32, 4).string();
  const CliResult whole = run_command(across(1) + run + " --output " + (dir / "whole").string() + " --checkpoint-dir " +
                                      (dir / "whole-ck").string());
  ASSERT_TRUE(fs::exists(dir / "whole-ck" / "latest")) << whole.output;

  const Launch job = launch(kAcrossOnePerNode + run + " --output " + (dir / "out").string() + " --checkpoint-dir " +
                                (dir / "ck").string(), dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 2/2  step 2/", std::chrono::seconds(120))) << slurp(job.output);
  ASSERT_EQ(run_command(kCluster + " cut").exit_code, 0);
  const auto cut = Clock::now();
  bool survivors_ended = false;
  while (!survivors_ended && since(cut) < 30) {
    survivors_ended = run_command(kCluster + " ps node1").output.find(" mlperf-run") == std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double took = since(cut);
  run_command(kCluster + " kill node2");
  run_command(kCluster + " mend");
  revive_slurm();
  const int status = wait_for(job, std::chrono::seconds(60));
  figure("node2 cut off to the end of node1's ranks", took);
  EXPECT_TRUE(survivors_ended);
  EXPECT_LT(took, 5.0 + 2.0 + 3.0) << "comms.timeout_s, 2 s of listening for the other ranks, the abort";
  EXPECT_NE(status, 0);
  const std::string last = last_line(dir / "out" / "result_0.txt");
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  EXPECT_NE(last.find("comms/mpi: rank 0 of 2 on node1: allreduce #"), std::string::npos) << last;
  EXPECT_NE(last.find("did not complete within 5 s (comms.timeout_s): rank(s) 1 on node2 did not reach it"),
            std::string::npos) << last;
  // Only whole checkpoints: epoch 1's, read as untrusted input (sizes, every tensor's CRC).
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir / "ck")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "epoch-000001", "latest"}));
  EXPECT_EQ(mlph::core::CheckpointReader(dir / "ck").dir().filename(), "epoch-000001");

  const CliResult resumed = run_command(across(1) + run + " --output " + (dir / "again").string() + " --checkpoint-dir " +
                                        (dir / "ck").string() + " --resume auto");
  EXPECT_NE(resumed.output.find("--resume auto: going on from the newest checkpoint"), std::string::npos) << resumed.output;
  EXPECT_TRUE(exported(dir / "ck", dir / "resumed.npz") == exported(dir / "whole-ck", dir / "whole.npz"))
      << "the resumed run's weights differ from the run never stopped";
}

// Item 3, the other way a node dies: every process on node2 killed (its daemon too) mid-epoch, with
// staged data. mpirun sees its daemon gone and ends node1's ranks at once (SIGTERM, SIGKILL a second
// later): rank 0's log ends aborted and the checkpoint directory holds only whole checkpoints.
// Node2's copy stays (no rank of it was left to remove it), and so may node1's (rank 0, blocked in a
// collective, waits run.stop_grace_s to save and is killed first), until the next run on the node
// finds no rank holding the copy and removes it before staging.
TEST(TwoNodes, ANodeWhoseProcessesAreKilledEndsTheJobAtOnce) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("cluster-node-killed");
  const std::string run = kRun + " --comms mpi " + kMini + "--set train.epochs=2 --set train.target_mae=0.0001 " +
                          "--set comms.timeout_s=5 --storage stage --set storage.target=" + local_disk().string() +
                          " --data " + dataset(32, 4).string();
  const Launch job = launch(kAcrossOnePerNode + run + " --output " + (dir / "out").string() + " --checkpoint-dir " +
                                (dir / "ck").string(), dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 2/2  step 2/", std::chrono::seconds(120))) << slurp(job.output);
  ASSERT_EQ(run_command(kCluster + " kill node2").exit_code, 0);
  const auto killed = Clock::now();
  EXPECT_NE(wait_for(job, std::chrono::seconds(60)), 0);
  revive_slurm();
  figure("node2's processes killed to the job's end", since(killed));
  EXPECT_LT(since(killed), 10.0);
  const std::string last = last_line(dir / "out" / "result_0.txt");
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  EXPECT_EQ(mlph::core::CheckpointReader(dir / "ck").dir().filename(), "epoch-000001");
  EXPECT_NE(on_node("node2", "ls -A " + local_disk().string()).output.find("mlperf-stage-"), std::string::npos)
      << "node2's ranks were killed: nothing of node2 could remove its copy";

  const CliResult next = run_command(across(1) + run + " --set train.epochs=1 --set train.target_mae=10 --output " +
                                     (dir / "next").string());
  EXPECT_EQ(next.exit_code, 0) << next.output;
  EXPECT_NE(next.output.find("removed, a copy staged by a run that ended without removing it"), std::string::npos)
      << next.output;
  EXPECT_EQ(left_on_nodes(), "");
}

// Item 4: SIGUSR1 to the job (mpirun passes it to every rank on both nodes) stops every rank at one
// step boundary; rank 0 saves one checkpoint there and the job exits 3; the requeued job (--resume
// auto) goes on from it to the weights of the run never stopped, bit for bit.
TEST(TwoNodes, SigusrOneStopsBothNodesAtOneStepAndTheRequeuedJobGoesOn) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("cluster-sigusr1");
  const std::string run = kRun + " --comms mpi " + kMini + "--set train.epochs=1 --set train.target_mae=10 --data " +
                          dataset(32, 4).string();
  const CliResult whole = run_command(across(1) + run + " --output " + (dir / "whole").string() + " --export-weights " +
                                      (dir / "whole.npz").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  const std::string attempt = run + " --checkpoint-dir " + (dir / "ck").string() + " --resume auto --export-weights " +
                              (dir / "stopped.npz").string() + " --output ";
  const Launch job = launch(kAcrossOnePerNode + attempt + (dir / "first").string(), dir / "job.out");
  ASSERT_TRUE(wait_for_text(job.output, "epoch 1/1  step 2/", std::chrono::seconds(120))) << slurp(job.output);
  kill(job.pid, SIGUSR1);
  const auto signalled = Clock::now();
  EXPECT_EQ(wait_for(job, std::chrono::seconds(60)), 3) << slurp(job.output);
  figure("SIGUSR1 to the job's end (checkpoint saved)", since(signalled));
  const std::string first = last_line(dir / "first" / "result_0.txt");
  EXPECT_NE(first.find("\"status\": \"aborted\""), std::string::npos) << first;
  EXPECT_NE(first.find("checkpoint " + (dir / "ck").string() + "/epoch-000000-step-"), std::string::npos) << first;
  size_t checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(dir / "ck")) checkpoints += entry.is_directory() ? 1 : 0;
  EXPECT_EQ(checkpoints, 1u) << "one checkpoint, whichever rank saw the signal first";

  const CliResult again = run_command(across(1) + attempt + (dir / "second").string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("note: resumed "), std::string::npos) << again.output;
  EXPECT_TRUE(slurp(dir / "whole.npz") == slurp(dir / "stopped.npz")) << "the requeued run's weights differ";
}

// Item 5: a node that runs something else is refused before the log, in one line naming the node,
// the rank and the key: another configuration file at the same path on node2 (its local disk), then
// another plug-in file there.
TEST(TwoNodes, ANodeThatRunsSomethingElseIsNamed) {
  REQUIRE_CLUSTER();
  const fs::path dir = fresh_dir("cluster-inconsistent");
  const fs::path disk = local_disk();
  const std::string config = (disk / "mini.yaml").string();
  const std::string plugins = (disk / "plugins").string();
  for (const char* node : {"node1", "node2"})
    ASSERT_EQ(on_node(node, "cp " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml " + config + " && cp -r " MLPH_BINARY_DIR
                            "/lib/mlperf-hpc-1 " + plugins + " && chmod 755 " + plugins).exit_code, 0);
  ASSERT_EQ(on_node("node2", "sed -i \"s/base_lr: .*/base_lr: 0.0123/\" " + config).exit_code, 0);
  const std::string run = kRun + " --comms mpi " + kSettings + "--data " + dataset(8, 4).string() + " --config " + config;
  const CliResult config_differs = run_command(across(1) + run + " --output " + (dir / "config").string());
  EXPECT_EQ(config_differs.exit_code, 2) << config_differs.output;
  EXPECT_NE(config_differs.output.find("rank 1 on node node2 does not run what rank 0 on node node1 runs: "
                                       "config optimizer.base_lr is '0.0123' there"),
            std::string::npos) << config_differs.output;
  EXPECT_FALSE(fs::exists(dir / "config" / "result_0.txt"));

  ASSERT_EQ(on_node("node2", "cp " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml " + config + " && printf x >> " + plugins +
                                 "/libmlph-backend-reference.so").exit_code, 0);
  const CliResult plugin_differs = run_command(across(1) + run + " --plugin-dir " + plugins + " --output " +
                                               (dir / "plugin").string());
  for (const char* node : {"node1", "node2"}) on_node(node, "rm -rf " + config + " " + plugins);
  EXPECT_EQ(plugin_differs.exit_code, 2) << plugin_differs.output;
  EXPECT_NE(plugin_differs.output.find("rank 1 on node node2 does not run what rank 0 on node node1 runs: backend plug-in is "),
            std::string::npos) << plugin_differs.output;
}

