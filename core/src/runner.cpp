// The timed run: init, run_start, the epochs (train, evaluate), run_stop, exactly as the MLPerf HPC
// rules time them. Its helpers: signals.cpp (interrupts), crash.cpp (last words on a crash or a
// stuck read; the runner publishes its phases as activities), data_pipeline.cpp (order, shards,
// reading ahead), run_report.cpp (where the time went), progress.cpp (the terminal), checkpoint.cpp
// (saving and resuming) and checkpoint_lifecycle.cpp (when: reserved, restored, saved), export.cpp
// (the trained weights for PyTorch).
#include "mlph/core/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>

#include "mlph/core/atomic_file.hpp"
#include "mlph/core/checkpoint_lifecycle.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/crash.hpp"
#include "mlph/core/data_pipeline.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/mllog.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/progress.hpp"
#include "mlph/core/rank_check.hpp"
#include "mlph/core/run_report.hpp"
#include "mlph/core/session.hpp"
#include "mlph/core/signals.hpp"
#include "mlph/core/system_probe.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/util/cpus.hpp"

namespace mlph::core {
namespace {

// Raised inside the timed region: the run is logged as aborted and the process exits 1.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The run stopped at a step boundary on a signal (signals.hpp), every rank at the same one: logged as
// aborted with the reason; the process exits 3 when the checkpoint to go on from is saved, else 1.
class RunStopped : public std::runtime_error {
 public:
  RunStopped(const std::string& why, bool saved) : std::runtime_error(why), saved(saved) {}
  bool saved;
};

constexpr int kExitStoppedWithCheckpoint = 3;

class Run {
 public:
  Run(const RunOptions& options, SignalWatcher& signals) : options_(options), signals_(signals) {}
  int execute();

 private:
  struct StepOf {  // training step `step` (0-based) of an epoch of `steps`; the signal that stopped it there
    uint64_t step, steps;
    int signal = 0;
  };
  int generate_data();
  int timed_run();
  void leave_status(int status) const;
  void initialize(MlLogger& log);
  void resume_training(MlLogger& log);
  RunnerState runner_state(uint32_t epochs_done, uint64_t steps_done = 0) const;
  int stop_requested();
  bool log_ended_on_any_rank();
  [[noreturn]] void stop(MlLogger& log, Progress& progress, uint32_t epoch, StepOf at);
  bool train_and_evaluate(MlLogger& log);
  void check_eval_outputs() const;
  std::optional<StepOf> train_epoch(uint32_t epoch, uint64_t first_step, Progress& progress);
  double evaluate(uint32_t epoch);
  uint64_t eval_samples() const;
  void open_datasets();
  void stage_data(MlLogger& log);
  void log_staging_per_node(MlLogger& log, const MLPH_StageStats& mine);
  void end_log(MlLogger& log, bool converged, const std::string& failure);
  void log_plugin(MlLogger& log, const LoadedPlugin& plugin);
  void log_device(MlLogger& log, const BackendDevice& device);
  long long accelerators_per_node(const BackendDevice& device) const;
  double read_loss(const MLPH_StepResult& result, bool deferred);
  void log_slurm(MlLogger& log, const SlurmTask& task);

  const MLPH_WorkloadApi* workload() const { return session_->workload_api(); }
  const MLPH_BackendApi* backend() const { return session_->backend_api(); }
  const MLPH_CommsApi* comms() const { return session_->comms_api(); }
  ReadPlan read_plan(const char* split, uint32_t epoch) const {
    return {split, epoch, as_number("data.read_timeout_s", session_->config().get("data.read_timeout_s"))};
  }
  ReadAhead reading() const { return read_ahead(session_->config(), batch_, session_->topology().local_size); }

