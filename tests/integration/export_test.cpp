// --export-weights and mlph-export, checked from outside: weights trained one epoch by mlperf-run are
// loaded (strictly, in the reference's names and layouts) into an independent PyTorch model of the
// reference architecture (tools/bench/pytorch_<workload>.py, by tests/integration/export_check.py),
// whose forward on a validation sample must give our model's output on it. Our output comes from the
// same checkpoint restored into a model compiled on the reference backend, with the graph's eval
// output pointed at the network's output. Needs /usr/bin/python3 with torch (Debian: python3-torch).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "cli.hpp"
#include "mlph/core/checkpoint.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/npz.hpp"
#include "mlph/sdk/graph/tensor.hpp"

using namespace mlph;
using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string workload;
  std::vector<std::string> sets;  // the run's configuration
  std::string output_value;       // the network's output in our graph
  size_t arrays;                  // in the reference's state_dict
};

Case cosmoflow() {
  return {"cosmoflow",
          {"data.edge=32", "train.batch_size=2", "train.epochs=1", "optimizer.warmup_epochs=0", "backend.threads=2",
           "data.synthetic.train=4", "data.synthetic.valid=2"},
          "output.scale", 16};
}
Case deepcam() {
  return {"deepcam",
          {"data.height=32", "data.width=48", "train.batch_size=1", "train.epochs=1", "backend.threads=2",
           "data.synthetic.train=2", "data.synthetic.valid=1"},
          // 301 trainable tensors and 76 batch norms' running statistics and num_batches_tracked (REFERENCE.md §2.10)
          "decoder.last_deconv", 529};
}

std::string flags(const Case& c) {
  std::string s = "--workload " + c.workload + " --division open --seed 7";
  for (const std::string& set : c.sets) s += " --set " + set;
  return s;
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Our model's output on validation sample 0 with the checkpoint's weights, written with the input
// (and DeepCAM's normalization) to `case_file` for export_check.py.
void write_our_forward(const Case& c, const fs::path& data, const fs::path& checkpoint, const fs::path& case_file) {
  core::RunOptions options;
  options.workload = c.workload;
  options.division = "open";
  options.seed = 7;
  options.data_dir = data.string();
  options.sets = c.sets;
  options.sets.push_back("train.batch_size=1");
  core::Session session(options);
  const MLPH_WorkloadApi* workload = session.workload_api();
  const MLPH_Graph* built = nullptr;
  core::check(workload->build_graph(session.workload(), 1, session.seed(), &built), "build");
  MLPH_Graph graph = *built;  // the same graph, its eval output the network's output
  int32_t output = -1;
  for (size_t v = 0; v < graph.n_values; ++v)
    if (c.output_value == graph.values[v].name) output = static_cast<int32_t>(v);
  ASSERT_GE(output, 0) << c.output_value;
  graph.eval_outputs = &output;
  graph.n_eval_outputs = 1;
  const auto model = session.compile(graph);
  core::restore_checkpoint(core::CheckpointReader(checkpoint), session, model.get(), graph);

  std::vector<std::vector<std::byte>> buffers;
  std::vector<MLPH_Tensor> inputs;
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    buffers.emplace_back(static_cast<size_t>(sdk::numel(v)) * mlph_dtype_size(v.dtype));
  }
  for (size_t i = 0; i < graph.n_inputs; ++i) {
    const MLPH_Value& v = graph.values[graph.inputs[i]];
    inputs.push_back(sdk::host_tensor(v.dtype, v.shape, v.ndim, buffers[i].data()));
  }
  MLPH_Dataset* raw = nullptr;
  core::check(workload->dataset_open(session.workload(), MLPH_SPLIT_VALIDATION, session.storage_handle(), &raw), "open");
  const core::Owned<MLPH_Dataset> dataset(raw, workload->dataset_close);
  const uint64_t first = 0;
  core::check(workload->dataset_read(dataset.get(), &first, 1, inputs.data(), inputs.size()), "read");

  const MLPH_Value& out = graph.values[output];
  std::vector<float> ours(static_cast<size_t>(sdk::numel(out)));
  MLPH_Tensor out_tensor = sdk::host_tensor(MLPH_DTYPE_F32, out.shape, out.ndim, ours.data());
  core::check(session.backend_api()->eval_step(model.get(), inputs.data(), inputs.size(), &out_tensor, 1), "eval");

  core::NpzWriter npz(case_file);
  const MLPH_Value& x = graph.values[graph.inputs[0]];
  npz.add("x", x.dtype, {x.shape, x.shape + x.ndim}, buffers[0].data());
  npz.add("ours", MLPH_DTYPE_F32, {out.shape, out.shape + out.ndim}, ours.data());
  for (size_t i = 0; i < graph.n_params; ++i) {  // DeepCAM's normalization: the reference's data loader's
    const MLPH_Value& v = graph.values[graph.params[i].value];
    const std::string name = v.name;
    if (name != "normalize.shift" && name != "normalize.scale") continue;
    std::vector<float> values(static_cast<size_t>(sdk::numel(v)));
    MLPH_Tensor view = sdk::host_tensor(MLPH_DTYPE_F32, v.shape, v.ndim, values.data());
    core::check(session.backend_api()->read_parameter(model.get(), i, &view), name);
    npz.add(name.substr(name.find('.') + 1), MLPH_DTYPE_F32, {v.shape, v.shape + v.ndim}, values.data());
  }
  npz.finish();
}

