// mlperf-bench: times a backend's training and evaluation steps on a workload's model with
// synthetic in-memory input (no I/O), and prints samples/s and achieved GFLOP/s.
//   mlperf-bench --workload cosmoflow --backend reference --steps 3 [--set train.batch_size=1]
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "mlph/core/host.hpp"
#include "mlph/core/session.hpp"
#include "mlph/sdk/graph.hpp"
#include "mlph/sdk/tensor.hpp"

namespace po = boost::program_options;
using namespace mlph;
using namespace mlph::core;

namespace {

// Multiply-adds x2 of the convolutions and dense layers: the forward pass's useful work.
double forward_flops(const MLPH_Graph& g) {
  double flops = 0;
  for (size_t i = 0; i < g.n_nodes; ++i) {
    const MLPH_Node& n = g.nodes[i];
    const std::string op = n.op;
    if (op != "conv" && op != "dense") continue;
    const MLPH_Value& out = g.values[n.outputs[0]];
    const MLPH_Value& w = g.values[n.inputs[1]];
    // conv weights [K..., Ci/g, Co]: every output element takes prod(K) * Ci/g multiply-adds.
    const double per_output = static_cast<double>(sdk::numel(w)) / static_cast<double>(w.shape[w.ndim - 1]);
    flops += 2.0 * per_output * static_cast<double>(sdk::numel(out));
  }
  return flops;
}

// Deterministic filler: small int16 counts (like the data after Poisson sampling), labels in [-1, 1].
void fill(MLPH_Tensor& t, std::vector<std::byte>& storage, uint64_t salt) {
  const auto n = static_cast<size_t>(sdk::numel(t));
  for (size_t i = 0; i < n; ++i) {
    const float u = mlph_uniform(salt, 0, 0, i);
    if (t.dtype == MLPH_DTYPE_I16) reinterpret_cast<int16_t*>(storage.data())[i] = static_cast<int16_t>(u * 40);
    else reinterpret_cast<float*>(storage.data())[i] = 2 * u - 1;
  }
}

template <class F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions options;
  std::vector<std::string> plugin_dirs;
  int steps = 3, warmup = 1;
  po::options_description cli("mlperf-bench: time training and evaluation steps of a backend\n\noptions");
  cli.add_options()("help,h", "show this help")("workload,w", po::value(&options.workload)->default_value("cosmoflow"),
                                               "workload plug-in")(
      "backend,b", po::value(&options.backend), "backend plug-in (default: reference)")(
      "config,c", po::value(&options.config_file), "YAML config")(
      "set,s", po::value(&options.sets)->composing(), "key=value (repeatable), e.g. train.batch_size=1")(
      "steps", po::value(&steps), "timed steps (default 3)")("warmup", po::value(&warmup), "untimed steps (default 1)")(
      "plugin-dir", po::value(&plugin_dirs)->composing(), "plug-in directory (repeatable)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, cli), vm);
    po::notify(vm);
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
    Owned<MLPH_Model> model = session.compile(*graph);

    std::vector<std::vector<std::byte>> buffers;
    std::vector<MLPH_Tensor> inputs;
    for (size_t i = 0; i < graph->n_inputs; ++i) {
      const MLPH_Value& v = graph->values[graph->inputs[i]];
      buffers.emplace_back(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
      inputs.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, buffers.back().data()));
      fill(inputs.back(), buffers.back(), i + 1);
    }
    std::vector<std::vector<float>> outputs;
    std::vector<MLPH_Tensor> output_tensors;
    for (size_t i = 0; i < graph->n_eval_outputs; ++i) {
      const MLPH_Value& v = graph->values[graph->eval_outputs[i]];
      outputs.emplace_back(static_cast<size_t>(sdk::numel(v)));
      output_tensors.push_back(sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, outputs.back().data()));
    }
    const auto* api = session.backend_api();
    uint64_t step = 0;
    auto train = [&] {
      MLPH_StepArgs args{sizeof(MLPH_StepArgs), nullptr, 1e-4, step++};
      MLPH_StepResult result{sizeof(MLPH_StepResult), nullptr, 0};
      check(api->train_step(model.get(), inputs.data(), inputs.size(), &args, &result), "train_step");
    };
    auto eval = [&] {
      check(api->eval_step(model.get(), inputs.data(), inputs.size(), output_tensors.data(), output_tensors.size()),
            "eval_step");
    };
    for (int i = 0; i < warmup; ++i) train(), eval();
    double train_s = 0, eval_s = 0;
    for (int i = 0; i < steps; ++i) train_s += seconds(train), eval_s += seconds(eval);
    train_s /= steps;
    eval_s /= steps;
    const double fwd = forward_flops(*graph) / batch;
    fmt::print("workload {}  backend {}  batch {}  input {}\n", session.info().benchmark, session.backend_name(), batch,
               sdk::shape_string(graph->values[graph->inputs[0]].shape, graph->values[graph->inputs[0]].ndim));
    fmt::print("forward work: {:.2f} GFLOP/sample (training step ~3x: {:.2f})\n", fwd / 1e9, 3 * fwd / 1e9);
    fmt::print("train step: {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", train_s, batch / train_s,
               3 * fwd * batch / train_s / 1e9);
    fmt::print("eval step:  {:.3f} s  {:.3f} samples/s  {:.1f} GFLOP/s\n", eval_s, batch / eval_s,
               fwd * batch / eval_s / 1e9);
  } catch (const std::exception& e) {
    std::cerr << "mlperf-bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