  RunOptions options_;  // a copy: a resumed run takes the checkpoint's seed
  SignalWatcher& signals_;
  TimeBreakdown time_;
  std::atomic<bool> run_stopped_{false};  // run_stop written (here or by the signal watcher)
  CheckpointLifecycle checkpoints_{options_, time_.checkpoint_s, run_stopped_};
  std::unique_ptr<Session> session_;
  // Declared after the session: destroyed before the plug-ins that made them.
  Owned<MLPH_Model> model_{nullptr, nullptr};
  std::optional<Datasets> train_set_, eval_set_;
  std::unique_ptr<InputBuffers> inputs_;  // after the model: freed while the backend still lives
  const MLPH_Graph* graph_ = nullptr;
  uint64_t train_size_ = 0, eval_size_ = 0, micro_batches_ = 0;
  uint32_t batch_ = 0, first_epoch_ = 0;  // first_epoch_, first_step_: where a resumed run goes on
  uint64_t first_step_ = 0;
  std::vector<double> metrics_;           // the quality metric after each epoch
  double last_loss_ = 0;                  // the training loss last read (averaged over the ranks)
  // Staged data is dealt out among the ranks of a node (see storage.h: MLPH_StageStats), else among all;
  // the ranks of a spatially split sample read alike (each its part_ of every sample).
  DataShard data_shard_{};
  PartOffsets part_;
  uint64_t train_total_ = 0, eval_total_ = 0;  // over all ranks: the node-local sizes summed when staged
  std::optional<MLPH_StageStats> staged_;
};

int Run::generate_data() {
  if (session_->topology().rank != 0) return 0;  // under mpirun: one writer
  const Activity doing("generating data in " + options_.generate_data_dir);
  check(workload()->generate_data(session_->workload(), options_.generate_data_dir.c_str()), "generating data");
  std::fprintf(stderr, "wrote a synthetic %s dataset to %s\n", session_->info().benchmark, options_.generate_data_dir.c_str());
  return 0;
}

void Run::log_plugin(MlLogger& log, const LoadedPlugin& p) {
  const MLPH_Plugin& d = *p.descriptor;
  log.event("mlph_plugin", json_raw(fmt::format("{{\"kind\": {}, \"name\": {}, \"version\": {}, \"abi\": {}, "
                                                "\"file\": {}, \"hash\": {}}}",
                                                json(kind_name(d.kind)).text, json(d.name).text,
                                                json(d.version ? d.version : "").text,
                                                json(fmt::format("{}.{}", d.abi_major, d.abi_minor)).text,
                                                json(p.file.string()).text, json(p.file_hash).text)));
}

// accelerators_per_node: what the configuration says where it says so, else what the backend reports
// (ABI 1.6): one device per rank, as many as the node's ranks use; 0 for a CPU backend.
long long Run::accelerators_per_node(const BackendDevice& device) const {
  const ConfigValue& entry = session_->config().entry("mlperf.accelerators_per_node");
  if (entry.origin != "default" || !device.stated) return as_int("mlperf.accelerators_per_node", entry.text);
  if (device.type == MLPH_DEVICE_HOST || device.type == MLPH_DEVICE_HOST_PINNED) return 0;
  return std::min<long long>(device.per_node, session_->topology().local_size);
}

// The backend's device as it states it (ABI 1.6), for the log's readers and the system description.
void Run::log_device(MlLogger& log, const BackendDevice& device) {
  if (!device.stated) return;
  const char* type = device.type == MLPH_DEVICE_CUDA       ? "cuda"
                     : device.type == MLPH_DEVICE_EMULATED ? "emulated"
                                                           : "host";
  log.event("mlph_backend_device",
            json_raw(fmt::format("{{\"type\": {}, \"id\": {}, \"name\": {}, \"per_node\": {}, \"memory_bytes\": {}, "
                                 "\"precision\": {}, \"deterministic\": {}}}",
                                 json(type).text, device.id, json(device.name).text, device.per_node,
                                 device.memory_bytes, json(device.precision).text,
                                 device.deterministic ? "true" : "false")));
}

// Where srun placed the run (rank 0's view): the job, the step's nodes and tasks, the CPUs the task
// may use (the backends' default thread count), and how often the job was requeued.
void Run::log_slurm(MlLogger& log, const SlurmTask& task) {
  log.event("mlph_slurm",
            json_raw(fmt::format("{{\"job_id\": {}, \"step_id\": {}, \"nodes\": {}, \"tasks\": {}, "
                                 "\"tasks_on_node\": {}, \"local_rank\": {}, \"cpus\": {}, \"restarts\": {}}}",
                                 json(task.job_id).text, json(task.step_id).text, task.nodes, task.tasks,
                                 task.local_tasks, task.local_rank, sdk::available_cpus(), task.restarts)));
}

void Run::initialize(MlLogger& log) {
  log.event("cache_clear", json(true));
  log.start("init_start");
  log.event("seed", json(static_cast<unsigned long long>(session_->seed())));
  log.event("number_of_ranks", json(session_->topology().size));
  log.event("number_of_nodes", json(session_->topology().nodes));
  const BackendDevice device = [&] {
    const Activity doing("opening the backend");
    return session_->backend_device();
  }();
  log.event("accelerators_per_node", json(accelerators_per_node(device)));
  log.event("submission_benchmark", json(session_->info().benchmark));
  log.event("submission_org", json(session_->config().get("mlperf.org")));
  log.event("submission_division", json(session_->config().get("mlperf.division")));
  log.event("submission_status", json(session_->config().get("mlperf.status")));
  const std::string platform = session_->config().get("mlperf.platform");
  log.event("submission_platform", json(platform.empty() ? host_name() : platform));
  for (const LoadedPlugin* p : session_->plugins()) log_plugin(log, *p);
  log_device(log, device);
  if (const std::optional<SlurmTask>& slurm = session_->slurm()) log_slurm(log, *slurm);

  batch_ = session_->info().local_batch_size;
  if (!graph_) {  // a resumed run built it already, to compare it with the checkpoint's
    const Activity doing("building the model");
    check(workload()->build_graph(session_->workload(), batch_, session_->seed(), &graph_), "building the model");
  }
  check_eval_outputs();
  if (session_->sample_ranks() > 1)
    part_ = part_offsets(*graph_, session_->spatial_dims(), session_->spatial_grid(),
                         sdk::spatial::coordinates(session_->spatial_grid(), session_->rank_in_sample()));
  {
    const Activity doing("compiling the model");
    model_ = session_->compile(*graph_);
    inputs_ = std::make_unique<InputBuffers>(*graph_, &session_->backend_plugin(), session_->backend(), reading().batches);
  }
  resume_training(log);
  checkpoints_.check_readable(model_.get(), *graph_);
  check(comms()->barrier(session_->comm()), "comms");
  log.end("init_stop");
}

// Whether the signal watcher's last words ended the log on some rank: every rank votes, so that all
// stop at the same place (one going on alone would wait in collectives the others never join).
bool Run::log_ended_on_any_rank() {
  int32_t ended = run_stopped_ ? 1 : 0;
  if (session_->topology().size > 1)
    check(comms()->allreduce(session_->comm(), &ended, 1, MLPH_DTYPE_I32, MLPH_REDUCE_MAX), "comms");
  return ended != 0;
}

// At every training step boundary: the signal that asks the run to stop, 0 for none. Every rank
// votes, so that all stop at the same step (a rank going on alone would wait in the next step's
// collectives), naming the same signal (SIGTERM before SIGUSR1) whichever rank got it.
int Run::stop_requested() {
  int32_t signal = stop_signal();
  if (session_->topology().size > 1)
    check(comms()->allreduce(session_->comm(), &signal, 1, MLPH_DTYPE_I32, MLPH_REDUCE_MAX), "comms");
  return signal;
}

// Stops before training step `at` of `epoch`: rank 0 saves where the run stands when it has a
// checkpoint directory, and every rank learns whether that worked before any leaves (a rank that
// left early would have the launcher end rank 0 while it writes).
void Run::stop(MlLogger& log, Progress& progress, uint32_t epoch, StepOf at) {
  signals_.stopping();
  const int signal = at.signal;
  const uint64_t step = at.step;
  const std::string where = at.steps == 0
                                ? fmt::format("stopped after epoch {} (the log had ended: SIGTERM or SIGINT outside a step)", epoch)
                                : fmt::format("stopped before training step {} of {} in epoch {}", step + 1, at.steps, epoch + 1);
  if (!checkpoints_.saving())
    throw RunStopped(fmt::format("{}: {}; no checkpoint (no --checkpoint-dir)", stop_reason(signal), where), false);
  if (const std::optional<std::string> failed =
          checkpoints_.save_on_stop(log, progress, model_.get(), *graph_, runner_state(epoch, step)))
    throw RunStopped(fmt::format("{}: {}; the checkpoint could not be saved{}", stop_reason(signal), where, *failed),
                     false);
  signals_.set_exit_status(kExitStoppedWithCheckpoint);
  const std::string name = checkpoint_name(epoch, step);
  throw RunStopped(fmt::format("{}: {}; checkpoint {} saved: the run goes on from it with --resume auto --checkpoint-dir "
                               "{} (a requeued job does so by itself)",
                               stop_reason(signal), where, (checkpoints_.dir() / name).string(),
                               checkpoints_.dir().string()),
                   true);
}

// --resume: the checkpoint goes into the model (checkpoint_lifecycle.hpp) and the run takes up its
// counters where it stopped.
void Run::resume_training(MlLogger& log) {
  const std::optional<RunnerState> state = checkpoints_.restore(log, model_.get(), *graph_);
  if (!state) return;
  first_epoch_ = state->epochs_done;
  first_step_ = state->steps_done;
  micro_batches_ = state->micro_batches;
  metrics_ = state->metrics;
}

// Where the run stands after `epochs_done` epochs and `steps_done` steps of the next: what a
// checkpoint saves.
RunnerState Run::runner_state(uint32_t epochs_done, uint64_t steps_done) const {
  return RunnerState{epochs_done, micro_batches_, micro_batches_ / session_->gradient_accumulation(), metrics_,
                     steps_done};
}

void Run::open_datasets() {
  const uint32_t readers = reading().readers;
  {
    const Activity doing("opening the training data");
    train_set_.emplace(workload(), session_->workload(), MLPH_SPLIT_TRAIN, session_->storage_handle(), readers,
                       "training data");
  }
  {
    const Activity doing("opening the validation data");
    eval_set_.emplace(workload(), session_->workload(), MLPH_SPLIT_VALIDATION, session_->storage_handle(), readers,
                      "validation data");
  }
  train_size_ = train_set_->size();
  eval_size_ = eval_set_->size();
  // Staged, each node lists only its own files: the totals are the node sizes summed.
  double totals[2] = {static_cast<double>(train_size_), static_cast<double>(eval_size_)};
  if (staged_) {
    if (data_shard_.index != 0) totals[0] = totals[1] = 0;  // one reader per node counts the node's files
    check(comms()->allreduce(session_->comm(), totals, 2, MLPH_DTYPE_F64, MLPH_REDUCE_SUM), "comms");
  }
  train_total_ = static_cast<uint64_t>(totals[0]);
  eval_total_ = static_cast<uint64_t>(totals[1]);
  const uint64_t per_step = static_cast<uint64_t>(batch_) * data_shard_.count;
  if (train_size_ < per_step)
    throw RunFailure(fmt::format("the training set has {} samples, fewer than one global batch of {}", train_size_,
                                 per_step));
  if (eval_size_ < per_step)
    throw RunFailure(fmt::format("the validation set has {} samples, fewer than one global batch of {}", eval_size_,
                                 per_step));
}

// Copies this rank's shard of data.dir to node-local storage when the storage plug-in can (ABI 1.1),
// between staging_start and staging_stop; afterwards each rank reads its node's staged files.
void Run::stage_data(MlLogger& log) {
  const MLPH_StorageHandle& storage = *session_->storage_handle();
  const std::string& dir = session_->config().get("data.dir");
  data_shard_ = {session_->sample_group(), session_->sample_groups()};
  if (storage.api->struct_size < MLPH_STRUCT_SIZE(MLPH_StorageApi, stage) || !storage.api->stage || dir.empty()) return;
  Stopwatch watch(time_.staging_s);
  const Activity doing("staging " + dir);
  log.start("staging_start");
  MLPH_StageStats stats{};
  stats.struct_size = sizeof stats;
  check(storage.api->stage(storage.storage, dir.c_str(), session_->comms_handle(), &stats), "staging " + dir);
  log.end("staging_stop");
  staged_ = stats;
  log_staging_per_node(log, stats);
  // The node's readers in sample groups: a sample's ranks (consecutive) share a node and its files.
  const auto ranks = static_cast<int32_t>(session_->sample_ranks());
  if (stats.shard_count % ranks != 0)
    throw RunFailure(fmt::format("staged data: the {} ranks of this node do not form whole sample groups of {} "
                                 "(parallel.spatial = {})",
                                 stats.shard_count, ranks, sdk::spatial::grid_text(session_->spatial_grid())));
  data_shard_ = {stats.shard_index / ranks, stats.shard_count / ranks};
}

// Each node stages its own shard to its own disk: the log's mlph_staging_nodes says what each node
// staged (its ranks' files and bytes summed, the slowest rank's seconds), in the order of the nodes'
// first ranks. Every rank takes part (one allgather); rank 0 writes it.
void Run::log_staging_per_node(MlLogger& log, const MLPH_StageStats& mine) {
  struct Staged {
    uint64_t files, bytes_written, bytes_read;
    double seconds;
    char node[64];
  };
  Staged own{mine.files, mine.bytes_written, mine.bytes_read, mine.seconds, {}};
  host_name().copy(own.node, sizeof own.node - 1);
  std::vector<Staged> all(static_cast<size_t>(session_->topology().size));
  check(session_->comms_api()->allgather(session_->comm(), &own, all.data(), sizeof own), "comms: staging figures");
  std::vector<std::pair<std::string, Staged>> nodes;  // each node and its ranks' sums
  std::map<std::string, int> ranks;
  for (const Staged& rank : all) {
    const std::string node = rank.node;
    auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto& n) { return n.first == node; });
    if (it == nodes.end()) it = nodes.insert(nodes.end(), {node, Staged{0, 0, 0, 0.0, {}}});
    it->second.files += rank.files, it->second.bytes_written += rank.bytes_written;
    it->second.bytes_read += rank.bytes_read, it->second.seconds = std::max(it->second.seconds, rank.seconds);
    ++ranks[node];
  }
  std::string entries;
  for (const auto& [node, sum] : nodes)
    entries += fmt::format("{}{{\"node\": {}, \"ranks\": {}, \"files\": {}, \"bytes_written\": {}, \"bytes_read\": {}, "
                           "\"seconds\": {}}}",
                           entries.empty() ? "" : ", ", json(node).text, ranks[node], sum.files, sum.bytes_written,
                           sum.bytes_read, json(sum.seconds).text);
  log.event("mlph_staging_nodes", json_raw("[" + entries + "]"));
}

