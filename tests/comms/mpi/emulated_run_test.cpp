// ABI 1.6's device paths end to end without a GPU: mlperf-run on 2 ranks with the emulated device
// (tests/plugins/emulated_device: `--backend emulated --comms emulated`) trains the CosmoFlow and DeepCAM
// minis to exactly the reference backend's weights and validation result. On the way it proves what a
// device backend relies on: the runner never touches device memory (it faults), hands the backend its
// own pinned input buffers (require_pinned_inputs) and leaves each batch alone while the step reading
// it is queued (checksummed at enqueue and at the device's copy), reads the loss late, and the
// gradients are averaged by stream-ordered device collectives (the backend refuses comms without them).
#include <gtest/gtest.h>

#include "../../integration/cli.hpp"
#include "mlph/test/tiny_run.hpp"
#include "mpirun.hpp"

using namespace mlph::test;
namespace fs = std::filesystem;

namespace {

std::string mpirun() { return mpirun_2_ranks() + MLPH_BINARY_DIR "/bin/mlperf-run "; }

const std::string kEmulatedBackend =
    "--plugin-dir " MLPH_TEST_PLUGIN_DIR " --backend emulated --set backend.require_pinned_inputs=true ";
const std::string kEmulated = kEmulatedBackend + "--comms emulated ";
const std::string kReference = "--backend reference --comms mpi ";

// Trains `run` on 2 ranks with the reference backend and with the emulated device; expects both to
// succeed with the same exported weights, bit for bit, and the same validation `metric`.
void expect_same_training(const std::string& run, const fs::path& dir, const std::string& metric) {
  for (const std::string backend : {"reference", "emulated"}) {
    // A slow device (20 ms before each batch of the stream's work): the host runs a step ahead of it,
    // so that a batch the pipeline rewrote too early is caught at the device's copy.
    const std::string slow = backend == "emulated" ? "MLPH_EMULATED_DEVICE_DELAY_US=20000 " : "";
    const CliResult r = run_command(slow + mpirun() + run + (backend == "emulated" ? kEmulated : kReference) +
                                    "--set backend.threads=1 --output " + (dir / backend).string() +
                                    " --export-weights " + (dir / (backend + ".npz")).string());
    ASSERT_EQ(r.exit_code, 0) << backend << ": " << r.output;
  }
  const CliResult same = run_command(
      "/usr/bin/python3 -c 'import numpy, sys; a, b = numpy.load(sys.argv[1]), numpy.load(sys.argv[2]); "
      "assert sorted(a) == sorted(b), (sorted(a), sorted(b)); "
      "different = [k for k in a if not numpy.array_equal(a[k], b[k])]; "
      "print(len(a), \"arrays,\", len(different), \"different:\", different[:3]); sys.exit(bool(different))' " +
      (dir / "reference.npz").string() + " " + (dir / "emulated.npz").string());
  EXPECT_EQ(same.exit_code, 0) << same.output;
  std::map<std::string, std::string> reference = mllog_values(dir / "reference" / "result_0.txt"),
                                     emulated = mllog_values(dir / "emulated" / "result_0.txt");
  EXPECT_EQ(emulated[metric], reference[metric]);
  EXPECT_EQ(emulated["number_of_ranks"], "2");
  EXPECT_EQ(emulated["accelerators_per_node"], "2") << "one emulated device per rank of the node";
  EXPECT_NE(emulated["mlph_backend_device"].find("\"type\": \"emulated\""), std::string::npos)
      << emulated["mlph_backend_device"];
  EXPECT_NE(read_lines(dir / "emulated" / "result_0.txt").back().find("\"status\": \"success\""), std::string::npos);
}

}  // namespace

TEST(EmulatedDeviceRun, CosmoFlowMiniOnTwoRanksTrainsLikeTheReferenceBackend) {
  const fs::path dir = fresh_dir("emulated-cosmoflow");
  // 20 steps an epoch on each rank: the runner reads the loss every 2nd step only, so the host runs
  // ahead of the device and the pipeline refills batches while earlier steps are queued.
  const std::string mini = tiny_cosmoflow(1) + "--set optimizer.warmup_epochs=0 --seed 1234 ";
  ASSERT_EQ(run_cli(mini + generate_data(40, 4, dir / "data")).exit_code, 0);
  const std::string run = mini + "--set train.epochs=1 --set train.target_mae=10 --data " + (dir / "data").string() + " ";
  expect_same_training(run, dir, "eval_error");
  // A device backend's gradients are averaged on its stream: comms without device collectives for its
  // memory are refused in one line before training starts.
  const CliResult r = run_command(mpirun() + run + kEmulatedBackend + "--comms mpi --output " + (dir / "mpi").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("emulated backend: the comms plug-in has no device collectives for emulated devices "
                          "(MLPH_EXT_DEVICE_COLLECTIVES): run it with --comms emulated"),
            std::string::npos)
      << r.output;
}

TEST(EmulatedDeviceRun, DeepCamMiniOnTwoRanksTrainsLikeTheReferenceBackend) {
  if (!fs::exists(fs::path(MLPH_PLUGIN_DIR) / "libmlph-workload-deepcam.so")) GTEST_SKIP() << "deepcam not built (HDF5)";
  const fs::path dir = fresh_dir("emulated-deepcam");
  const std::string mini = "--workload deepcam --set data.height=32 --set data.width=32 ";
  ASSERT_EQ(run_cli(mini + generate_data(8, 3, dir / "data")).exit_code, 0);
  expect_same_training(mini + "--division open --set train.target_iou=0.01 --set train.epochs=1 "
                              "--set train.batch_size=1 --set train.gradient_accumulation_frequency=2 "
                              "--set scheduler.lr_warmup_steps=1 --seed 5 --data " + (dir / "data").string() + " ",
                       dir, "eval_accuracy");
}

