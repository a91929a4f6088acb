#include "mlph/core/runner.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <future>
#include <memory>

#include "mlph/core/config.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/mllog.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/core/progress.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/tensor.hpp"

namespace mlph::core {
namespace {

// Raised inside the timed region: the run is logged as aborted and the process exits 1.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

// Deterministic Fisher-Yates with SplitMix64, identical on every rank and platform.
std::vector<uint64_t> shuffled(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  for (uint64_t i = n; i > 1; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    const uint64_t j = mlph_mix64(state) % i;
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

// Host buffers shaped like the graph inputs, filled by the workload's reader.
struct Batch {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<MLPH_Tensor> tensors;
};

Batch make_batch(const MLPH_Graph& graph) {
  Batch batch;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    batch.buffers.emplace_back(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
  }
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    batch.tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, batch.buffers[i].data()));
  }
  return batch;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
}

class Run {
 public:
  explicit Run(const RunOptions& options) : options_(options) {}
  int execute();

 private:
  int generate_data();
  int timed_run();
  void initialize(MlLogger& log);
  bool train_and_evaluate(MlLogger& log);
  void train_epoch(uint32_t epoch, Progress& progress);
  double evaluate();
  void open_datasets();
  void log_plugin(MlLogger& log, const LoadedPlugin& plugin);

  const MLPH_WorkloadApi* workload() const { return session_->workload_api(); }
  const MLPH_BackendApi* backend() const { return session_->backend_api(); }
  const MLPH_CommsApi* comms() const { return session_->comms_api(); }

