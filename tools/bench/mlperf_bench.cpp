// mlperf-bench: times a backend's training and evaluation steps on a workload's model with
// synthetic in-memory input (no I/O), and prints samples/s and achieved GFLOP/s, for the whole
// model and (--layers) for each layer compiled on its own. Under mpirun (--comms mpi) every rank
// runs the steps and rank 0 prints; with parallel.spatial also the halo exchanges' and the gather's
// bytes and time per step and the peak memory of every rank.
//   mlperf-bench --workload cosmoflow --backend onednn-cpu --set train.batch_size=4 --layers --json out.json
//   mpirun -np 4 mlperf-bench --comms mpi --set parallel.spatial=4x1x1 --set train.batch_size=1
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

#include "layers.hpp"
#include "peak.hpp"
#include "spatial.hpp"
#include "mlph/sdk/backend.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/json.hpp"
#include "mlph/sdk/tensor.hpp"

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

// Host buffers for a graph's inputs and eval outputs, filled deterministically: small int16 counts
// (like data after Poisson sampling), floats in [-1, 1], int32 labels in [0, 3).
class StepBuffers {
 public:
  explicit StepBuffers(const MLPH_Graph& g) {
    for (size_t i = 0; i < g.n_inputs; ++i) add(inputs_, input_data_, g.values[g.inputs[i]], i + 1);
    for (size_t i = 0; i < g.n_eval_outputs; ++i) add(outputs_, output_data_, g.values[g.eval_outputs[i]], 0);
  }
  std::vector<MLPH_Tensor>& inputs() { return inputs_; }
  std::vector<MLPH_Tensor>& outputs() { return outputs_; }

 private:
  static void add(std::vector<MLPH_Tensor>& tensors, std::vector<std::vector<std::byte>>& data, const MLPH_Value& v,
                  uint64_t salt) {
    const auto n = static_cast<size_t>(sdk::numel(v));
    std::vector<std::byte>& bytes = data.emplace_back(n * mlph_dtype_size(v.dtype));
    for (size_t i = 0; salt && i < n; ++i) {
      const float u = mlph_uniform(salt, 0, 0, i);
      if (v.dtype == MLPH_DTYPE_I16) reinterpret_cast<int16_t*>(bytes.data())[i] = static_cast<int16_t>(u * 40);
      else if (v.dtype == MLPH_DTYPE_I32) reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(u * 3);
      else reinterpret_cast<float*>(bytes.data())[i] = 2 * u - 1;
    }
    tensors.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, bytes.data()));
  }
  std::vector<MLPH_Tensor> inputs_, outputs_;
  // Moving an inner vector keeps its heap buffer, so the tensors' pointers survive growth.
  std::vector<std::vector<std::byte>> input_data_, output_data_;
};

template <class F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Compiles `graph`, runs `warmup` untimed steps, then times `steps` training and evaluation steps.
Timing time_graph(Session& session, const MLPH_Graph& graph, int steps, int warmup) {
  Owned<MLPH_Model> model = session.compile(graph);
  StepBuffers buffers(graph);
  const auto* api = session.backend_api();
  uint64_t step = 0;
  auto train = [&] {
    const MLPH_StepArgs args = mlph::sdk::step_args(1e-6, step++);
    MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0};
    check(api->train_step(model.get(), buffers.inputs().data(), buffers.inputs().size(), &args, &result),
          "train_step");
  };
  auto eval = [&] {
    check(api->eval_step(model.get(), buffers.inputs().data(), buffers.inputs().size(), buffers.outputs().data(),
                         buffers.outputs().size()),
          "eval_step");
  };
  for (int i = 0; i < warmup; ++i) train(), eval();
  Timing t;
  for (int i = 0; i < steps; ++i) t.train_s += seconds(train), t.eval_s += seconds(eval);
  t.train_s /= steps;
  t.eval_s /= steps;
  return t;
}

double gflops(double flops, double s) { return s > 0 ? flops / s / 1e9 : 0; }

// The peak a run's layers are measured against: bf16's where the backend computes in bf16 (its
// `precision` option), else fp32's.
struct Peak {
  std::string precision;
  double gflops = 0;
};

Peak compute_peak(const Session& session) {
  const auto& options = session.config().passthrough();
  const auto precision = options.find("backend.precision");
  if (precision != options.end() && precision->second.text == "bf16")
    return {"BF16", bench::measure_bf16_peak(std::thread::hardware_concurrency())};
  return {"FP32", bench::measure_fp32_peak(std::thread::hardware_concurrency())};
}

