// comms/nccl on 2 ranks (mpirun -np 2) without a GPU: bind fails on every rank with its own one line,
// within a bound, and no rank is left waiting; the host side goes on. Each rank binds the device of
// its rank, as a backend picks its local rank's.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>

#include "../mpi/comms_fixture.hpp"
#include "mlph/sdk/comms/plugin.hpp"

using mlph::test::LoadedComm;

namespace {

LoadedComm* g_comm = nullptr;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_comm = new LoadedComm("nccl", {{"timeout_s", "20"}}); }
  void TearDown() override { delete g_comm; }
};

const auto* const registered = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return std::string(cudaGetErrorString(error)) + " (" + cudaGetErrorName(error) + ")";
  return count == 0 ? "no CUDA device" : "";
}

void expect_bind_fails_alone(MLPH_Comm* comm, const std::string& where) {
  const MLPH_DeviceCollectives* calls = mlph::sdk::find_device_collectives(g_comm->api(), MLPH_DEVICE_CUDA);
  ASSERT_NE(calls, nullptr);
  const int32_t device = g_comm->rank();
  const auto start = std::chrono::steady_clock::now();
  const auto outcome = LoadedComm::outcome(calls->bind(comm, {MLPH_DEVICE_CUDA, device}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(outcome, (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, where + ": cannot bind to CUDA device " +
                                                                               std::to_string(device) + ": " +
                                                                               no_device()}));
  EXPECT_EQ(LoadedComm::outcome(calls->status(comm)).first, MLPH_OK);
}

}  // namespace

TEST(NcclBind, WithoutAGpuEveryRankFailsWithItsOwnLineAndNoRankWaits) {
  ASSERT_EQ(g_comm->size(), 2) << "run under mpirun -np 2";
  if (no_device().empty()) GTEST_SKIP() << "a CUDA device is present";
  expect_bind_fails_alone(g_comm->comm(), "comms/nccl: rank " + std::to_string(g_comm->rank()) + " of 2");
  // The host side goes on: a collective right after.
  int32_t one = 1;
  ASSERT_EQ(LoadedComm::outcome(g_comm->api()->allreduce(g_comm->comm(), &one, 1, MLPH_DTYPE_I32, MLPH_REDUCE_SUM)).first,
            MLPH_OK);
  EXPECT_EQ(one, 2);
}

// Split communicators (e.g. a spatially split sample's ranks) bind on their own, and fail alike.
TEST(NcclBind, SplitCommunicatorsFailAlike) {
  if (no_device().empty()) GTEST_SKIP() << "a CUDA device is present";
  for (const bool together : {true, false}) {
    MLPH_Comm* part = nullptr;
    ASSERT_EQ(LoadedComm::outcome(g_comm->api()->split(g_comm->comm(), together ? 0 : g_comm->rank(), 0, &part)).first,
              MLPH_OK);
    const std::string rank = std::to_string(g_comm->rank());
    expect_bind_fails_alone(part, "comms/nccl: rank " + rank + " (" + (together ? rank + " of 2" : "0 of 1") +
                                      " in a split communicator)");
    g_comm->api()->destroy(part);
  }
}