// Trains epoch `epoch` from step `first_step` on (a resumed run's first epoch may start inside);
// returns the step before which a signal stopped it, if one did.
std::optional<Run::StepOf> Run::train_epoch(uint32_t epoch, uint64_t first_step, Progress& progress) {
  Stopwatch watch(time_.train_s);
  const Activity training(fmt::format("training epoch {}", epoch + 1));
  // Each rank takes its shard of the shared order: the reference's shuffle-then-shard.
  const std::vector<uint64_t> order = epoch_order(workload(), session_->workload(), epoch, train_size_, session_->seed());
  std::vector<uint64_t> mine = shard(order, data_shard_, batch_);
  const uint64_t steps = mine.size() / batch_;
  if (first_step > steps)
    throw RunFailure(fmt::format("the checkpoint stopped at training step {} of epoch {}, but an epoch of this run has "
                                 "{} steps (another dataset?)",
                                 first_step + 1, epoch + 1, steps));
  mine.erase(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(first_step * batch_));
  Prefetcher reader(workload(), train_set_->readers(), *inputs_, std::move(mine), batch_, read_plan("training", epoch), part_);
  // A backend that can defer the loss (ABI 1.6) is not waited for each step: the loss is read (and
  // averaged over the ranks, and checked) about ten times an epoch and at its end, at the same steps
  // on every rank.
  const bool defer = session_->backend_is_1_6() && backend()->read_loss;
  const uint64_t read_every = defer ? std::max<uint64_t>(1, steps / 10) : 1;
  for (uint64_t step = first_step; step < steps; ++step) {
    if (const int signal = stop_requested()) return StepOf{step, steps, signal};
    Batch& batch = reader.get(step - first_step);
    const Activity doing(fmt::format("running training step {} of epoch {}", step + 1, epoch + 1));
    // Gradient accumulation: the window counts micro-batches globally, across epochs (as the
    // references do); the workload's schedule is asked once per update, whether it goes by epoch or
    // by step.
    const uint32_t window = session_->gradient_accumulation();
    const uint64_t update = micro_batches_ / window;
    double lr = 0;
    check(workload()->learning_rate(session_->workload(), epoch, update, &lr), "learning rate");
    const MLPH_StepArgs args = sdk::step_args(lr, update, micro_batches_, (micro_batches_ + 1) % window == 0, defer);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    check(backend()->train_step(model_.get(), batch.tensors.data(), batch.tensors.size(), &args, &result),
          "training step");
    ++micro_batches_;
    if ((step + 1) % read_every == 0 || step + 1 == steps) {
      last_loss_ = read_loss(result, defer);
      if (!std::isfinite(last_loss_))
        throw RunFailure(fmt::format("training diverged: the loss is {} at epoch {}, step {}", last_loss_, epoch + 1,
                                     step + 1));
    }
    progress.step(epoch, step, last_loss_);
  }
  return std::nullopt;
}

