// Where this process runs, as the launcher tells it. srun gives each task its place in the job step
// (SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_NODES, ...) and binds it
// to CPUs (--cpu-bind); the comms plug-in gives the ranks as MPI sees them. The session checks the
// two against each other: a step whose tasks each see one rank (srun without --mpi=pmix, or without
// --comms mpi) would train N separate runs into one log, and is refused; where the comms plug-in
// cannot tell the local rank or the node count, Slurm's are taken.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mlph/comms.h"

namespace mlph::core {

// This process as a task of a Slurm job step.
struct SlurmTask {
  std::string job_id, step_id;  // SLURM_JOB_ID, SLURM_STEP_ID
  int32_t rank = 0;             // SLURM_PROCID
  int32_t tasks = 1;            // SLURM_STEP_NUM_TASKS
  int32_t local_rank = 0;       // SLURM_LOCALID
  int32_t local_tasks = 1;      // this node's count in SLURM_STEP_TASKS_PER_NODE
  int32_t nodes = 1;            // SLURM_STEP_NUM_NODES
  int32_t node_index = 0;       // SLURM_NODEID
  int32_t restarts = 0;         // SLURM_RESTART_COUNT: how often the job was requeued
};

// A variable of the environment, or null: getenv, or a test's map.
using Environment = std::function<const char*(const char* name)>;

// This process as srun's task, or nullopt when srun did not start it: no Slurm, or a batch script's
// own process, or a rank that mpirun started inside the allocation (the SLURM_* it inherits describe
// the batch step or mpirun's daemon, not the rank). A variable that is there but not a number is a
// std::runtime_error naming it.
std::optional<SlurmTask> slurm_task(const Environment& env);
std::optional<SlurmTask> slurm_task();  // of this process

// SLURM_TASKS_PER_NODE's notation, "2(x3),1", expanded: {2, 2, 2, 1}.
std::vector<int32_t> expand_tasks_per_node(const std::string& text);

// The comms plug-in's topology checked against srun's task. Throws ConfigError when srun started
// more tasks than the comms see ranks of one run; takes Slurm's local rank, local size and node count
// where the plug-in gives none (0) or other ones (`note` then says so, for the terminal). A step
// whose task count is not the run's rank count (another launcher inside it) is left alone.
MLPH_Topology reconcile_topology(const MLPH_Topology& comms, const std::optional<SlurmTask>& slurm,
                                 const std::string& comms_name, std::string& note);

}  // namespace mlph::core