  const RunOptions& options_;
  std::unique_ptr<Session> session_;
  // Declared after the session: destroyed before the plug-ins that made them.
  Owned<MLPH_Model> model_{nullptr, nullptr};
  Owned<MLPH_Dataset> train_set_{nullptr, nullptr}, eval_set_{nullptr, nullptr};
  const MLPH_Graph* graph_ = nullptr;
  uint64_t train_size_ = 0, eval_size_ = 0, global_step_ = 0;
  uint32_t batch_ = 0;
};

int Run::generate_data() {
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

void Run::initialize(MlLogger& log) {
  log.event("cache_clear", json(true));
  log.start("init_start");
  log.event("seed", json(static_cast<unsigned long long>(session_->seed())));
  log.event("number_of_ranks", json(session_->topology().size));
  log.event("number_of_nodes", json(session_->topology().nodes));
  log.event("accelerators_per_node", json(as_int("mlperf.accelerators_per_node",
                                                  session_->config().get("mlperf.accelerators_per_node"))));
  log.event("submission_benchmark", json(session_->info().benchmark));
  log.event("submission_org", json(session_->config().get("mlperf.org")));
  log.event("submission_division", json(session_->config().get("mlperf.division")));
  log.event("submission_status", json(session_->config().get("mlperf.status")));
  const std::string platform = session_->config().get("mlperf.platform");
  log.event("submission_platform", json(platform.empty() ? host_name() : platform));
  for (const LoadedPlugin* p : session_->plugins()) log_plugin(log, *p);

  batch_ = session_->info().local_batch_size;
  check(workload()->build_graph(session_->workload(), batch_, session_->seed(), &graph_), "building the model");
  model_ = session_->compile(*graph_);
  check(comms()->barrier(session_->comm()), "comms");
  log.end("init_stop");
}

void Run::open_datasets() {
  MLPH_Dataset* raw = nullptr;
  check(workload()->dataset_open(session_->workload(), MLPH_SPLIT_TRAIN, session_->storage_handle(), &raw), "training data");
  train_set_ = Owned<MLPH_Dataset>(raw, workload()->dataset_close);
  check(workload()->dataset_open(session_->workload(), MLPH_SPLIT_VALIDATION, session_->storage_handle(), &raw), "validation data");
  eval_set_ = Owned<MLPH_Dataset>(raw, workload()->dataset_close);
  check(workload()->dataset_size(train_set_.get(), &train_size_), "training data");
  check(workload()->dataset_size(eval_set_.get(), &eval_size_), "validation data");
  const uint64_t per_step = static_cast<uint64_t>(batch_) * session_->topology().size;
  if (train_size_ < per_step)
    throw RunFailure(fmt::format("the training set has {} samples, fewer than one global batch of {}", train_size_,
                                 per_step));
  if (eval_size_ < per_step)
    throw RunFailure(fmt::format("the validation set has {} samples, fewer than one global batch of {}", eval_size_,
                                 per_step));
}

// Reads batches one ahead on a second thread, so decoding overlaps the backend's step.
class Prefetcher {
 public:
  Prefetcher(const MLPH_WorkloadApi* api, MLPH_Dataset* dataset, const MLPH_Graph& graph, std::vector<uint64_t> order,
             uint32_t batch)
      : api_(api), dataset_(dataset), order_(std::move(order)), batch_(batch) {
    slots_[0] = make_batch(graph);
    slots_[1] = make_batch(graph);
    if (steps() > 0) pending_ = std::async(std::launch::async, [this] { fill(0); });
  }
  ~Prefetcher() {
    if (pending_.valid()) pending_.wait();
  }
  uint64_t steps() const { return order_.size() / batch_; }
  // The batch of step `i` (called with i = 0, 1, 2, ... in order).
  Batch& get(uint64_t i) {
    pending_.get();  // rethrows the reader's error
    if (i + 1 < steps()) pending_ = std::async(std::launch::async, [this, i] { fill(i + 1); });
    return slots_[i % 2];
  }

 private:
  void fill(uint64_t i) {
    Batch& b = slots_[i % 2];
    check(api_->dataset_read(dataset_, order_.data() + i * batch_, batch_, b.tensors.data(), b.tensors.size()),
          "reading data");
  }
  const MLPH_WorkloadApi* api_;
  MLPH_Dataset* dataset_;
  std::vector<uint64_t> order_;
  uint32_t batch_;
  Batch slots_[2];
  std::future<void> pending_;
};

// This rank's share of `order`: elements rank, rank+size, ..., cut to whole global batches.
std::vector<uint64_t> shard(const std::vector<uint64_t>& order, const MLPH_Topology& t, uint32_t batch) {
  const uint64_t steps = order.size() / (static_cast<uint64_t>(batch) * t.size);
  std::vector<uint64_t> mine;
  for (uint64_t i = static_cast<uint64_t>(t.rank); mine.size() < steps * batch; i += t.size) mine.push_back(order[i]);
  return mine;
}

void Run::train_epoch(uint32_t epoch, Progress& progress) {
  double lr = 0;
  check(workload()->learning_rate(session_->workload(), epoch, global_step_, &lr), "learning rate");
  // Same shuffle on every rank (shared seed), then each rank takes its shard: the reference's order.
  Prefetcher reader(workload(), train_set_.get(), *graph_, shard(shuffled(train_size_, session_->seed() + epoch), session_->topology(), batch_),
                    batch_);
  for (uint64_t step = 0; step < reader.steps(); ++step) {
    if (g_interrupted) throw RunFailure("interrupted");
    Batch& batch = reader.get(step);
    MLPH_StepArgs args{sizeof(MLPH_StepArgs), nullptr, lr, global_step_};
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0.0};
    check(backend()->train_step(model_.get(), batch.tensors.data(), batch.tensors.size(), &args, &result),
          "training step");
    if (!std::isfinite(result.loss))
      throw RunFailure(fmt::format("training diverged: the loss is {} at epoch {}, step {}", result.loss, epoch + 1,
                                   step + 1));
    ++global_step_;
    progress.step(epoch, step, result.loss);
  }
}

double Run::evaluate() {
  std::vector<uint64_t> order(eval_size_);
  for (uint64_t i = 0; i < eval_size_; ++i) order[i] = i;
  Prefetcher reader(workload(), eval_set_.get(), *graph_, shard(order, session_->topology(), batch_), batch_);
  std::vector<std::vector<float>> outputs(graph_->n_eval_outputs);
  std::vector<MLPH_Tensor> output_tensors;
  for (size_t i = 0; i < graph_->n_eval_outputs; ++i) {
    const MLPH_Value& v = graph_->values[graph_->eval_outputs[i]];
    outputs[i].resize(static_cast<size_t>(sdk::numel(v)));
    output_tensors.push_back(sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, outputs[i].data()));
  }
  std::vector<double> sums(graph_->n_eval_outputs, 0.0);
  for (uint64_t step = 0; step < reader.steps(); ++step) {
    if (g_interrupted) throw RunFailure("interrupted");
    Batch& batch = reader.get(step);
    check(backend()->eval_step(model_.get(), batch.tensors.data(), batch.tensors.size(), output_tensors.data(),
                               output_tensors.size()),
          "evaluation step");
    for (size_t i = 0; i < outputs.size(); ++i)
      for (float x : outputs[i]) sums[i] += x;
  }
  check(comms()->allreduce(session_->comm(), sums.data(), sums.size(), MLPH_DTYPE_F64, MLPH_REDUCE_SUM), "comms");
  const uint64_t samples = reader.steps() * batch_ * static_cast<uint64_t>(session_->topology().size);
  double metric = 0;
  check(workload()->metric(session_->workload(), sums.data(), sums.size(), samples, &metric), "metric");
  return metric;
}