// The step's loss (waiting for it when deferred), averaged over the ranks: what the terminal shows, and
// the same divergence verdict on every rank.
double Run::read_loss(const MLPH_StepResult& result, bool deferred) {
  double loss = result.loss;
  if (deferred) check(backend()->read_loss(model_.get(), &loss), "training step");
  if (session_->topology().size > 1)
    check(comms()->allreduce(session_->comm(), &loss, 1, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE), "comms");
  return loss;
}

// A workload whose eval outputs are per sample (MLPH_WorkloadInfo.eval_per_sample) must give each
// one a row per sample of the batch: the runner leaves the padding's rows out of the sums.
void Run::check_eval_outputs() const {
  if (!session_->eval_per_sample()) return;
  for (size_t i = 0; i < graph_->n_eval_outputs; ++i) {
    const MLPH_Value& v = graph_->values[graph_->eval_outputs[i]];
    if (v.ndim < 1 || v.shape[0] != static_cast<int64_t>(batch_))
      throw RunFailure(fmt::format("the workload says its eval outputs have one row per sample, but eval output {} "
                                   "('{}') has no leading dimension of the batch size {}",
                                   i, v.name ? v.name : "", batch_));
  }
}

// The validation samples one evaluation covers, over all ranks.
uint64_t Run::eval_samples() const {
  const uint64_t global_batch = static_cast<uint64_t>(batch_) * static_cast<uint64_t>(data_shard_.count);
  return session_->eval_per_sample() ? eval_total_ : eval_total_ / global_batch * global_batch;
}

