// comms/nccl loaded as the core loads it, without an MPI launcher (as on the GPU test machines, which
// have no MPI runtime): one rank, MPI never initialized, the host collectives of one rank, the device
// collectives declared for CUDA memory, and without a GPU a bind that fails in one line.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

#include "../../integration/cli.hpp"
#include "../mpi/comms_fixture.hpp"
#include "../mpi/halo_check.hpp"
#include "mlph/sdk/comms/plugin.hpp"
#include "mlph/test/tiny_run.hpp"

using mlph::test::LoadedComm;
namespace fs = std::filesystem;

namespace {

// Not under a launcher even if the tests are (a CI runner inside a Slurm job).
class NoLauncher : public ::testing::Environment {
 public:
  void SetUp() override {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"})
      unsetenv(name);
  }
};
const auto* const registered = ::testing::AddGlobalTestEnvironment(new NoLauncher);

// Why this process has no CUDA device ("" when it has one).
std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
  return count == 0 ? "no CUDA device" : "";
}

const MLPH_DeviceCollectives* device_calls(const LoadedComm& c) {
  return mlph::sdk::find_device_collectives(c.api(), MLPH_DEVICE_CUDA);
}

}  // namespace

TEST(NcclPlugin, WithoutALauncherItIsOneRankAndLeavesMpiAlone) {
  LoadedComm comm("nccl");
  const MLPH_Topology& t = comm.topology();
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.size, 1);
  EXPECT_EQ(t.local_rank, 0);
  EXPECT_EQ(t.local_size, 1);
  EXPECT_EQ(t.nodes, 1);
  int initialized = 1;
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized, 0) << "MPI_Init would need an MPI runtime, which the GPU machines lack";
}

TEST(NcclPlugin, HostCollectivesOfOneRank) {
  LoadedComm comm("nccl");
  double values[3] = {1.5, -2.0, 7.0};
  ASSERT_EQ(LoadedComm::outcome(comm.api()->allreduce(comm.comm(), values, 3, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE)).first,
            MLPH_OK);
  EXPECT_EQ(values[0], 1.5);
  EXPECT_EQ(values[2], 7.0);
  const int32_t mine[2] = {4, 5};
  int32_t all[2] = {0, 0};
  ASSERT_EQ(LoadedComm::outcome(comm.api()->allgather(comm.comm(), mine, all, sizeof mine)).first, MLPH_OK);
  EXPECT_EQ(all[1], 5);
  EXPECT_EQ(LoadedComm::outcome(comm.api()->broadcast(comm.comm(), values, 8, 1)),
            (std::pair<MLPH_Code, std::string>{MLPH_INVALID_ARGUMENT,
                                               "comms/nccl: broadcast root must be 0 with one rank"}));
  mlph::test::HaloCase k;  // a periodic dim wraps onto the one rank
  k.halo[0] = 2;
  k.periodic[0] = true;
  mlph::test::check_halo_exchange(comm, k);
  mlph::test::check_halo_adjoint(comm, k);
}

TEST(NcclPlugin, DeclaresDeviceCollectivesOnCudaMemory) {
  LoadedComm comm("nccl");
  const MLPH_DeviceCollectives* calls = device_calls(comm);
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(calls->base.version, 1u);
  EXPECT_EQ(calls->base.struct_size, sizeof(MLPH_DeviceCollectives));
  EXPECT_EQ(calls->device_type, MLPH_DEVICE_CUDA);
  EXPECT_EQ(mlph::sdk::find_device_collectives(comm.api(), MLPH_DEVICE_HOST), nullptr);
  LoadedComm local("local");  // a host-only plug-in declares none
  EXPECT_EQ(device_calls(local), nullptr);
}