void check_export(const Case& c) {
  const fs::path dir = fresh_dir("export-" + c.workload);
  ASSERT_EQ(run_cli(flags(c) + " --generate-data " + (dir / "data").string()).exit_code, 0);
  const CliResult run = run_cli(flags(c) + " --data " + (dir / "data").string() + " --output " + (dir / "out").string() +
                                " --checkpoint-dir " + (dir / "ck").string() + " --export-weights " +
                                (dir / "run.npz").string());
  ASSERT_EQ(run.exit_code, 1) << run.output;  // one epoch: the target is not reached
  ASSERT_NE(run.output.find("exported " + std::to_string(c.arrays) + " arrays"), std::string::npos) << run.output;

  // mlph-export converts the final checkpoint to the same bytes.
  const CliResult converted = run_command(std::string(MLPH_BINARY_DIR "/bin/mlph-export ") + (dir / "ck").string() +
                                          " " + (dir / "checkpoint.npz").string());
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  EXPECT_EQ(slurp(dir / "run.npz"), slurp(dir / "checkpoint.npz"));

  write_our_forward(c, dir / "data", dir / "ck", dir / "case.npz");
  if (testing::Test::HasFatalFailure()) return;
  const CliResult check = run_command("/usr/bin/python3 " MLPH_SOURCE_DIR "/tests/integration/export_check.py " +
                                      c.workload + " " + (dir / "run.npz").string() + " " + (dir / "case.npz").string());
  if (check.exit_code == 3) GTEST_SKIP() << check.output;
  EXPECT_EQ(check.exit_code, 0) << check.output;
  std::printf("%s", check.output.c_str());
  if (!testing::Test::HasFailure()) fs::remove_all(dir);  // DeepCAM's checkpoint is 650 MB
}

}  // namespace

TEST(Export, CosmoFlowLoadsIntoThePyTorchPortAndAgrees) { check_export(cosmoflow()); }

TEST(Export, DeepCamLoadsIntoTheReferenceModelAndAgrees) { check_export(deepcam()); }

TEST(Export, AWorkloadThatCannotSayRefusesBeforeTheRun) {
  const fs::path dir = fresh_dir("export-linreg");
  const CliResult r = run_cli("--workload linreg --plugin-dir " MLPH_TEST_PLUGIN_DIR " --output " + dir.string() +
                              " --export-weights " + (dir / "w.npz").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--export-weights: workload linreg does not say how the reference names"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "result_0.txt"));
}