// Per-sample outputs: every validation sample, a partial last batch padded and the padding left
// out of the sums. Outputs summed over the batch cannot be split: whole global batches only.
double Run::evaluate(uint32_t epoch) {
  Stopwatch watch(time_.eval_s);
  const Activity evaluating(fmt::format("evaluating after epoch {}", epoch + 1));
  std::vector<uint64_t> order(eval_size_);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::vector<uint64_t> mine = session_->eval_per_sample() ? deal(order, data_shard_) : shard(order, data_shard_, batch_);
  const uint64_t real = mine.size();
  while (mine.size() % batch_ != 0) mine.push_back(mine.back());  // padding, left out of the sums
  Prefetcher reader(workload(), eval_set_->readers(), *inputs_, std::move(mine), batch_, read_plan("validation", epoch),
                    part_);
  std::vector<std::vector<float>> outputs(graph_->n_eval_outputs);
  std::vector<MLPH_Tensor> output_tensors;
  for (size_t i = 0; i < graph_->n_eval_outputs; ++i) {
    const MLPH_Value& v = graph_->values[graph_->eval_outputs[i]];
    outputs[i].resize(static_cast<size_t>(sdk::numel(v)));
    output_tensors.push_back(sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, outputs[i].data()));
  }
  std::vector<double> sums(graph_->n_eval_outputs, 0.0);
  // A signal waits for the evaluation's end (the next training step): the watcher bounds SIGTERM's wait.
  for (uint64_t step = 0; step < reader.steps(); ++step) {
    Batch& batch = reader.get(step);
    const Activity doing(fmt::format("running evaluation step {} of epoch {}", step + 1, epoch + 1));
    check(backend()->eval_step(model_.get(), batch.tensors.data(), batch.tensors.size(), output_tensors.data(),
                               output_tensors.size()),
          "evaluation step");
    const uint64_t rows = std::min<uint64_t>(batch_, real - step * batch_);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const size_t counted = rows == batch_ ? outputs[i].size() : rows * (outputs[i].size() / batch_);
      for (size_t k = 0; k < counted; ++k) sums[i] += outputs[i][k];
    }
  }
  sums.push_back(static_cast<double>(real));  // the samples evaluated: summed over the ranks with the outputs
  // The ranks of a split sample computed the same outputs (after a spatial_gather): one of them counts.
  if (session_->rank_in_sample() != 0) std::fill(sums.begin(), sums.end(), 0.0);
  check(comms()->allreduce(session_->comm(), sums.data(), sums.size(), MLPH_DTYPE_F64, MLPH_REDUCE_SUM), "comms");
  const auto samples = static_cast<uint64_t>(sums.back());
  sums.pop_back();
  double metric = 0;
  check(workload()->metric(session_->workload(), sums.data(), sums.size(), samples, &metric), "metric");
  return metric;
}

