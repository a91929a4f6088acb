#include "mlph/core/launch.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include "mlph/core/config.hpp"

namespace mlph::core {
namespace {

int32_t number(const Environment& env, const char* name, int32_t fallback) {
  const char* text = env(name);
  if (!text) return fallback;
  int32_t value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  const auto [at, error] = std::from_chars(text, end, value);
  if (error != std::errc() || at != end || value < 0)
    throw std::runtime_error(fmt::format("{}='{}' is not a count (set by Slurm?)", name, text));
  return value;
}

}  // namespace

std::vector<int32_t> expand_tasks_per_node(const std::string& text) {
  std::vector<int32_t> counts;
  size_t at = 0;
  const auto bad = [&] { return std::runtime_error(fmt::format("tasks per node '{}': not Slurm's notation", text)); };
  while (at < text.size()) {
    size_t used = 0;
    int count = 0, repeat = 1;
    try {
      count = std::stoi(text.substr(at), &used);
    } catch (const std::exception&) {
      throw bad();
    }
    at += used;
    if (text.compare(at, 2, "(x") == 0) {
      try {
        repeat = std::stoi(text.substr(at + 2), &used);
      } catch (const std::exception&) {
        throw bad();
      }
      at += 2 + used;
      if (at >= text.size() || text[at] != ')') throw bad();
      ++at;
    }
    if (count < 0 || repeat < 1) throw bad();
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
    if (at < text.size() && text[at++] != ',') throw bad();
  }
  return counts;
}

std::optional<SlurmTask> slurm_task(const Environment& env) {
  // srun sets SLURM_STEP_ID for its tasks (a batch script has none); mpirun's ranks inherit the
  // variables of the step that started mpirun or its daemon, and carry OMPI_COMM_WORLD_SIZE.
  if (!env("SLURM_STEP_ID") || !env("SLURM_PROCID") || env("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  SlurmTask task;
  task.job_id = env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "";
  task.step_id = env("SLURM_STEP_ID");
  task.rank = number(env, "SLURM_PROCID", 0);
  task.tasks = number(env, "SLURM_STEP_NUM_TASKS", number(env, "SLURM_NTASKS", 1));
  task.local_rank = number(env, "SLURM_LOCALID", 0);
  task.nodes = number(env, "SLURM_STEP_NUM_NODES", number(env, "SLURM_JOB_NUM_NODES", 1));
  task.node_index = number(env, "SLURM_NODEID", 0);
  task.restarts = number(env, "SLURM_RESTART_COUNT", 0);
  const char* per_node = env("SLURM_STEP_TASKS_PER_NODE") ? env("SLURM_STEP_TASKS_PER_NODE") : env("SLURM_TASKS_PER_NODE");
  const std::vector<int32_t> counts = expand_tasks_per_node(per_node ? per_node : std::to_string(task.tasks));
  if (task.node_index >= static_cast<int32_t>(counts.size()) ||
      task.local_rank >= counts[static_cast<size_t>(task.node_index)])
    throw std::runtime_error(fmt::format("Slurm's task variables disagree: SLURM_NODEID={} SLURM_LOCALID={} "
                                         "with tasks per node '{}'",
                                         task.node_index, task.local_rank, per_node ? per_node : ""));
  task.local_tasks = counts[static_cast<size_t>(task.node_index)];
  return task;
}

std::optional<SlurmTask> slurm_task() {
  return slurm_task([](const char* name) -> const char* { return std::getenv(name); });
}

MLPH_Topology reconcile_topology(const MLPH_Topology& comms, const std::optional<SlurmTask>& slurm,
                                 const std::string& comms_name, std::string& note) {
  MLPH_Topology topology = comms;
  if (!slurm) return topology;
  if (slurm->tasks != comms.size) {
    if (comms.size == 1)
      throw ConfigError(fmt::format("srun started {} tasks (SLURM_STEP_NUM_TASKS) but comms {} sees one rank in each: "
                                    "they would train {} separate runs into one log; launch with --comms mpi and srun "
                                    "--mpi=pmix (or MpiDefault=pmix in slurm.conf)",
                                    slurm->tasks, comms_name, slurm->tasks));
    return topology;  // another launcher inside the step: its ranks are not srun's tasks
  }
  if (comms.local_size > 0 && comms.nodes > 0 &&
      (comms.local_rank != slurm->local_rank || comms.local_size != slurm->local_tasks || comms.nodes != slurm->nodes))
    note = fmt::format("comms {} places rank {} as local rank {} of {} on one of {} nodes, Slurm as local rank {} of {} "
                       "on one of {}: Slurm's placement is taken",
                       comms_name, comms.rank, comms.local_rank, comms.local_size, comms.nodes, slurm->local_rank,
                       slurm->local_tasks, slurm->nodes);
  topology.local_rank = slurm->local_rank;
  topology.local_size = slurm->local_tasks;
  topology.nodes = slurm->nodes;
  return topology;
}

}  // namespace mlph::core
