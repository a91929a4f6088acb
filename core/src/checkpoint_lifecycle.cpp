// A run's checkpoints and exported weights, step by step (checkpoint_lifecycle.hpp): moved out of
// the runner, which keeps the MLPerf timeline.
#include "mlph/core/checkpoint_lifecycle.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "mlph/core/crash.hpp"
#include "mlph/core/export.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/run_report.hpp"
#include "mlph/sdk/comms/spatial.hpp"

namespace mlph::core {

// --resume: the checkpoint is read and checked (sizes, CRCs) before anything else; the run takes its
// seed (the initial weights it replaces came from it, and the data order and dropout follow it).
void CheckpointLifecycle::open_resume() {
  if (options_.resume_auto) find_resume_auto();
  if (options_.resume_from.empty()) return;
  resume_ = std::make_unique<CheckpointReader>(options_.resume_from);
  const uint64_t seed = resume_->manifest().identity.seed;
  if (options_.seed && *options_.seed != seed)
    throw CheckpointError(fmt::format("checkpoint {}: seed {} there, --seed {} given", resume_->dir().string(), seed,
                                      *options_.seed));
  options_.seed = seed;
}

// --resume auto: the newest checkpoint in --checkpoint-dir if it holds one (a requeued job's), else a
// fresh start. Without `latest` (a run killed between a checkpoint's rename and latest's) the newest
// whole checkpoint there is the one.
void CheckpointLifecycle::find_resume_auto() {
  const std::filesystem::path& dir = options_.checkpoint_dir;
  if (dir.empty()) throw CheckpointError("--resume auto: needs --checkpoint-dir, where it looks for a checkpoint");
  const std::vector<std::filesystem::path> whole = list_checkpoints(dir);
  if (whole.empty() && latest_checkpoint(dir).empty()) {
    resume_note_ = fmt::format("--resume auto: no checkpoint in {} yet: starting afresh", dir.string());
    return;
  }
  options_.resume_from = dir;  // its `latest` (CheckpointReader: a damaged one is refused, named)
  resume_note_ = fmt::format("--resume auto: going on from the newest checkpoint in {}", dir.string());
  if (latest_checkpoint(dir).empty())
    resume_note_ += fmt::format(" ({}: no 'latest' names one)", whole.back().filename().string());
}

const MLPH_Graph* CheckpointLifecycle::prepare(const Session& session) {
  session_ = &session;
  checkpoints_ = {options_.checkpoint_dir, std::max<uint32_t>(options_.checkpoint_every, 1), options_.checkpoint_keep};
  if (saving() || resume_) check_supported();
  if (saving() && session.topology().rank == 0) reserve_directory();
  if (saving()) check_directory();
  if (!options_.export_weights.empty()) {
    export_layout_ = reference_layout_of(session.workload_plugin());
    if (!export_layout_)
      throw CheckpointError(fmt::format("--export-weights: workload {} does not say how the reference names its "
                                        "parameters (ABI 1.4 reference_layout)",
                                        session.workload_plugin().descriptor->name));
    if (session.topology().rank == 0) reserve_export();
  }
  if (!resume_) return nullptr;
  check_same_run(*resume_, run_identity(session, nullptr), options_.switch_backend);
  const MLPH_Graph* graph = nullptr;
  check(session.workload_api()->build_graph(session.workload(), session.info().local_batch_size, session.seed(), &graph),
        "building the model");
  check_same_run(*resume_, run_identity(session, graph), options_.switch_backend);
  check_restorable(*resume_, *graph);
  return graph;
}

// What a run with checkpoints cannot do (yet): refused before the log begins.
void CheckpointLifecycle::check_supported() const {
  const Session& session = *session_;
  if (const std::string missing = missing_state_support(session); !missing.empty()) throw CheckpointError(missing);
  if (session.topology().size > 1 && session.gradient_accumulation() > 1)
    throw CheckpointError(fmt::format("checkpoints with gradient accumulation ({} micro-batches) on {} ranks: each rank's "
                                      "pending sum would have to be saved, which is not done; use one rank or no "
                                      "accumulation",
                                      session.gradient_accumulation(), session.topology().size));
  // No test yet shows a run with split samples resumed exactly (each rank's part of the sample,
  // the sample groups' data order): refused rather than risk a wrong resume.
  if (session.sample_ranks() > 1)
    throw CheckpointError(fmt::format("checkpoints with parallel.spatial = {} (samples split over ranks) are not "
                                      "supported yet; set parallel.spatial to 1 or run without --checkpoint-dir "
                                      "and --resume",
                                      sdk::spatial::grid_text(session.spatial_grid())));
}

// --checkpoint-dir's checkpoints: only those of the checkpoint the run goes on from, and none newer.
void CheckpointLifecycle::check_directory() {
  const std::vector<std::filesystem::path> existing = list_checkpoints(checkpoints_.dir);
  std::error_code absent;  // a new directory is nobody's parent
  const bool continuing = resume_ && std::filesystem::equivalent(resume_->dir().parent_path(), checkpoints_.dir, absent);
  if (!existing.empty() && !continuing)
    throw CheckpointError(fmt::format("{} already holds checkpoints (newest: {}): go on from them with --resume {}, "
                                      "or choose another directory",
                                      checkpoints_.dir.string(), existing.back().filename().string(),
                                      checkpoints_.dir.string()));
  // Going on from an older checkpoint would rewrite the newer ones, `latest`'s among them.
  const std::filesystem::path latest = latest_checkpoint(checkpoints_.dir);
  if (continuing && !latest.empty() && latest.filename() > resume_->dir().filename())
    throw CheckpointError(fmt::format("{} holds a newer checkpoint ({}) than {}, which going on would overwrite: "
                                      "resume from the newest, or save into another directory",
                                      checkpoints_.dir.string(), latest.filename().string(), resume_->dir().string()));
  if (continuing) newest_saved_ = resume_->dir();
}

// --checkpoint-dir, made and locked before the log begins: a path that cannot be a directory fails
// now, not after the first epoch, and a second run saving into it is refused for as long as this one
// runs (an flock, which the kernel drops however the run ends).
void CheckpointLifecycle::reserve_directory() {
  const std::filesystem::path& dir = checkpoints_.dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw CheckpointError(fmt::format("--checkpoint-dir {}: cannot be made a directory: {}", dir.string(),
                                      ec ? ec.message() : "something else is there"));
  const std::filesystem::path lock = dir / ".lock";
  std::optional<sdk::detail::Fd> held = [&] {
    try {
      return sdk::lock_file(lock.string(), true, 0644);  // readable as the checkpoints are: a group shares it
    } catch (const sdk::Error& e) {
      throw CheckpointError(fmt::format("--checkpoint-dir {}: {}", dir.string(), e.what()));
    }
  }();
  if (!held)
    throw CheckpointError(fmt::format("--checkpoint-dir {}: another run is saving checkpoints there (it holds {}); let it "
                                      "end, or choose another directory",
                                      dir.string(), lock.string()));
  lock_.emplace(std::move(*held));
}

// --export-weights: its file is made (hidden, beside it) before the log begins, so a path that cannot
// be written fails now rather than after the training; and it is never the run's own log.
void CheckpointLifecycle::reserve_export() {
  const std::filesystem::path& file = options_.export_weights;
  std::error_code a, b;
  const std::filesystem::path log = std::filesystem::weakly_canonical(options_.output_dir / options_.log_name, a);
  if (!a && std::filesystem::weakly_canonical(file, b) == log && !b)
    throw CheckpointError(fmt::format("--export-weights {}: is the run's MLPerf log", file.string()));
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), a);
  export_file_.emplace(file);
}