bool Run::train_and_evaluate(MlLogger& log) {
  const uint64_t global_batch = static_cast<uint64_t>(batch_) * static_cast<uint64_t>(session_->sample_groups());
  const uint64_t eval_used = eval_samples();
  log.event("global_batch_size", json(static_cast<unsigned long long>(global_batch)));
  log.event("train_samples", json(static_cast<unsigned long long>(train_total_)));
  log.event("eval_samples", json(static_cast<unsigned long long>(eval_used)));
  for (size_t i = 0; i < session_->info().n_log_entries; ++i)
    log.event(session_->info().log_entries[i].key, json_raw(session_->info().log_entries[i].value));

  Progress progress(session_->topology().rank == 0, session_->info().max_epochs, train_total_ / global_batch, global_batch,
                    first_epoch_);
  if (eval_used < eval_total_)
    progress.message(fmt::format("note: evaluating {} of {} validation samples (whole global batches of {})",
                                 eval_used, eval_total_, global_batch));
  for (uint32_t epoch = first_epoch_; epoch < session_->info().max_epochs; ++epoch) {
    const double started = host_api()->now_seconds();
    const Metadata epoch_num = {{"epoch_num", json(static_cast<int>(epoch + 1))}};
    log.start("epoch_start", {}, epoch_num);
    const uint64_t first_step = epoch == first_epoch_ ? first_step_ : 0;
    if (const std::optional<StepOf> stopped = train_epoch(epoch, first_step, progress)) stop(log, progress, epoch, *stopped);
    session_->average_non_trainable(model_.get(), *graph_);
    log.start("eval_start", {}, epoch_num);
    const double metric = evaluate(epoch);
    log.end("eval_stop", {}, epoch_num);
    log.end("epoch_stop", {}, epoch_num);
    log.event(session_->info().metric_key, json(metric), epoch_num);
    progress.epoch_done(epoch, session_->info().metric_key, metric, session_->info().target, host_api()->now_seconds() - started);
    if (!std::isfinite(metric))
      throw RunFailure(fmt::format("training diverged: {} is {} after epoch {}", session_->info().metric_key, metric, epoch + 1));
    metrics_.push_back(metric);
    checkpoints_.save_if_due(log, progress, model_.get(), *graph_, runner_state(epoch + 1));
    // The watcher's last words ended the log during this epoch's evaluation (SIGTERM outside a step):
    // the log says aborted, so the run ends stopped here, saving where it stands, whatever the metric.
    if (log_ended_on_any_rank()) stop(log, progress, epoch + 1, StepOf{0, 0, stop_signal()});
    if (session_->info().lower_is_better ? metric <= session_->info().target : metric >= session_->info().target) return true;
  }
  progress.message(fmt::format("stopped after {} epochs without reaching the target {} {}", session_->info().max_epochs,
                               session_->info().metric_key, session_->info().target));
  return false;
}