void print_layers(const std::vector<LayerResult>& layers, const Peak& peak) {
  fmt::print("\nper layer (each compiled alone; {} peak measured: {:.0f} GFLOP/s)\n", peak.precision, peak.gflops);
  fmt::print("{:<14} {:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7}\n", "layer", "GFLOP fwd", "fwd ms", "fwd GF/s",
             "%peak", "train ms", "train GF/s", "%peak");
  for (const auto& [layer, t] : layers) {
    const double fwd = gflops(layer.forward_flops, t.eval_s), train = gflops(layer.train_flops(), t.train_s);
    fmt::print("{:<14} {:>10.2f} {:>10.1f} {:>10.1f} {:>7.0f} {:>10.1f} {:>10.1f} {:>7.0f}\n", layer.name,
               layer.forward_flops / 1e9, t.eval_s * 1e3, fwd, 100 * fwd / peak.gflops, t.train_s * 1e3, train,
               100 * train / peak.gflops);
  }
}

void write_json(const std::string& path, Session& session, uint32_t batch, double forward, const Peak& peak,
                const Timing& model, const std::vector<LayerResult>& layers) {
  std::ofstream out(path);
  auto num = [](double v) { return sdk::json_number(v); };
  out << fmt::format("{{\"workload\": \"{}\", \"backend\": \"{}\", \"batch\": {}, \"forward_flops\": {},\n",
                     session.info().benchmark, session.backend_name(), batch, num(forward));
  out << fmt::format(" \"peak_precision\": \"{}\", \"peak_gflops\": {}, \"model\": {{\"train_s\": {}, \"eval_s\": "
                     "{}}},\n \"layers\": [",
                     peak.precision, num(peak.gflops), num(model.train_s), num(model.eval_s));
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& [layer, t] = layers[i];
    out << fmt::format("{}\n  {{\"name\": \"{}\", \"forward_flops\": {}, \"train_flops\": {}, \"eval_s\": {}, "
                       "\"train_s\": {}}}",
                       i ? "," : "", layer.name, num(layer.forward_flops), num(layer.train_flops()), num(t.eval_s),
                       num(t.train_s));
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
  std::string json_path;
  int steps = 3, warmup = 1;
  po::options_description cli("mlperf-bench: time training and evaluation steps of a backend\n\noptions");
  cli.add_options()("help,h", "show this help")("workload,w", po::value(&options.workload)->default_value("cosmoflow"),
                                               "workload plug-in")(
      "backend,b", po::value(&options.backend), "backend plug-in (default: reference)")(
      "comms", po::value(&options.comms), "comms plug-in (default: local; mpi under mpirun)")(
      "config,c", po::value(&options.config_file), "YAML config")(
      "set,s", po::value(&options.sets)->composing(), "key=value (repeatable), e.g. train.batch_size=1")(
      "steps", po::value(&steps), "timed steps (default 3)")("warmup", po::value(&warmup), "untimed steps (default 1)")(
      "layers", "also time each layer compiled on its own")("json", po::value(&json_path), "write the figures to FILE")(
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
    }
    const Timing model = time_graph(session, *graph, steps, warmup);
    const double memory = bench::peak_rss_bytes();  // before the spatial measurements allocate their own
    if (speaker) {
      fmt::print("train step: {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", model.train_s, batch / model.train_s,
                 gflops(3 * forward, model.train_s));
      fmt::print("eval step:  {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", model.eval_s, batch / model.eval_s,
                 gflops(forward, model.eval_s));
    }
    print_spatial(session, *graph, steps, memory);
    std::cout << std::flush;

    std::vector<LayerResult> layers;
    Peak peak;
    if (vm.count("layers") && session.topology().size > 1)
      throw std::runtime_error("--layers times layers on one rank: run it without mpirun");
    if (vm.count("layers")) {
      peak = compute_peak(session);
      for (const bench::Layer& layer : bench::split_layers(*graph)) {
        sdk::GraphBuilder builder;
        layers.push_back({layer, time_graph(session, *bench::layer_graph(*graph, layer, builder), steps, warmup)});
      }
      print_layers(layers, peak);
    }
    if (!json_path.empty()) write_json(json_path, session, batch, forward, peak, model, layers);
  } catch (const std::exception& e) {
    std::cerr << "mlperf-bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