// The checkpoint was checked before the log began (prepare); here its tensors go into the model. The
// log says the run is resumed: its time to train covers only the epochs after the checkpoint, so it
// is no timed MLPerf result.
std::optional<RunnerState> CheckpointLifecycle::restore(MlLogger& log, MLPH_Model* model, const MLPH_Graph& graph) {
  if (!resume_) return std::nullopt;
  const Session& session = *session_;
  {
    const Activity doing("restoring the checkpoint " + resume_->dir().string());
    restore_checkpoint(*resume_, session, model, graph);
  }
  const RunnerState& state = resume_->manifest().state;
  const std::string where = state.steps_done == 0 ? fmt::format("after epoch {}", state.epochs_done)
                                                  : fmt::format("at step {} of epoch {}", state.steps_done + 1,
                                                                state.epochs_done + 1);
  const std::string& saved_backend = resume_->manifest().identity.backend;
  const std::string switched = saved_backend == session.backend_name()
                                   ? ""
                                   : fmt::format(" on backend {} (backend {} saved it: not bitwise)",
                                                 session.backend_name(), saved_backend);
  const std::string note = fmt::format("resumed {} from {}{}: not a timed MLPerf result (its time to train covers only "
                                       "the training after the checkpoint)",
                                       where, resume_->dir().string(), switched);
  log.event("mlph_resumed_from",
            json_raw(fmt::format("{{\"checkpoint\": {}, \"backend\": {}, \"epochs_done\": {}, \"steps_done\": {}, "
                                 "\"micro_batches\": {}, \"metrics\": {}, \"note\": {}}}",
                                 json(resume_->dir().string()).text, json(saved_backend).text, state.epochs_done,
                                 state.steps_done, state.micro_batches, json_list(state.metrics, false).text,
                                 json(note).text)));
  if (session.topology().rank == 0) std::fprintf(stderr, "note: %s\n", note.c_str());
  return state;
}

