// libmlph-backend-cuda.so as the core loads it: its table (ABI 1.6, every optional member the backend
// has), its options refused before any device is touched, and without a GPU one line naming why, from
// create_with and from a whole `mlperf-run --backend cuda` (exit 1, the log's run_stop aborted).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <utility>

#include "../../../integration/cli.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/test/create_args.hpp"
#include "mlph/test/tiny_run.hpp"

namespace fs = std::filesystem;

namespace {

// Why this process has no CUDA device, as the backend says it ("" when it has one).
std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess)
    return "cudaGetDeviceCount: " + std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
  return count == 0 ? "cudaGetDeviceCount found none" : "";
}

mlph::core::LoadedPlugin load_cuda() {
  return mlph::core::PluginLoader::load_file(std::string(MLPH_PLUGIN_DIR) + "/libmlph-backend-cuda.so",
                                             MLPH_KIND_BACKEND, "cuda");
}

// create_with's error (code, message), or MLPH_OK and "" with the backend destroyed again.
std::pair<MLPH_Code, std::string> create(const MLPH_BackendApi* api, std::vector<MLPH_KeyValue> options) {
  const MLPH_BackendCreateArgs args = mlph::test::single_rank_create_args(mlph::core::host_api(), options);
  MLPH_Backend* backend = nullptr;
  MLPH_Error* error = api->create_with(&args, &backend);
  if (!error) {
    api->destroy(backend);
    return {MLPH_OK, ""};
  }
  std::pair<MLPH_Code, std::string> result{mlph::core::error_code(error), mlph::core::error_message(error)};
  mlph::core::error_free(error);
  return result;
}

}  // namespace

TEST(CudaPlugin, LoadsWithEveryMemberOfAnAbi16DeviceBackend) {
  const mlph::core::LoadedPlugin plugin = load_cuda();
  EXPECT_EQ(plugin.descriptor->abi_major, MLPH_ABI_MAJOR);
  EXPECT_EQ(plugin.descriptor->abi_minor, 6u);
  const auto* api = plugin.api<MLPH_BackendApi>();
  ASSERT_GE(api->struct_size, MLPH_STRUCT_SIZE(MLPH_BackendApi, read_loss));
  EXPECT_NE(api->create_with, nullptr);
  EXPECT_NE(api->attributes, nullptr);
  EXPECT_NE(api->alloc_input, nullptr) << "pinned input batches";
  EXPECT_NE(api->free_input, nullptr);
  EXPECT_NE(api->read_loss, nullptr);
  EXPECT_NE(api->read_state, nullptr);
  EXPECT_NE(api->write_state, nullptr);
}

TEST(CudaPlugin, OptionsAreCheckedBeforeTheDeviceInOneLine) {
  const mlph::core::LoadedPlugin plugin = load_cuda();
  const auto* api = plugin.api<MLPH_BackendApi>();
  EXPECT_EQ(create(api, {{"threads", "2"}}),
            (std::pair<MLPH_Code, std::string>{MLPH_INVALID_ARGUMENT, "cuda backend: unknown option 'threads'"}));
  EXPECT_EQ(create(api, {{"precision", "int8"}}),
            (std::pair<MLPH_Code, std::string>{
                MLPH_INVALID_ARGUMENT, "cuda backend: option 'precision' is 'int8'; this backend computes in fp32, tf32, bf16, fp16"}));
}

TEST(CudaPlugin, WithoutAGpuCreateFailsInOneLineNamingWhy) {
  const std::string why = no_device();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is here: the device tests cover create";
  const mlph::core::LoadedPlugin plugin = load_cuda();
  EXPECT_EQ(create(plugin.api<MLPH_BackendApi>(), {{"precision", "bf16"}}),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, "cuda backend: no CUDA device: " + why}));
}

TEST(CudaPlugin, ListPluginsShowsIt) {
  const mlph::test::CliResult r = mlph::test::run_cli("--list-plugins");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("libmlph-backend-cuda.so"), std::string::npos) << r.output;
}

// The backend is made inside the run (after init_start): without a GPU the run ends as any failed
// run does: exit 1, one error line, the log's run_stop aborted with the same words. Never a crash.
TEST(CudaPlugin, MlperfRunWithoutAGpuEndsAbortedWithOneLine) {
  const std::string why = no_device();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is here: tools/gpu's check runs the backend";
  const fs::path dir = mlph::test::fresh_dir("cuda-no-gpu");
  const std::string tiny = mlph::test::tiny_cosmoflow(2) + "--seed 7 ";
  ASSERT_EQ(mlph::test::run_cli(tiny + mlph::test::generate_data(2, 2, dir / "data")).exit_code, 0);
  const mlph::test::CliResult r = mlph::test::run_cli(tiny + "--backend cuda --data " + (dir / "data").string() +
                                                      " --output " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string line = "mlperf-run: error: backend cuda: cuda backend: no CUDA device: " + why;
  EXPECT_NE(r.output.find(line + "\n"), std::string::npos) << r.output;
  size_t errors = 0;
  for (size_t at = r.output.find("error"); at != std::string::npos; at = r.output.find("error", at + 1)) ++errors;
  EXPECT_EQ(errors, 1u) << "one error line: " << r.output;
  EXPECT_EQ(r.output.find("Aborted"), std::string::npos) << r.output;
  const std::string last = mlph::test::read_lines(dir / "out" / "result_0.txt").back();
  EXPECT_NE(last.find("\"key\": \"run_stop\""), std::string::npos) << last;
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  EXPECT_NE(last.find("no CUDA device: " + why), std::string::npos) << last;
}
