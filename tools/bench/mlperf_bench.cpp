// mlperf-bench: times a backend's training and evaluation steps on a workload's model with
// synthetic in-memory input (no I/O), and prints samples/s and achieved GFLOP/s, for the whole
// model and (--layers) for each layer compiled on its own, then each conv -> activation -> pooling
// block compiled together (split_blocks: what fusing them saves). Under mpirun (--comms mpi) every rank
// runs the steps and rank 0 prints; with parallel.spatial also the halo exchanges' and the gather's
// bytes and time per step and the peak memory of every rank. With --data also training steps fed
// from the dataset's files by the run's pipeline, and how long they waited for their batches.
//   mlperf-bench --workload cosmoflow --backend onednn-cpu --set train.batch_size=4 --layers --json out.json
//   mpirun -np 4 mlperf-bench --comms mpi --set parallel.spatial=4x1x1 --set train.batch_size=1
//   mlperf-bench --backend cuda --set data.edge=128 --set train.batch_size=4 --data data/cosmo128 --steps 50
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <thread>

#include "ceiling.hpp"
#include "layers.hpp"
#include "mlph/core/config.hpp"
#include "mlph/core/data_pipeline.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/json.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph/tensor.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/storage/storage.hpp"
#include "mlph/sdk/util/json.hpp"
#include "mlph/sdk/workload/workload.hpp"
#include "peak.hpp"
#include "spatial.hpp"

namespace po = boost::program_options;
using namespace mlph;
using namespace mlph::core;

namespace {

struct Timing {
  double train_s = 0, eval_s = 0;  // mean seconds per step
};

struct LayerResult {
  bench::Layer layer;
  Timing timing;
};

// A block compiled together, beside the sum of its nodes' rows compiled alone.
struct BlockResult {
  LayerResult block;
  Timing rows;
};

// A training step's inputs held as a run holds them (InputBuffers: three batches in rotation, in the
// backend's input memory where it offers some, pinned host memory on a GPU), each filled once,
// deterministically: small int16 counts (like data after Poisson sampling), floats in [-1, 1], int32
// labels in [0, 3). The eval outputs are host tensors.
class StepBuffers {
 public:
  StepBuffers(Session& session, const MLPH_Graph& g) : inputs_(g, &session.backend_plugin(), session.backend()) {
    for (size_t k = 0; k < inputs_.count(); ++k) {
      Batch& batch = inputs_.next();
      for (size_t i = 0; i < batch.tensors.size(); ++i) fill(batch.tensors[i], i + 1);
    }
    for (size_t i = 0; i < g.n_eval_outputs; ++i) {
      const MLPH_Value& v = g.values[g.eval_outputs[i]];
      std::vector<std::byte>& bytes = output_data_.emplace_back(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
      outputs_.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, bytes.data()));
    }
  }
  Batch& next() { return inputs_.next(); }
  std::vector<MLPH_Tensor>& outputs() { return outputs_; }

 private:
  static void fill(MLPH_Tensor& t, uint64_t salt) {
    const auto n = static_cast<size_t>(sdk::numel(t));
    for (size_t i = 0; i < n; ++i) {
      const float u = mlph_uniform(salt, 0, 0, i);
      if (t.dtype == MLPH_DTYPE_I16) static_cast<int16_t*>(t.data)[i] = static_cast<int16_t>(u * 40);
      else if (t.dtype == MLPH_DTYPE_I32) static_cast<int32_t*>(t.data)[i] = static_cast<int32_t>(u * 3);
      else static_cast<float*>(t.data)[i] = 2 * u - 1;
    }
  }
  InputBuffers inputs_;
  std::vector<MLPH_Tensor> outputs_;
  // Moving an inner vector keeps its heap buffer, so the tensors' pointers survive growth.
  std::vector<std::vector<std::byte>> output_data_;
};

