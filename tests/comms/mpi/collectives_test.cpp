// A comms plug-in on 2 ranks (run under mpirun -np 2): every collective with values whose result is
// known. comms/mpi by default; MLPH_TEST_COMMS names another built on the MPI transport (nccl: its host
// collectives).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comms_fixture.hpp"
#include "halo_check.hpp"
#include "mlph/sdk/host/gradient_buckets.hpp"

using mlph::test::HaloCase;
using mlph::test::LoadedComm;

namespace {

// One communicator for the whole program: MPI initializes once per process.
LoadedComm* g_comm = nullptr;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    static MLPH_KeyValue timeout{"timeout_s", "20"};
    const char* plugin = std::getenv("MLPH_TEST_COMMS");
    g_comm = new LoadedComm(plugin ? plugin : "mpi", {timeout});
  }
  void TearDown() override { delete g_comm; }
};

const auto* const registered = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

const LoadedComm& comm() { return *g_comm; }

template <class T>
std::vector<T> allreduce(std::vector<T> data, MLPH_DType dtype, MLPH_ReduceOp op) {
  const auto [code, message] =
      LoadedComm::outcome(comm().api()->allreduce(comm().comm(), data.data(), data.size(), dtype, op));
  EXPECT_EQ(code, MLPH_OK) << message;
  return data;
}

}  // namespace

TEST(MpiComms, TopologyOfTwoRanksOnOneNode) {
  const MLPH_Topology& t = comm().topology();
  ASSERT_EQ(t.size, 2) << "run under mpirun -np 2";
  EXPECT_TRUE(t.rank == 0 || t.rank == 1);
  EXPECT_EQ(t.local_size, 2);
  EXPECT_EQ(t.local_rank, t.rank);
  EXPECT_EQ(t.nodes, 1);
}

TEST(MpiComms, AllreduceF32SumAverageMax) {
  const float r = static_cast<float>(comm().rank());
  const std::vector<float> mine = {r + 1, 10 * (r + 1), -0.5f, r == 0 ? 7.0f : -7.0f};
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F32, MLPH_REDUCE_SUM), (std::vector<float>{3, 30, -1, 0}));
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE), (std::vector<float>{1.5f, 15, -0.5f, 0}));
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F32, MLPH_REDUCE_MAX), (std::vector<float>{2, 20, -0.5f, 7}));
}

TEST(MpiComms, AllreduceLargeF32Average) {
  // Large enough for a multi-round algorithm; every element's average is known exactly.
  std::vector<float> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<float>(i % 1000) + (comm().rank() == 0 ? 0.25f : 0.75f);
  data = allreduce(data, MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE);
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<float>(i % 1000) + 0.5f) << i;
}

TEST(MpiComms, AllreduceF16) {
  // Bit patterns: 1.5 = 3E00, 2.5 = 4100, 4 = 4400, 2 = 4000; -1 = BC00, 3 = 4200, 1 = 3C00;
  // 0.25 = 3400, 0.5 = 3800, 0.75 = 3A00, 0.375 = 3600.
  const bool r0 = comm().rank() == 0;
  const std::vector<uint16_t> mine = {uint16_t(r0 ? 0x3E00 : 0x4100), uint16_t(r0 ? 0xBC00 : 0x4200),
                                      uint16_t(r0 ? 0x3400 : 0x3800)};
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F16, MLPH_REDUCE_SUM), (std::vector<uint16_t>{0x4400, 0x4000, 0x3A00}));
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F16, MLPH_REDUCE_AVERAGE), (std::vector<uint16_t>{0x4000, 0x3C00, 0x3600}));
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_F16, MLPH_REDUCE_MAX), (std::vector<uint16_t>{0x4100, 0x4200, 0x3800}));
}

TEST(MpiComms, AllreduceBf16) {
  // 1.5 = 3FC0, 2.5 = 4020, 4 = 4080, 2 = 4000; -1 = BF80, 3 = 4040, 1 = 3F80; 0.25 = 3E80, 0.5 = 3F00,
  // 0.75 = 3F40, 0.375 = 3EC0.
  const bool r0 = comm().rank() == 0;
  const std::vector<uint16_t> mine = {uint16_t(r0 ? 0x3FC0 : 0x4020), uint16_t(r0 ? 0xBF80 : 0x4040),
                                      uint16_t(r0 ? 0x3E80 : 0x3F00)};
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_BF16, MLPH_REDUCE_SUM), (std::vector<uint16_t>{0x4080, 0x4000, 0x3F40}));
  EXPECT_EQ(allreduce(mine, MLPH_DTYPE_BF16, MLPH_REDUCE_AVERAGE), (std::vector<uint16_t>{0x4000, 0x3F80, 0x3EC0}));
}