// Writes run_stop once: here at the end of the run, or from the signal watcher.
void Run::end_log(MlLogger& log, bool converged, const std::string& failure) {
  if (run_stopped_.exchange(true)) return;
  Metadata status = {{"status", json(converged ? "success" : "aborted")}};
  if (!failure.empty()) status.emplace_back("error", json(failure));
  log.end("run_stop", {}, status);
}

int Run::timed_run() {
  const bool rank0 = session_->topology().rank == 0;
  const std::filesystem::path log_path = rank0 ? options_.output_dir / options_.log_name : std::filesystem::path();
  MlLogger log(log_path, false);
  const LogWatch crash_words(log, run_stopped_);  // a crash or a stuck read ends the log too
  // A signal that finds this rank blocked (see SignalWatcher) ends the log from the watcher. The run
  // may take the grace to reach a step boundary when it saves a checkpoint there, and under srun,
  // which kills only after KillWait: it then ends in order, saying where it stopped.
  const double grace = !checkpoints_.saving() && !session_->slurm()
                           ? 0
                           : as_number("run.stop_grace_s", session_->config().get("run.stop_grace_s"));
  signals_.set_stop_grace(grace, !session_->slurm());
  signals_.set_last_words([&, grace](int signal, bool final) {
    const char* name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
    const std::string why =
        final ? fmt::format("{} while blocked in a step or collective: the job is being ended (did another rank fail?)",
                            name)
              : fmt::format("{} during a step, or while blocked in a collective (did another rank fail?): the job is "
                            "being ended; a checkpoint is saved if the step ends within {} s (run.stop_grace_s)",
                            name, grace);
    end_log(log, false, why);
    if (!final) return;
    session_->abandon();  // the watcher exits next: the staged copy goes now
    std::fprintf(stderr, "mlperf-run: rank %d: error: %s\n", session_->topology().rank, why.c_str());
  });
  struct Forget {
    SignalWatcher& signals;
    ~Forget() { signals.set_last_words(nullptr); }
  } forget{signals_};  // before `log` goes
  bool converged = false, stopped = false, checkpointed = false;
  std::string failure;
  if (rank0 && !checkpoints_.resume_note().empty())
    std::fprintf(stderr, "note: %s\n", checkpoints_.resume_note().c_str());
  // hpc 1.0.0/2.0.0 time the staging (inside run_start, as the reference); from 3.0.0 it may precede it.
  const bool timed_staging = session_->config().get("run.staging") == "timed";
  double started = 0;
  try {
    initialize(log);
    started = host_api()->now_seconds();
    if (!timed_staging) stage_data(log);
    log.start("run_start");
    if (timed_staging) stage_data(log);
    open_datasets();
    converged = train_and_evaluate(log);
  } catch (const RunStopped& e) {
    failure = e.what(), stopped = true, checkpointed = e.saved;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (started > 0 && !run_stopped_)  // (the watcher's last words may have ended the log already)
    report_breakdown(log, started, time_, *session_->storage_handle(), staged_, rank0);
  end_log(log, converged, failure);
  if (failure.empty() && !options_.export_weights.empty() && rank0) {  // after run_stop: not timed
    try {
      checkpoints_.export_weights(model_.get(), *graph_, micro_batches_);
    } catch (const std::exception& e) {
      failure = fmt::format("--export-weights {}: {}", options_.export_weights.string(), e.what());
    }
  }
  // Every rank says why it failed (the ranks may fail differently); rank 0 names the log.
  if (stopped) {
    if (rank0) std::fprintf(stderr, "mlperf-run: %s\n", failure.c_str());
  } else if (!failure.empty()) {
    if (session_->topology().size > 1)
      std::fprintf(stderr, "mlperf-run: rank %d: error: %s\n", session_->topology().rank, failure.c_str());
    else
      std::fprintf(stderr, "mlperf-run: error: %s\n", failure.c_str());
  }
  if (rank0) {
    std::fprintf(stderr, "MLPerf log: %s (run_stop: %s)\n", log_path.c_str(), converged ? "success" : "aborted");
  }
  const int status = stopped ? (checkpointed ? kExitStoppedWithCheckpoint : 1) : converged && failure.empty() ? 0 : 1;
  if (rank0) leave_status(status);
  // A rank that failed alone must not wait in MPI_Finalize for peers that never get there: leaving
  // now, non-zero, makes the launcher (mpirun; srun --kill-on-bad-exit) end every rank. Ranks that
  // stopped on a signal stopped together: they finish as usual.
  if (!stopped && !failure.empty() && session_->topology().size > 1) {
    session_->abandon();  // no destructor runs: the staged copy goes now
    std::fflush(nullptr);
    std::_Exit(1);
  }
  return status;
}

// --status-file: how the run ended, for a job script (mlperf.sbatch requeues on 3 whatever the launcher says).
void Run::leave_status(int status) const {
  if (options_.status_file.empty()) return;
  try {
    write_whole_file(options_.status_file, fmt::format("{}\n", status));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: warning: --status-file %s: %s\n", options_.status_file.c_str(), e.what());
  }
}

int Run::execute() {
  try {
    const Activity doing("setting up the run");
    checkpoints_.open_resume();
    session_ = std::make_unique<Session>(options_);
    if (options_.generate_data_dir.empty()) {
      check_ranks_agree(*session_, run_facts(*session_, checkpoints_.resume()));
      graph_ = checkpoints_.prepare(*session_);
    }
  } catch (const RankMismatch& e) {  // every rank found it: one of them says so
    if (session_->topology().rank == 0) std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }
  CrashHandler::set_rank(session_->topology().rank, session_->topology().size);
  if (!options_.generate_data_dir.empty()) {
    try {
      return generate_data();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
      return 1;
    }
  }
  return timed_run();
}

}  // namespace

int run(const RunOptions& options) {
  const CrashHandler crash("mlperf-run");
  const Activity running("starting the run");  // the main thread's, for the whole run
  SignalWatcher signals;
  Run run(options, signals);
  return run.execute();
}

}  // namespace mlph::core
