// A run's checkpoints and exported weights from before its log begins to its end; the runner
// (runner.cpp) keeps the MLPerf timeline and calls each step where the timeline has it:
//   before the session  open_resume: --resume auto's choice, --resume's checkpoint read and checked
//                       (a resumed run takes its seed, so the session must not exist yet);
//   before the log      prepare: --checkpoint-dir and --export-weights checked and reserved, a resumed
//                       run's graph compared with the checkpoint's;
//   init                restore, check_readable;
//   after each epoch    save_if_due;
//   stopped by a signal save_on_stop (every rank);
//   after run_stop      export_weights.
// Saving and loading themselves are checkpoint.hpp's; the file format is checkpoint_file.hpp's.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/checkpoint.hpp"
#include "mlph/core/mllog.hpp"
#include "mlph/core/progress.hpp"
#include "mlph/core/run_options.hpp"
#include "mlph/sdk/storage/storage.hpp"

namespace mlph::core {

class CheckpointLifecycle {
 public:
  // `options`: the run's own copy, which a resumed run changes (the seed; the checkpoint --resume auto
  // found). `saving_seconds`: where the time spent saving is added (the run's breakdown). `log_ended`:
  // set once run_stop is written (by the run or the signal watcher): no event may follow it.
  CheckpointLifecycle(RunOptions& options, double& saving_seconds, const std::atomic<bool>& log_ended)
      : options_(options), saving_seconds_(saving_seconds), log_ended_(log_ended) {}
  CheckpointLifecycle(const CheckpointLifecycle&) = delete;
  CheckpointLifecycle& operator=(const CheckpointLifecycle&) = delete;

  // Before the session: --resume auto's choice, and --resume's checkpoint read and checked (sizes,
  // CRCs). Throws CheckpointError.
  void open_resume();
  // Before the log begins (one line and exit status 2 when something is missing or does not match):
  // what --checkpoint-dir, --resume and --export-weights need, the directory and the export file
  // reserved on rank 0. Returns the graph a resumed run built to compare with the checkpoint's (the
  // run uses it), else null. `session` must outlive this object's later steps.
  const MLPH_Graph* prepare(const Session& session);

  const CheckpointReader* resume() const { return resume_.get(); }
  const std::string& resume_note() const { return resume_note_; }  // what --resume auto found
  bool saving() const { return !checkpoints_.dir.empty(); }
  const std::filesystem::path& dir() const { return checkpoints_.dir; }

  // init, --resume: the checkpoint's tensors go into `model` and the run takes up the returned
  // counters; logged as resumed (not a timed MLPerf result). Null when the run is not resumed.
  std::optional<RunnerState> restore(MlLogger& log, MLPH_Model* model, const MLPH_Graph& graph);
  // init, --checkpoint-dir: a backend that cannot read its state fails now, not after the first epoch.
  void check_readable(MLPH_Model* model, const MLPH_Graph& graph) const;
  // After an epoch, on rank 0 (the others hold the same weights): saves `state` when an epoch of
  // --checkpoint-every is due.
  void save_if_due(MlLogger& log, Progress& progress, MLPH_Model* model, const MLPH_Graph& graph,
                   const RunnerState& state);
  // A signal stops the run at a step boundary: rank 0 saves `state` (inside an epoch with every rank's
  // statistics, which all ranks gather first), and every rank learns whether that worked before any
  // leaves. Collective. Returns nothing when saved, else what failed, as the end of a sentence
  // ("(on rank 0)", ": <why>"). Needs saving().
  std::optional<std::string> save_on_stop(MlLogger& log, Progress& progress, MLPH_Model* model,
                                          const MLPH_Graph& graph, const RunnerState& state);
  // After run_stop, rank 0, --export-weights: the trained weights in the reference's names.
  void export_weights(MLPH_Model* model, const MLPH_Graph& graph, uint64_t micro_batches);

 private:
  void find_resume_auto();
  void check_supported() const;
  void check_directory();
  void reserve_directory();
  void reserve_export();
  std::filesystem::path save(MlLogger& log, Progress& progress, MLPH_Model* model, const MLPH_Graph& graph,
                             const RunnerState& state, const RankCopies& copies = {});

  RunOptions& options_;
  double& saving_seconds_;
  const std::atomic<bool>& log_ended_;
  const Session* session_ = nullptr;          // prepare()'s
  std::unique_ptr<CheckpointReader> resume_;  // --resume: opened and checked before anything starts
  CheckpointOptions checkpoints_;
  std::optional<sdk::detail::Fd> lock_;  // held on checkpoints_.dir for the whole run (rank 0)
  decltype(MLPH_WorkloadApi::reference_layout) export_layout_ = nullptr;  // --export-weights
  std::optional<AtomicFile> export_file_;  // --export-weights, reserved before the log begins (rank 0)
  std::filesystem::path newest_saved_;  // in checkpoints_.dir: written by this run, or the one it goes on from
  std::string resume_note_;
};

}  // namespace mlph::core