TEST(MpiComms, AllreduceIntegersSumButNoAverage) {
  EXPECT_EQ(allreduce(std::vector<int64_t>{comm().rank() + 40LL}, MLPH_DTYPE_I64, MLPH_REDUCE_SUM),
            std::vector<int64_t>{81});
  EXPECT_EQ(allreduce(std::vector<double>{comm().rank() * 3.0}, MLPH_DTYPE_F64, MLPH_REDUCE_AVERAGE),
            std::vector<double>{1.5});
  int32_t x = 1;
  const auto [code, message] =
      LoadedComm::outcome(comm().api()->allreduce(comm().comm(), &x, 1, MLPH_DTYPE_I32, MLPH_REDUCE_AVERAGE));
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(message.find("AVERAGE of i32"), std::string::npos) << message;
}

TEST(MpiComms, BroadcastFromEitherRoot) {
  for (int32_t root : {0, 1}) {
    std::vector<uint8_t> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = comm().rank() == root ? uint8_t(i * 7 + root) : 0;
    const auto [code, message] =
        LoadedComm::outcome(comm().api()->broadcast(comm().comm(), data.data(), data.size(), root));
    ASSERT_EQ(code, MLPH_OK) << message;
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], uint8_t(i * 7 + root)) << i;
  }
  char byte = 0;
  const auto [code, message] = LoadedComm::outcome(comm().api()->broadcast(comm().comm(), &byte, 1, 5));
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(message.find("root 5 is not a rank"), std::string::npos) << message;
}

TEST(MpiComms, AllgatherIsRankMajor) {
  const int32_t r = comm().rank();
  const int32_t mine[3] = {r, 10 * r + 1, 100 * r + 2};
  std::vector<int32_t> all(6, -1);
  const auto [code, message] =
      LoadedComm::outcome(comm().api()->allgather(comm().comm(), mine, all.data(), sizeof mine));
  ASSERT_EQ(code, MLPH_OK) << message;
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 2, 1, 11, 102}));
}