bool Run::train_and_evaluate(MlLogger& log) {
  const uint64_t global_batch = static_cast<uint64_t>(batch_) * session_->topology().size;
  const uint64_t eval_used = eval_size_ / global_batch * global_batch;
  log.event("global_batch_size", json(static_cast<unsigned long long>(global_batch)));
  log.event("train_samples", json(static_cast<unsigned long long>(train_size_)));
  log.event("eval_samples", json(static_cast<unsigned long long>(eval_used)));
  for (size_t i = 0; i < session_->info().n_log_entries; ++i)
    log.event(session_->info().log_entries[i].key, json_raw(session_->info().log_entries[i].value));

  Progress progress(session_->topology().rank == 0, session_->info().max_epochs, train_size_ / global_batch, global_batch);
  if (eval_used < eval_size_)
    progress.message(fmt::format("note: evaluating {} of {} validation samples (whole global batches of {})",
                                 eval_used, eval_size_, global_batch));
  for (uint32_t epoch = 0; epoch < session_->info().max_epochs; ++epoch) {
    const double started = host_api()->now_seconds();
    const Metadata epoch_num = {{"epoch_num", json(static_cast<int>(epoch + 1))}};
    log.start("epoch_start", {}, epoch_num);
    train_epoch(epoch, progress);
    log.start("eval_start", {}, epoch_num);
    const double metric = evaluate();
    log.end("eval_stop", {}, epoch_num);
    log.end("epoch_stop", {}, epoch_num);
    log.event(session_->info().metric_key, json(metric), epoch_num);
    progress.epoch_done(epoch, session_->info().metric_key, metric, session_->info().target, host_api()->now_seconds() - started);
    if (!std::isfinite(metric))
      throw RunFailure(fmt::format("training diverged: {} is {} after epoch {}", session_->info().metric_key, metric, epoch + 1));
    if (session_->info().lower_is_better ? metric <= session_->info().target : metric >= session_->info().target) return true;
  }
  progress.message(fmt::format("stopped after {} epochs without reaching the target {} {}", session_->info().max_epochs,
                               session_->info().metric_key, session_->info().target));
  return false;
}

int Run::timed_run() {
  const bool rank0 = session_->topology().rank == 0;
  const std::filesystem::path log_path = rank0 ? options_.output_dir / "result_0.txt" : std::filesystem::path();
  MlLogger log(log_path, false);
  bool converged = false;
  std::string failure;
  try {
    initialize(log);
    log.start("run_start");
    open_datasets();
    converged = train_and_evaluate(log);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  Metadata status = {{"status", json(converged ? "success" : "aborted")}};
  if (!failure.empty()) status.emplace_back("error", json(failure));
  log.end("run_stop", {}, status);
  if (rank0) {
    if (!failure.empty()) std::fprintf(stderr, "mlperf-run: error: %s\n", failure.c_str());
    std::fprintf(stderr, "MLPerf log: %s (run_stop: %s)\n", log_path.c_str(), converged ? "success" : "aborted");
  }
  return converged ? 0 : 1;
}

int Run::execute() {
  try {
    session_ = std::make_unique<Session>(options_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlperf-run: error: %s\n", e.what());
    return 2;
  }
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
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  Run run(options);
  return run.execute();
}

}  // namespace mlph::core