// A model's steps as mlperf-run takes them: a backend that can defer the loss (ABI 1.6) is not waited
// for at each training step, only by finish() (read_loss), so an asynchronous backend's steps overlap as
// in a run and a timed loop of them measures their throughput.
class Stepper {
 public:
  Stepper(Session& session, MLPH_Model* model)
      : api_(session.backend_api()), model_(model), defer_(session.backend_is_1_6() && api_->read_loss) {}
  void train(Batch& batch) {
    const MLPH_StepArgs args = sdk::step_args(1e-6, step_, step_, true, defer_);
    ++step_;
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0};
    check(api_->train_step(model_, batch.tensors.data(), batch.tensors.size(), &args, &result), "train_step");
  }
  // Waits for the last training step to finish.
  void finish() {
    double loss = 0;
    if (defer_ && step_ > 0) check(api_->read_loss(model_, &loss), "train_step");
  }
  void eval(Batch& batch, std::vector<MLPH_Tensor>& outputs) {
    check(api_->eval_step(model_, batch.tensors.data(), batch.tensors.size(), outputs.data(), outputs.size()),
          "eval_step");
  }

 private:
  const MLPH_BackendApi* api_;
  MLPH_Model* model_;
  bool defer_;
  uint64_t step_ = 0;
};

template <class F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Compiles `graph`, runs `warmup` untimed training and evaluation steps, then times `steps` training
// steps (until the last has finished) and `steps` evaluation steps.
Timing time_graph(Session& session, const MLPH_Graph& graph, int steps, int warmup) {
  Owned<MLPH_Model> model = session.compile(graph);
  StepBuffers buffers(session, graph);
  Stepper stepper(session, model.get());
  for (int i = 0; i < warmup; ++i) stepper.train(buffers.next()), stepper.eval(buffers.next(), buffers.outputs());
  stepper.finish();
  Timing t;
  t.train_s = seconds([&] {
                for (int i = 0; i < steps; ++i) stepper.train(buffers.next());
                stepper.finish();
              }) / steps;
  t.eval_s = seconds([&] {
               for (int i = 0; i < steps; ++i) stepper.eval(buffers.next(), buffers.outputs());
             }) / steps;
  return t;
}

// --data: training steps on batches that the run's pipeline reads from the dataset's files (the
// workload's reader on data.readers threads, ahead of the step, into the backend's input memory), in the
// run's sample order, epoch after epoch as the steps need. Besides the step time, how long the steps
// waited for their batches: the time the pipeline could not hide; and, first, the same batches read
// with no step between them (the warm-up batches untimed): how fast the reader alone goes, the rate
// the steps could reach (--data-only: this alone, no steps); and
// beside it the ceiling: pread of the split's files from the page cache, on as many threads, into
// the same batch memory (bench::measure_pread_ceiling), as samples/s.
struct FileTiming {
  double train_s = 0, wait_s = 0, read_s = 0;  // per step
  uint64_t dataset_size = 0;
  uint32_t readers = 1;
  double ceiling_samples_s = 0, bytes_per_sample = 0;
  double pinned_bytes = 0, scratch_bytes_per_reader = 0;
  bool pinned = false;
  uint32_t batches_ahead = 0;  // the steps' read-ahead (batches_for_rate)
};

// The split's files as the storage plug-in lists them, and their bytes per sample (the split is
// taken to hold the dataset's samples and nothing else).
std::vector<std::string> split_files(Session& session, uint64_t samples, double& bytes_per_sample) {
  const std::string dir = sdk::split_directory(session.config().get("data.dir"), MLPH_SPLIT_TRAIN);
  const MLPH_StorageHandle& storage = *session.storage_handle();
  std::vector<std::string> files;
  auto collect = [](void* ctx, const char* path) { static_cast<std::vector<std::string>*>(ctx)->push_back(path); };
  check(storage.api->list(storage.storage, dir.c_str(), "", collect, &files), "listing " + dir);
  double bytes = 0;
  for (const std::string& f : files) bytes += static_cast<double>(std::filesystem::file_size(f));
  bytes_per_sample = bytes / static_cast<double>(std::max<uint64_t>(samples, 1));
  return files;
}