TEST(MpiComms, BarrierWaitsForTheLastRank) {
  if (comm().rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  const auto [code, message] = LoadedComm::outcome(comm().api()->barrier(comm().comm()));
  ASSERT_EQ(code, MLPH_OK) << message;
  if (comm().rank() == 0) {
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  }
}

TEST(MpiComms, HaloExchangeOneDimGrid) {
  for (bool periodic : {false, true}) {
    HaloCase k;
    k.grid[0] = 2;
    k.periodic[0] = periodic;
    mlph::test::check_halo_exchange(comm(), k);
    k.halo[0] = 2;  // wider halos: two slices each side
    mlph::test::check_halo_exchange(comm(), k);
  }
}

TEST(MpiComms, HaloExchangeTwoDimGridFillsEdgesAndCorners) {
  for (bool periodic_rows : {false, true}) {
    HaloCase k;
    k.grid_ndim = 2;
    k.grid[0] = 2;
    k.grid[1] = 1;  // 2 x 1: the columns wrap onto the same rank
    k.interior[0] = 3;
    k.interior[1] = 4;
    k.halo[0] = 1;
    k.halo[1] = 2;
    k.periodic[0] = periodic_rows;
    k.periodic[1] = true;
    mlph::test::check_halo_exchange(comm(), k);
  }
}

// The transpose: faces back to the neighbours they came from and added there, corners included.
TEST(MpiComms, HaloAccumulateIsTheTransposeOfTheExchange) {
  for (bool periodic : {false, true}) {
    HaloCase k;
    k.grid[0] = 2;
    k.halo[0] = 2;
    k.periodic[0] = periodic;
    mlph::test::check_halo_adjoint(comm(), k);
    k.grid_ndim = 2;
    k.grid[1] = 1;
    k.interior[0] = 3;
    k.interior[1] = 4;
    k.halo[0] = 1;
    k.halo[1] = 2;
    k.periodic[1] = !periodic;
    mlph::test::check_halo_adjoint(comm(), k);
  }
}

// Interior 0, halos 1 on a 2 x 1 grid (rows split, columns periodic on each rank): an interior cell
// ends up holding how many halo cells mirrored it: rank 0's last row is rank 1's low halo, and with
// the periodic columns its first and last cells are also corners of that halo.
TEST(MpiComms, HaloAccumulateAddsEveryCopyOfACell) {
  const int64_t rows = 2 + 2, cols = 3 + 2;  // interior 2 x 3, halos of 1
  std::vector<float> block(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (i == 0 || i == rows - 1 || j == 0 || j == cols - 1) block[static_cast<size_t>(i * cols + j)] = 1.0f;
  MLPH_HaloSpec spec{};
  spec.struct_size = sizeof spec;
  spec.dtype = MLPH_DTYPE_F32;
  spec.ndim = 2;
  spec.grid_ndim = 2;
  spec.shape[0] = rows, spec.shape[1] = cols;
  spec.grid[0] = 2, spec.grid[1] = 1;
  spec.halo[0] = 1, spec.halo[1] = 1;
  spec.periodic[1] = 1;
  const auto [code, message] = LoadedComm::outcome(comm().api()->halo_accumulate(comm().comm(), block.data(), &spec));
  ASSERT_EQ(code, MLPH_OK) << message;
  const int64_t border = comm().rank() == 0 ? 2 : 1;  // the interior row next to the other rank
  for (int64_t i = 1; i < rows - 1; ++i)
    for (int64_t j = 1; j < cols - 1; ++j) {
      // Each interior cell of the rows: its column's wrapped halos (first and last columns) plus, on the
      // border row, the other rank's halo row cell and its corners.
      float expected = (j == 1 || j == cols - 2) ? 1.0f : 0.0f;
      if (i == border) expected += 1.0f + ((j == 1 || j == cols - 2) ? 1.0f : 0.0f);
      EXPECT_EQ(block[static_cast<size_t>(i * cols + j)], expected) << "rank " << comm().rank() << " (" << i << ", " << j << ")";
    }
}

TEST(MpiComms, HaloExchangeRejectsAGridOfTheWrongSize) {
  MLPH_HaloSpec spec{};
  spec.struct_size = sizeof spec;
  spec.dtype = MLPH_DTYPE_F32;
  spec.ndim = 1;
  spec.grid_ndim = 1;
  spec.shape[0] = 6;
  spec.grid[0] = 3;
  spec.halo[0] = 1;
  std::vector<float> block(6);
  const auto [code, message] = LoadedComm::outcome(comm().api()->halo_exchange(comm().comm(), block.data(), &spec));
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(message.find("the grid has 3 cells but the communicator 2 ranks"), std::string::npos) << message;
}

// The SDK's gradient buckets (the reference backend's data parallelism) over 2 real ranks: parameters of 3, 5, 2 and 4
// floats read first by nodes 0, 1, 2, 3; buckets of at least 6 floats, built from the last parameter backwards: {4, 2},
// {5, 3}. Each bucket goes out as soon as backward is past its first reader.
// Colors split the 2 ranks into singletons or keep them together; a collective on the new
// communicator covers its members only.
TEST(MpiComms, SplitFormsGroupsByColor) {
  for (const bool together : {false, true}) {
    const int32_t color = together ? 0 : comm().rank();
    MLPH_Comm* part = nullptr;
    const auto [code, message] = LoadedComm::outcome(comm().api()->split(comm().comm(), color, 0, &part));
    ASSERT_EQ(code, MLPH_OK) << message;
    MLPH_Topology t{};
    t.struct_size = sizeof t;
    ASSERT_EQ(LoadedComm::outcome(comm().api()->topology(part, &t)).first, MLPH_OK);
    EXPECT_EQ(t.size, together ? 2 : 1);
    EXPECT_EQ(t.rank, together ? comm().rank() : 0);
    double x = 1.0 + comm().rank();
    EXPECT_EQ(LoadedComm::outcome(comm().api()->allreduce(part, &x, 1, MLPH_DTYPE_F64, MLPH_REDUCE_SUM)).first,
              MLPH_OK);
    EXPECT_EQ(x, together ? 3.0 : 1.0 + comm().rank());
    comm().api()->destroy(part);
  }
}

TEST(GradientBuckets, AverageInBucketsAsBackwardFinishesThem) {
  const MLPH_CommsHandle handle{sizeof(MLPH_CommsHandle), nullptr, comm().api(), comm().comm()};
  std::vector<float> grads(14);
  const std::vector<mlph::sdk::GradientParam> params = {{0, 3, 0}, {3, 5, 1}, {8, 2, 2}, {10, 4, 3}};
  mlph::sdk::GradientBuckets buckets(mlph::core::host_api(), handle, grads.data(), params, 6 * sizeof(float));
  ASSERT_EQ(buckets.buckets(), 2u);
  for (int step = 0; step < 2; ++step) {  // twice: the object is reused step after step
    buckets.start();
    for (size_t i = 0; i < grads.size(); ++i)
      grads[i] = static_cast<float>(i + step) * (comm().rank() == 0 ? 1.0f : 3.0f);
    buckets.node_done(3);
    EXPECT_EQ(buckets.launched(), 0u);  // parameter 2 (read by node 2) is not final yet
    buckets.node_done(2);
    EXPECT_EQ(buckets.launched(), 1u);
    buckets.node_done(1);
    buckets.node_done(0);
    EXPECT_EQ(buckets.launched(), 2u);
    buckets.finish();
    for (size_t i = 0; i < grads.size(); ++i) ASSERT_EQ(grads[i], 2.0f * static_cast<float>(i + step)) << i;
  }
}