TEST(NcclPlugin, DeviceCallsBeforeBindFailAndStatusIsFine) {
  LoadedComm comm("nccl");
  const MLPH_DeviceCollectives* calls = device_calls(comm);
  ASSERT_NE(calls, nullptr);
  EXPECT_EQ(LoadedComm::outcome(calls->status(comm.comm())).first, MLPH_OK);
  float* nowhere = nullptr;
  EXPECT_EQ(LoadedComm::outcome(calls->allreduce(comm.comm(), nowhere, 4, MLPH_DTYPE_F32, MLPH_REDUCE_SUM, nullptr)),
            (std::pair<MLPH_Code, std::string>{MLPH_FAILED_PRECONDITION,
                                               "comms/nccl: rank 0 of 1: device allreduce before bind"}));
  EXPECT_EQ(LoadedComm::outcome(calls->bind(comm.comm(), {MLPH_DEVICE_HOST, 0})),
            (std::pair<MLPH_Code, std::string>{
                MLPH_INVALID_ARGUMENT, "bind: a host device, but these device collectives take cuda devices"}));
}

TEST(NcclPlugin, BindWithoutAGpuFailsInOneLineAndTheHostSideGoesOn) {
  const std::string why = no_device();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present: NcclDevice covers bind";
  LoadedComm comm("nccl");
  const MLPH_DeviceCollectives* calls = device_calls(comm);
  ASSERT_NE(calls, nullptr);
  const std::string line = "comms/nccl: rank 0 of 1: cannot bind to CUDA device 0: " + why;
  EXPECT_EQ(LoadedComm::outcome(calls->bind(comm.comm(), {MLPH_DEVICE_CUDA, 0})),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, line}));
  // Not bound: device calls say so and why; the host side is untouched.
  const auto [code, message] =
      LoadedComm::outcome(calls->broadcast(comm.comm(), nullptr, 4, 0, nullptr));
  EXPECT_EQ(code, MLPH_FAILED_PRECONDITION);
  EXPECT_EQ(message, "comms/nccl: rank 0 of 1: device broadcast before bind (bind failed: " + line + ")");
  EXPECT_EQ(LoadedComm::outcome(calls->status(comm.comm())).first, MLPH_OK);
  EXPECT_EQ(LoadedComm::outcome(comm.api()->barrier(comm.comm())).first, MLPH_OK);
  // A split communicator takes the device calls too, and binds on its own.
  MLPH_Comm* part = nullptr;
  ASSERT_EQ(LoadedComm::outcome(comm.api()->split(comm.comm(), 0, 0, &part)).first, MLPH_OK);
  EXPECT_EQ(LoadedComm::outcome(calls->bind(part, {MLPH_DEVICE_CUDA, 0})),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, line}));
  comm.api()->destroy(part);
}

TEST(NcclPlugin, RefusesUnknownOptionsAndATimeoutThatIsNotPositive) {
  for (const auto& [option, expected] :
       std::vector<std::pair<MLPH_KeyValue, std::string>>{{{"timeout_s", "0"}, "comms/nccl: option 'timeout_s' must be positive"},
                                                          {{"timout_s", "5"}, "comms/nccl: unknown option 'timout_s'"}}) {
    try {
      LoadedComm comm("nccl", {option});
      ADD_FAILURE() << option.key << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

// The core runs a whole (tiny) training on one rank with it: mlperf-run --comms nccl, no launcher.
TEST(NcclPlugin, MlperfRunTrainsOnOneRankWithIt) {
  const fs::path dir = mlph::test::fresh_dir("nccl-one-rank");
  const std::string tiny = mlph::test::tiny_cosmoflow(2) + "--set optimizer.warmup_epochs=0 --seed 1234 ";
  ASSERT_EQ(mlph::test::run_cli(tiny + mlph::test::generate_data(4, 2, dir / "data")).exit_code, 0);
  const mlph::test::CliResult r =
      mlph::test::run_cli(tiny + "--comms nccl --set comms.timeout_s=60 --set train.epochs=1 --set train.target_mae=10 "
                                 "--data " + (dir / "data").string() + " --output " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto values = mlph::test::mllog_values(dir / "out" / "result_0.txt");
  EXPECT_EQ(values["number_of_ranks"], "1");
  EXPECT_NE(mlph::test::read_lines(dir / "out" / "result_0.txt").back().find("\"status\": \"success\""),
            std::string::npos);
}
