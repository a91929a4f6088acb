// What a run saves and restores (--checkpoint-dir, --resume), through the backend: every graph
// parameter (weights, batch-norm running statistics: read_parameter), the optimizer's state slots of
// the trainable ones and, when an accumulation window is open across the epoch's end, the pending
// gradient sum (ABI 1.4 read_state / write_state, slot names from the op catalogue). The runner's own
// state is RunnerState (checkpoint_file.hpp); the format is checkpoint_file.hpp's.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "mlph/backend.h"
#include "mlph/core/checkpoint_file.hpp"
#include "mlph/core/session.hpp"

namespace mlph::core {

struct CheckpointOptions {
  std::filesystem::path dir;  // empty: no checkpoints
  uint32_t every = 1;         // epochs between checkpoints
  uint32_t keep = 2;          // complete checkpoints kept (the newest)
};

// One line naming the backend when it cannot save or restore its training state (ABI older than
// 1.4, or its table lacks read_state / write_state); "" when it can.
std::string missing_state_support(const Session& session);

// Reads one optimizer state slot from `model`: a backend that cannot save its state (an SDK backend
// that leaves read_state alone) fails at init, not after the first epoch. Throws PluginError.
void check_state_readable(const Session& session, MLPH_Model* model, const MLPH_Graph& graph);

// The identity of the run `session` makes with `graph`, as a checkpoint records it; without a graph,
// all but its fingerprint.
CheckpointIdentity run_identity(const Session& session, const MLPH_Graph* graph);

// Throws CheckpointError naming the checkpoint and the first thing that differs from `run` (its graph
// only when `run` has a fingerprint: a workload may need data to build the graph, so the cheaper
// checks come first).
void check_same_run(const CheckpointReader& checkpoint, const CheckpointIdentity& run, bool switch_backend = false);

struct SavedCheckpoint {
  std::filesystem::path path;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Inside an epoch each rank's non-trainable parameters (batch-norm running statistics) are its own:
// the epoch's end averages them. A checkpoint there holds every rank's: parameter index -> the values
// of ranks 1..n-1, one after another (rank 0's are the parameter's). Collective: every rank calls it;
// empty on one rank.
using RankCopies = std::map<size_t, std::vector<float>>;
RankCopies gather_rank_copies(const Session& session, MLPH_Model* model, const MLPH_Graph& graph);

// Throws CheckpointError naming the checkpoint and the first of `graph`'s parameters (or their state
// slots) that it lacks or holds with another dtype or shape: checked before the run's log begins.
void check_restorable(const CheckpointReader& checkpoint, const MLPH_Graph& graph);

// Writes `model`'s state (after `state.epochs_done` epochs and `state.steps_done` steps of the next)
// into options.dir (checkpoint_file.hpp), `copies` as slots "rank-<r>". `pending`: an accumulation
// window is open, so the pending gradient sums are saved too.
SavedCheckpoint save_checkpoint(const CheckpointOptions& options, const Session& session, MLPH_Model* model,
                                const MLPH_Graph& graph, const RunnerState& state, bool pending,
                                const RankCopies& copies = {});

// Writes the checkpoint's parameters and state slots into `model` (compiled from `graph`), which
// check_restorable accepts; a rank r > 0 takes its own non-trainable values where the checkpoint has
// them ("rank-<r>").
void restore_checkpoint(const CheckpointReader& checkpoint, const Session& session, MLPH_Model* model,
                        const MLPH_Graph& graph);

}  // namespace mlph::core
