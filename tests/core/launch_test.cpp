// Where srun placed this process (launch.hpp): Slurm's task variables read as a multi-node srun
// sets them, mpirun's ranks and batch scripts told apart from srun's tasks, and the comms plug-in's
// topology checked against them.
#include <gtest/gtest.h>

#include <map>
#include <sched.h>
#include <string>

#include "mlph/core/config.hpp"
#include "mlph/core/launch.hpp"
#include "mlph/sdk/util/cpus.hpp"

using namespace mlph::core;

namespace {

using Variables = std::map<std::string, std::string>;

Environment environment(const Variables& vars) {
  return [&vars](const char* name) -> const char* {
    const auto found = vars.find(name);
    return found == vars.end() ? nullptr : found->second.c_str();
  };
}

// What srun -N 3 -n 7 gives task 5 (node 2 holds tasks 5 and 6), requeued once.
Variables third_node_task() {
  return {{"SLURM_JOB_ID", "4711"},           {"SLURM_STEP_ID", "0"},        {"SLURM_PROCID", "5"},
          {"SLURM_STEP_NUM_TASKS", "7"},      {"SLURM_NTASKS", "7"},         {"SLURM_LOCALID", "0"},
          {"SLURM_STEP_NUM_NODES", "3"},      {"SLURM_JOB_NUM_NODES", "3"},  {"SLURM_NODEID", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "3(x2),1"}, {"SLURM_TASKS_PER_NODE", "3(x2),1"}, {"SLURM_RESTART_COUNT", "1"}};
}

MLPH_Topology topology(int32_t rank, int32_t size, int32_t local_rank, int32_t local_size, int32_t nodes) {
  return {sizeof(MLPH_Topology), nullptr, rank, size, local_rank, local_size, nodes};
}

}  // namespace

TEST(Launch, TasksPerNodeNotation) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int32_t>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4"), (std::vector<int32_t>{4}));
  EXPECT_EQ(expand_tasks_per_node("1,2(x2)"), (std::vector<int32_t>{1, 2, 2}));
  for (const char* bad : {"x", "2(x", "2(x0)", "2;1", "2(x3"})
    EXPECT_THROW(expand_tasks_per_node(bad), std::runtime_error) << bad;
}

TEST(Launch, ASrunTaskOnTheThirdNode) {
  Variables vars = third_node_task();
  const std::optional<SlurmTask> task = slurm_task(environment(vars));
  ASSERT_TRUE(task);
  EXPECT_EQ(task->job_id, "4711");
  EXPECT_EQ(task->rank, 5);
  EXPECT_EQ(task->tasks, 7);
  EXPECT_EQ(task->nodes, 3);
  EXPECT_EQ(task->node_index, 2);
  EXPECT_EQ(task->local_rank, 0);
  EXPECT_EQ(task->local_tasks, 1) << "the third node's count";
  EXPECT_EQ(task->restarts, 1);
  vars["SLURM_NODEID"] = "0", vars["SLURM_LOCALID"] = "2";
  EXPECT_EQ(slurm_task(environment(vars))->local_tasks, 3);
  vars["SLURM_LOCALID"] = "3";  // past the node's 3 tasks
  EXPECT_THROW(slurm_task(environment(vars)), std::runtime_error);
  vars["SLURM_LOCALID"] = "two";
  EXPECT_THROW(slurm_task(environment(vars)), std::runtime_error);
}

// A batch script has no step id; mpirun's ranks inherit the variables of the batch step (or of
// their node's daemon, which srun started) and carry OMPI_COMM_WORLD_SIZE: neither is srun's task.
TEST(Launch, BatchScriptsAndMpirunRanksAreNotSrunTasks) {
  EXPECT_FALSE(slurm_task(environment({})));
  Variables batch = third_node_task();
  batch.erase("SLURM_STEP_ID");
  EXPECT_FALSE(slurm_task(environment(batch)));
  Variables mpirun = third_node_task();
  mpirun.emplace("OMPI_COMM_WORLD_SIZE", "7");
  EXPECT_FALSE(slurm_task(environment(mpirun)));
}

TEST(Launch, SlurmPlacesWhereTheCommsCannotTell) {
  const std::optional<SlurmTask> task = slurm_task(environment(third_node_task()));
  std::string note;
  const MLPH_Topology unknown = reconcile_topology(topology(5, 7, 0, 0, 0), task, "test", note);
  EXPECT_EQ(unknown.rank, 5);
  EXPECT_EQ(unknown.local_rank, 0);
  EXPECT_EQ(unknown.local_size, 1);
  EXPECT_EQ(unknown.nodes, 3);
  EXPECT_EQ(note, "");
  // MPI agreeing: nothing to say.
  EXPECT_EQ(reconcile_topology(topology(5, 7, 0, 1, 3), task, "mpi", note).nodes, 3);
  EXPECT_EQ(note, "");
  // MPI seeing one node (shared memory across Slurm's nodes): Slurm's placement, said.
  const MLPH_Topology one_node = reconcile_topology(topology(5, 7, 5, 7, 1), task, "mpi", note);
  EXPECT_EQ(one_node.nodes, 3);
  EXPECT_EQ(one_node.local_rank, 0);
  EXPECT_NE(note.find("Slurm's placement is taken"), std::string::npos) << note;
  // Without srun: the comms' own.
  EXPECT_EQ(reconcile_topology(topology(5, 7, 5, 7, 1), std::nullopt, "mpi", note).nodes, 1);
}

TEST(Launch, TasksThatEachSeeOneRankAreRefused) {
  const std::optional<SlurmTask> task = slurm_task(environment(third_node_task()));
  std::string note;
  try {
    reconcile_topology(topology(0, 1, 0, 1, 1), task, "local", note);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("srun started 7 tasks (SLURM_STEP_NUM_TASKS) but comms local sees one rank in "
                                         "each"),
              std::string::npos)
        << e.what();
  }
  // Ranks of another launcher inside the step (as many as it says, not srun's): left alone.
  EXPECT_EQ(reconcile_topology(topology(1, 4, 1, 4, 1), task, "mpi", note).nodes, 1);
}

// The backends' default thread count follows the affinity mask (srun --cpu-bind), not the machine.
TEST(Launch, AvailableCpusFollowTheAffinityMask) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(mlph::sdk::available_cpus(), static_cast<unsigned>(CPU_COUNT(&all)));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(mlph::sdk::available_cpus(), 1u);
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
}