void CheckpointLifecycle::check_readable(MLPH_Model* model, const MLPH_Graph& graph) const {
  if (saving()) check_state_readable(*session_, model, graph);
}

// Rank 0 writes: after the gradient averaging and the per-epoch averaging of the running statistics
// every rank holds the same weights and optimizer state. Other ranks go on to the next epoch.
void CheckpointLifecycle::save_if_due(MlLogger& log, Progress& progress, MLPH_Model* model, const MLPH_Graph& graph,
                                      const RunnerState& state) {
  if (!saving() || state.epochs_done % checkpoints_.every != 0 || session_->topology().rank != 0) return;
  save(log, progress, model, graph, state);
}

std::optional<std::string> CheckpointLifecycle::save_on_stop(MlLogger& log, Progress& progress, MLPH_Model* model,
                                                             const MLPH_Graph& graph, const RunnerState& state) {
  const Session& session = *session_;
  // Inside an epoch each rank's running statistics are its own until the epoch's end averages them.
  const RankCopies copies = state.steps_done > 0 ? gather_rank_copies(session, model, graph) : RankCopies{};
  std::string failed;
  if (session.topology().rank == 0) {
    try {
      save(log, progress, model, graph, state, copies);
    } catch (const std::exception& e) {
      failed = e.what();
    }
  }
  int32_t ok = failed.empty() ? 1 : 0;  // rank 0's verdict (the others hold 1)
  if (session.topology().size > 1)
    check(session.comms_api()->allreduce(session.comm(), &ok, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM), "comms");
  if (ok == session.topology().size) return std::nullopt;
  return failed.empty() ? " (on rank 0)" : ": " + failed;
}

// Rank 0's part of saving `state` (inside an epoch every rank gathers its statistics first: stop).
// A checkpoint of that state already there (the one the run goes on from) is not written again.
std::filesystem::path CheckpointLifecycle::save(MlLogger& log, Progress& progress, MLPH_Model* model,
                                                const MLPH_Graph& graph, const RunnerState& state,
                                                const RankCopies& copies) {
  if (newest_saved_.filename() == checkpoint_name(state.epochs_done, state.steps_done)) return newest_saved_;
  Stopwatch watch(saving_seconds_);
  const Activity doing(fmt::format("saving the checkpoint {}", checkpoint_name(state.epochs_done, state.steps_done)));
  const uint32_t window = session_->gradient_accumulation();
  const SavedCheckpoint saved =
      save_checkpoint(checkpoints_, *session_, model, graph, state, state.micro_batches % window != 0, copies);
  newest_saved_ = saved.path;
  if (!log_ended_)  // the watcher's last words may have ended the log (signals.hpp)
    log.event("mlph_checkpoint",
              json_raw(fmt::format("{{\"path\": {}, \"epochs_done\": {}, \"steps_done\": {}, \"bytes\": {}, "
                                   "\"seconds\": {}}}",
                                   json(saved.path.string()).text, state.epochs_done, state.steps_done, saved.bytes,
                                   json(saved.seconds).text)));
  progress.message(fmt::format("checkpoint {} ({:.1f} MiB in {:.2f} s)", saved.path.string(),
                               static_cast<double>(saved.bytes) / 1048576.0, saved.seconds));
  return saved.path;
}

void CheckpointLifecycle::export_weights(MLPH_Model* model, const MLPH_Graph& graph, uint64_t micro_batches) {
  std::vector<ParameterValues> params;
  for (size_t i = 0; i < graph.n_params; ++i) {
    const MLPH_Value& v = graph.values[graph.params[i].value];
    MLPH_Tensor view{};
    params.push_back({v.name ? v.name : "", {v.shape, v.shape + v.ndim},
                      read_parameter(session_->backend_api(), model, graph, i, view)});
  }
  const size_t arrays = mlph::core::export_weights(export_layout_, params, micro_batches, std::move(*export_file_));
  std::fprintf(stderr, "exported %zu arrays in the reference's names to %s\n", arrays, options_.export_weights.c_str());
}

}  // namespace mlph::core