// Each batch's memory, written once so that every page is resident before the readers' memory is
// counted, and handed out as the ceiling's slots (each batch's largest input: the samples' bulk).
std::vector<std::span<std::byte>> touch_batches(InputBuffers& buffers, double& bytes) {
  std::vector<std::span<std::byte>> slots;
  for (size_t k = 0; k < buffers.count(); ++k) {
    const Batch& b = buffers.next();
    std::span<std::byte> largest;
    for (const MLPH_Tensor& t : b.tensors) {
      const std::span<std::byte> memory(static_cast<std::byte*>(t.data),
                                        static_cast<size_t>(sdk::numel(t)) * mlph_dtype_size(t.dtype));
      std::fill(memory.begin(), memory.end(), std::byte{0});
      bytes += static_cast<double>(memory.size());
      if (memory.size() > largest.size()) largest = memory;
    }
    slots.push_back(largest);
  }
  return slots;
}

FileTiming time_from_files(Session& session, const MLPH_Graph& graph, int steps, int warmup, bool with_steps,
                           double step_s) {
  const MLPH_WorkloadApi* workload = session.workload_api();
  const uint32_t batch = session.info().local_batch_size;
  const ReadAhead ahead = read_ahead(session.config(), batch, session.topology().local_size);
  const Datasets dataset(workload, session.workload(), MLPH_SPLIT_TRAIN, session.storage_handle(), ahead.readers,
                         "training data");
  FileTiming t;
  t.dataset_size = dataset.size();
  t.readers = ahead.readers;
  if (t.dataset_size < batch)
    throw std::runtime_error(fmt::format("--data {}: {} training samples, fewer than one batch of {}",
                                         session.config().get("data.dir"), t.dataset_size, batch));
  const auto needed = static_cast<uint64_t>(warmup + steps) * batch;
  std::vector<uint64_t> order;
  for (uint32_t epoch = 0; order.size() < needed; ++epoch) {
    const std::vector<uint64_t> whole = shard(epoch_order(workload, session.workload(), epoch, t.dataset_size,
                                                          session.seed()), DataShard{}, batch);
    order.insert(order.end(), whole.begin(), whole.end());
  }
  order.resize(needed);
  InputBuffers buffers(graph, &session.backend_plugin(), session.backend(), ahead.batches);
  const double timeout = as_number("data.read_timeout_s", session.config().get("data.read_timeout_s"));
  t.pinned = buffers.pinned();
  const std::vector<std::span<std::byte>> slots = touch_batches(buffers, t.pinned_bytes);
  // The readers alone and the ceiling, alternated 3 times and the best of each kept: on a loaded
  // machine one slow pass of either would skew their ratio.
  const std::vector<std::string> files = split_files(session, t.dataset_size, t.bytes_per_sample);
  const auto timed_bytes = static_cast<uint64_t>(t.bytes_per_sample * steps * batch);
  t.read_s = std::numeric_limits<double>::max();
  for (int pass = 0; pass < 3; ++pass) {
    const double resident = bench::resident_bytes();
    {
      Prefetcher alone(workload, dataset.readers(), buffers, order, batch, ReadPlan{"training", 0, timeout});
      for (uint64_t i = 0; i < static_cast<uint64_t>(warmup); ++i) alone.get(i);  // first reads (a file's layout found)
      t.read_s = std::min(t.read_s, seconds([&] {
                                      for (auto i = static_cast<uint64_t>(warmup); i < alone.steps(); ++i) alone.get(i);
                                    }) / steps);
    }
    if (pass == 0) t.scratch_bytes_per_reader = std::max(0.0, bench::resident_bytes() - resident) / ahead.readers;
    const bench::PreadCeiling ceiling = bench::measure_pread_ceiling(files, slots, ahead.readers, timed_bytes);
    t.ceiling_samples_s = std::max(t.ceiling_samples_s, ceiling.bytes_per_s / t.bytes_per_sample);
  }
  if (!with_steps) return t;
  // The steps read as deep ahead as the rate they consume asks (a reader's time per sample over
  // the step's time, measured just before), in batch memory of that depth.
  t.batches_ahead = batches_for_rate(ahead, step_s, t.read_s * ahead.readers / batch);
  InputBuffers deep(graph, &session.backend_plugin(), session.backend(), t.batches_ahead);
  Owned<MLPH_Model> model = session.compile(graph);
  Prefetcher reader(workload, dataset.readers(), deep, std::move(order), batch, ReadPlan{"training", 0, timeout});
  Stepper stepper(session, model.get());
  uint64_t step = 0;
  for (; step < static_cast<uint64_t>(warmup); ++step) stepper.train(reader.get(step));
  stepper.finish();
  double waited = 0;
  t.train_s = seconds([&] {
                for (; step < reader.steps(); ++step) {
                  Batch* next = nullptr;
                  waited += seconds([&] { next = &reader.get(step); });
                  stepper.train(*next);
                }
                stepper.finish();
              }) / steps;
  t.wait_s = waited / steps;
  return t;
}

double gflops(double flops, double s) { return s > 0 ? flops / s / 1e9 : 0; }

// The peaks a run's layers are measured against, on this machine's cores (none for a backend on an
// accelerator: gflops 0). A bf16 run's convolutions run on the matrix units where the CPU has them
// (oneDNN's brgconv:avx512_core_amx_bf16 on AMX), else on AVX512_BF16's dot products: `gflops` is
// that unit's peak, and `vector` the AVX512_BF16 peak beside it on an AMX machine, for layers that
// oneDNN leaves on the vector units (few channels, depthwise).
struct Peak {
  std::string precision;  // "FP32", "BF16 AVX-512" or "BF16 AMX"
  double gflops = 0;
  bench::Peaks measured;
  double vector() const { return measured.bf16_tiles > 0 ? measured.bf16_vector : 0; }
};

Peak compute_peak(Session& session) {
  if (session.backend_device().type != MLPH_DEVICE_HOST) return {};
  const auto& options = session.config().passthrough();
  const auto precision = options.find("backend.precision");
  const bool bf16 = precision != options.end() && precision->second.text == "bf16";
  Peak p;
  p.measured = bench::measure_peaks(std::thread::hardware_concurrency(), bf16);
  if (!bf16) p.precision = "FP32", p.gflops = p.measured.fp32;
  else if (p.measured.bf16_tiles > 0) p.precision = "BF16 AMX", p.gflops = p.measured.bf16_tiles;
  else p.precision = "BF16 AVX-512", p.gflops = p.measured.bf16_vector;
  return p;
}

std::string describe(const Peak& peak) {
  const bench::Peaks& m = peak.measured;
  std::string all = fmt::format("FP32 FMA {:.0f}", m.fp32);
  if (m.bf16_vector > 0) all += fmt::format(", BF16 AVX-512 {:.0f}", m.bf16_vector);
  if (m.bf16_tiles > 0) all += fmt::format(", BF16 AMX tiles {:.0f}", m.bf16_tiles);
  return fmt::format("peaks measured (GFLOP/s): {}; %peak against {}", all, peak.precision);
}

void print_layers(const std::vector<LayerResult>& layers, const Peak& peak) {
  if (peak.gflops > 0)
    fmt::print("\nper layer (each compiled alone; {})\n", describe(peak));
  else
    fmt::print("\nper layer (each compiled alone; no peak measured for a backend on an accelerator)\n");
  const bool two = peak.vector() > 0;  // an AMX machine's bf16 run: the vector units' share too
  size_t width = 14;  // the longest name (DeepCAM's run to 30 characters)
  for (const auto& [layer, t] : layers) width = std::max(width, layer.name.size());
  fmt::print("{:<{}} {:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7}{}\n", "layer", width, "GFLOP fwd", "fwd ms",
             "fwd GF/s", "%peak", "train ms", "train GF/s", "%peak", two ? fmt::format(" {:>8}", "%AVX-512") : "");
  const auto share = [](double gf, double of) { return of > 0 ? fmt::format("{:.0f}", 100 * gf / of) : "-"; };
  for (const auto& [layer, t] : layers) {
    const double fwd = gflops(layer.forward_flops, t.eval_s), train = gflops(layer.train_flops(), t.train_s);
    fmt::print("{:<{}} {:>10.2f} {:>10.3f} {:>10.1f} {:>7} {:>10.3f} {:>10.1f} {:>7}{}\n", layer.name, width,
               layer.forward_flops / 1e9, t.eval_s * 1e3, fwd, share(fwd, peak.gflops), t.train_s * 1e3, train,
               share(train, peak.gflops), two ? fmt::format(" {:>8}", share(train, peak.vector())) : "");
  }
}

// A block's nodes as rows of split_layers (a layer is named after its first node): their times summed.
Timing rows_of(const bench::Layer& block, const MLPH_Graph& graph, const std::vector<LayerResult>& layers) {
  Timing sum;
  for (size_t node : block.nodes)
    for (const auto& [layer, t] : layers)
      if (layer.name == graph.nodes[node].name) sum.train_s += t.train_s, sum.eval_s += t.eval_s;
  return sum;
}

void print_blocks(const std::vector<BlockResult>& blocks) {
  if (blocks.empty()) return;
  fmt::print("\nper block (a conv, its activation and its pooling compiled together, as a backend may fuse them)\n");
  fmt::print("{:<14} {:>10} {:>10} {:>14} {:>14} {:>12}\n", "block", "fwd ms", "train ms", "rows' fwd ms",
             "rows' train ms", "train saved");
  for (const auto& [result, rows] : blocks) {
    const auto& [block, t] = result;
    fmt::print("{:<14} {:>10.3f} {:>10.3f} {:>14.3f} {:>14.3f} {:>11.0f}%\n", block.name, t.eval_s * 1e3,
               t.train_s * 1e3, rows.eval_s * 1e3, rows.train_s * 1e3,
               rows.train_s > 0 ? 100 * (1 - t.train_s / rows.train_s) : 0.0);
  }
}

void write_json(const std::string& path, Session& session, uint32_t batch, double forward, const Peak& peak,
                const Timing& model, const std::vector<LayerResult>& layers, const std::vector<BlockResult>& blocks,
                const MLPH_Graph& graph, const std::optional<FileTiming>& files) {
  std::ofstream out(path);
  auto num = [](double v) { return sdk::json_number(v); };
  const BackendDevice device = session.backend_device();
  out << fmt::format("{{\"workload\": \"{}\", \"backend\": \"{}\", \"batch\": {}, \"forward_flops\": {},\n",
                     session.info().benchmark, session.backend_name(), batch, num(forward));
  out << fmt::format(" \"device\": {}, \"precision\": {},\n", json(device.name).text,
                     json(device.precision).text);
  if (files)
    out << fmt::format(" \"files\": {{\"dir\": {}, \"samples\": {}, \"train_s\": {}, \"wait_s\": {}, \"read_s\": {}, "
                       "\"readers\": {}, \"ceiling_samples_s\": {}, \"bytes_per_sample\": {}, \"batch_memory_bytes\": {}, "
                       "\"scratch_bytes_per_reader\": {}}},\n",
                       json(session.config().get("data.dir")).text, files->dataset_size, num(files->train_s),
                       num(files->wait_s), num(files->read_s), files->readers, num(files->ceiling_samples_s),
                       num(files->bytes_per_sample), num(files->pinned_bytes), num(files->scratch_bytes_per_reader));
  out << fmt::format(" \"peak_precision\": \"{}\", \"peak_gflops\": {}, \"peaks\": {{\"fp32\": {}, \"bf16_avx512\": {}, "
                     "\"bf16_amx\": {}}}, \"model\": {{\"train_s\": {}, \"eval_s\": {}}},\n \"layers\": [",
                     peak.precision, num(peak.gflops), num(peak.measured.fp32), num(peak.measured.bf16_vector),
                     num(peak.measured.bf16_tiles), num(model.train_s), num(model.eval_s));
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& [layer, t] = layers[i];
    out << fmt::format("{}\n  {{\"name\": \"{}\", \"kind\": \"{}\", \"forward_flops\": {}, \"train_flops\": {}, "
                       "\"eval_s\": {}, \"train_s\": {}}}",
                       i ? "," : "", layer.name, layer.kind, num(layer.forward_flops), num(layer.train_flops()),
                       num(t.eval_s), num(t.train_s));
  }
  out << "],\n \"blocks\": [";
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& [result, rows] = blocks[i];
    const auto& [block, t] = result;
    std::string nodes;
    for (size_t node : block.nodes) nodes += fmt::format("{}\"{}\"", nodes.empty() ? "" : ", ", graph.nodes[node].name);
    out << fmt::format("{}\n  {{\"name\": \"{}\", \"nodes\": [{}], \"eval_s\": {}, \"train_s\": {}, "
                       "\"rows_eval_s\": {}, \"rows_train_s\": {}}}",
                       i ? "," : "", block.name, nodes, num(t.eval_s), num(t.train_s), num(rows.eval_s),
                       num(rows.train_s));
  }
  out << "]}\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Rank 0 prints the peak memory of each rank (`peak` holds this rank's) and, with parallel.spatial,
// what it cost per step and rank: the halos and the gather, measured alone.
void print_spatial(Session& session, const MLPH_Graph& graph, int steps, double peak) {
  const bench::SpatialCost cost = bench::spatial_cost(session, graph, steps);
  const int32_t ranks = session.topology().size;
  std::vector<double> peaks(static_cast<size_t>(ranks));
  check(session.comms_api()->allgather(session.comm(), &peak, peaks.data(), sizeof peak), "comms");
  double slowest[2] = {cost.halo_s, cost.gather_s};
  check(session.comms_api()->allreduce(session.comm(), slowest, 2, MLPH_DTYPE_F64, MLPH_REDUCE_MAX), "comms");
  if (session.topology().rank != 0) return;
  constexpr double MB = 1 << 20;
  std::string list;
  for (double p : peaks) list += fmt::format("{}{:.0f}", list.empty() ? "" : " ", p / MB);
  fmt::print("peak memory per rank (MB): {}\n", list);
  if (session.sample_ranks() == 1) return;
  fmt::print("spatial: grid {} ({} ranks per sample, {} sample group{})\n", sdk::spatial::grid_text(session.spatial_grid()),
             session.sample_ranks(), session.sample_groups(), session.sample_groups() == 1 ? "" : "s");
  fmt::print("halo: {} exchanges, rank 0 sends {:.2f} MB per step (forward and backward; as many arrive), "
             "{:.3f} s per step (slowest rank, measured alone)\n",
             cost.halo_exchanges, cost.halo_bytes / MB, slowest[0]);
  fmt::print("gather: {:.2f} MB block per rank allgathered, {:.2f} MB whole allreduced in backward, {:.3f} s per "
             "step\n",
             cost.gather_block_bytes / MB, cost.gather_whole_bytes / MB, slowest[1]);
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions options;
  std::vector<std::string> plugin_dirs;
  std::string json_path, data_dir;
  int steps = 3, warmup = 1;
  po::options_description cli("mlperf-bench: time training and evaluation steps of a backend\n\noptions");
  cli.add_options()("help,h", "show this help")("workload,w", po::value(&options.workload)->default_value("cosmoflow"),
                                               "workload plug-in")(
      "backend,b", po::value(&options.backend), "backend plug-in (default: reference)")(
      "comms", po::value(&options.comms), "comms plug-in (default: local; mpi under mpirun)")(
      "config,c", po::value(&options.config_file), "YAML config")(
      "set,s", po::value(&options.sets)->composing(), "key=value (repeatable), e.g. train.batch_size=1")(
      "steps", po::value(&steps), "timed steps (default 3)")("warmup", po::value(&warmup), "untimed steps (default 1)")(
      "layers", "also time each layer compiled on its own, and each conv -> activation -> pooling block")(
      "data", po::value(&data_dir),
      "also time training steps fed from the dataset in DIR by the run's pipeline, and their wait for batches")(
      "data-only", "with --data: time the readers alone and their pread ceiling, no steps")(
      "json", po::value(&json_path), "write the figures to FILE")(
      "plugin-dir", po::value(&plugin_dirs)->composing(), "plug-in directory (repeatable)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, cli), vm);
    po::notify(vm);
    if (steps < 1 || warmup < 0) throw po::error("--steps must be >= 1 and --warmup >= 0");
  } catch (const po::error& e) {
    std::cerr << "mlperf-bench: error: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << cli << "\n";
    return 0;
  }
  for (const auto& d : plugin_dirs) options.plugin_dirs.emplace_back(d);
  options.division = "open";  // benchmarks may use any shape
  options.seed = 1;
  if (!data_dir.empty()) options.sets.push_back("data.dir=" + data_dir);
  try {
    Session session(options);
    const uint32_t batch = session.info().local_batch_size;
    const MLPH_Graph* graph = nullptr;
    check(session.workload_api()->build_graph(session.workload(), batch, 1, &graph), "building the model");
    const double forward = bench::forward_flops(*graph);
    const MLPH_Value& input = graph->values[graph->inputs[0]];
    const bool speaker = session.topology().rank == 0;
    if (speaker) {
      fmt::print("workload {}  backend {}  batch {}  input {}  ranks {}\n", session.info().benchmark,
                 session.backend_name(), batch, sdk::shape_string(input.shape, input.ndim), session.topology().size);
      fmt::print("forward work: {:.2f} GFLOP/sample on each rank (training step ~3x: {:.2f})\n", forward / batch / 1e9,
                 3 * forward / batch / 1e9);
      const BackendDevice device = session.backend_device();
      if (device.type != MLPH_DEVICE_HOST)
        fmt::print("device: {} (device {}), precision {}\n", device.name, device.id, device.precision);
    }
    const bool data_only = vm.count("data-only") > 0;
    if (data_only && data_dir.empty()) throw std::runtime_error("--data-only needs --data DIR");
    const Timing model = data_only ? Timing{} : time_graph(session, *graph, steps, warmup);
    const double memory = bench::peak_rss_bytes();  // before the spatial measurements allocate their own
    if (speaker && !data_only) {
      fmt::print("train step: {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", model.train_s, batch / model.train_s,
                 gflops(3 * forward, model.train_s));
      fmt::print("eval step:  {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", model.eval_s, batch / model.eval_s,
                 gflops(forward, model.eval_s));
    }
    if (!data_only) print_spatial(session, *graph, steps, memory);
    std::optional<FileTiming> files;
    if (!data_dir.empty()) {
      if (session.topology().size > 1) throw std::runtime_error("--data reads batches on one rank: run it without mpirun");
      files = time_from_files(session, *graph, steps, warmup, !data_only, model.train_s);
      const double rate = batch / files->read_s;
      fmt::print("from files ({}, {} samples): {} reader{} alone {:.3f} samples/s, {:.0f}% of the pread ceiling "
                 "{:.3f} samples/s ({:.2f} GB/s of page cache into the batch memory on {} thread{})",
                 data_dir, files->dataset_size, files->readers, files->readers == 1 ? "" : "s", rate,
                 100 * rate / files->ceiling_samples_s, files->ceiling_samples_s,
                 files->ceiling_samples_s * files->bytes_per_sample / 1e9, files->readers,
                 files->readers == 1 ? "" : "s");
      if (!data_only)
        fmt::print("; train step {:.4f} s  {:.3f} samples/s, {} batches read ahead; waited for batches {:.4f} s per "
                   "step ({:.1f}% of the step)",
                   files->train_s, batch / files->train_s, files->batches_ahead, files->wait_s,
                   100 * files->wait_s / files->train_s);
      fmt::print("\n");
      fmt::print("data memory: batch buffers {:.1f} MB ({}), reader scratch {:.1f} MB per reader (resident growth "
                 "while the readers ran alone)\n",
                 files->pinned_bytes / 1e6, files->pinned ? "the backend's pinned memory" : "host memory",
                 files->scratch_bytes_per_reader / 1e6);
    }
    std::cout << std::flush;

    std::vector<LayerResult> layers;
    std::vector<BlockResult> blocks;
    Peak peak;
    if (vm.count("layers") && session.topology().size > 1)
      throw std::runtime_error("--layers times layers on one rank: run it without mpirun");
    if (vm.count("layers")) {
      peak = compute_peak(session);
      const auto time_each = [&](const std::vector<bench::Layer>& parts) {  // each compiled on its own
        std::vector<LayerResult> timed;
        for (const bench::Layer& part : parts) {
          sdk::GraphBuilder builder;
          timed.push_back({part, time_graph(session, *bench::layer_graph(*graph, part, builder), steps, warmup)});
        }
        return timed;
      };
      layers = time_each(bench::split_layers(*graph));
      print_layers(layers, peak);
      for (LayerResult& block : time_each(bench::split_blocks(*graph)))
        blocks.push_back({block, rows_of(block.layer, *graph, layers)});
      print_blocks(blocks);
    }
    if (!json_path.empty()) write_json(json_path, session, batch, forward, peak, model, layers, blocks, *graph, files);
  } catch (const std::exception& e) {
    std::cerr << "mlperf-bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
