// comms/nccl on a GPU: every device collective against known values and, for the halos, against the
// host version of the same exchange; a collective that never completes aborted by the watchdog within
// comms.timeout_s with the stream drained; a peer that never joins failing bind in time. One rank per
// GPU: on one GPU it runs alone (no launcher); under mpirun with a GPU per rank each checks its share.
// Without a CUDA device every case skips, saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "../mpi/comms_fixture.hpp"
#include "mlph/sdk/comms/plugin.hpp"
#include "nccl_comm.hpp"

using mlph::test::LoadedComm;
using namespace std::chrono_literals;

namespace {

std::string no_device() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return "no CUDA device: " + mlph::comms::nccl::cuda_error_text(error);
  return count == 0 ? "no CUDA device: none visible" : "";
}

int devices() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// One communicator per process (MPI, when launched, initializes once), bound to the local rank's GPU.
LoadedComm* g_comm = nullptr;

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!no_device().empty()) return;
    g_comm = new LoadedComm("nccl", {{"timeout_s", "30"}});
  }
  void TearDown() override { delete g_comm; }
};
const auto* const registered = ::testing::AddGlobalTestEnvironment(new Environment);

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : count(n) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(T)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  void put(const std::vector<T>& host) { EXPECT_EQ(cudaMemcpy(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<T> get() const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  T* data = nullptr;
  size_t count;
};

class NcclDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = no_device();
    if (!why.empty()) GTEST_SKIP() << why;
    if (g_comm->topology().local_size > devices()) GTEST_SKIP() << "needs a GPU per rank (NCCL refuses two ranks on one)";
    calls_ = mlph::sdk::find_device_collectives(g_comm->api(), MLPH_DEVICE_CUDA);
    ASSERT_NE(calls_, nullptr);
    ASSERT_EQ(LoadedComm::outcome(calls_->bind(g_comm->comm(), device())).first, MLPH_OK);
    ASSERT_EQ(cudaSetDevice(device().id), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  MLPH_Device device() const { return {MLPH_DEVICE_CUDA, g_comm->topology().local_rank}; }
  int32_t rank() const { return g_comm->rank(); }
  int32_t size() const { return g_comm->size(); }
  // Waits for the stream, then asks the communicator how its collectives went.
  void finish(MLPH_Comm* comm = nullptr) {
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const auto [code, message] = LoadedComm::outcome(calls_->status(comm ? comm : g_comm->comm()));
    ASSERT_EQ(code, MLPH_OK) << message;
  }
  void ok(MLPH_Error* error) {
    const auto [code, message] = LoadedComm::outcome(error);
    ASSERT_EQ(code, MLPH_OK) << message;
  }

  const MLPH_DeviceCollectives* calls_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

uint16_t to_bf16(float f) {  // exact for the small integers used here
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint16_t to_f16(float f) {  // normal values exact in 11 bits
  int exponent = 0;
  const float mantissa = std::frexp(f, &exponent);  // f = m 2^e, m in [0.5, 1)
  const auto sign = static_cast<uint16_t>(f < 0 ? 0x8000 : 0);
  const auto bits = static_cast<uint16_t>(std::lround((std::fabs(mantissa) * 2 - 1) * 1024));
  return sign | static_cast<uint16_t>((exponent - 1 + 15) << 10) | bits;
}
float from_f16(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const float value = std::ldexp(1.0f + static_cast<float>(h & 0x3FF) / 1024, exponent - 15);
  return (h & 0x8000) ? -value : value;
}

}  // namespace

// Element i of rank r holds (i % 7) + r + 1: the sum over n ranks is n (i % 7 + 1) + n (n - 1) / 2, the
// average that over n, the max (i % 7) + n. Large enough for NCCL's multi-step algorithms.
TEST_F(NcclDevice, AllreduceSumAverageMaxOnEveryFloatDtypeAndI32) {
  const size_t n = (size_t{1} << 20) + 3;
  const int32_t s = size();
  const auto value = [&](size_t i, int32_t r) { return static_cast<float>(i % 7 + r + 1); };
  const auto expected = [&](size_t i, MLPH_ReduceOp op) {
    const float sum = static_cast<float>(s) * static_cast<float>(i % 7 + 1) + static_cast<float>(s * (s - 1) / 2);
    return op == MLPH_REDUCE_SUM ? sum : op == MLPH_REDUCE_AVERAGE ? sum / static_cast<float>(s) : static_cast<float>(i % 7) + s;
  };
  for (const MLPH_ReduceOp op : {MLPH_REDUCE_SUM, MLPH_REDUCE_AVERAGE, MLPH_REDUCE_MAX}) {
    {
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = value(i, rank());
      DeviceBuffer<float> d(n);
      d.put(host);
      ok(calls_->allreduce(g_comm->comm(), d.data, n, MLPH_DTYPE_F32, op, stream_));
      finish();
      host = d.get();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], expected(i, op)) << "f32 op " << op << " element " << i;
    }
    {
      std::vector<double> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = value(i, rank());
      DeviceBuffer<double> d(n);
      d.put(host);
      ok(calls_->allreduce(g_comm->comm(), d.data, n, MLPH_DTYPE_F64, op, stream_));
      finish();
      host = d.get();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], expected(i, op)) << "f64 op " << op << " element " << i;
    }
    for (const MLPH_DType dtype : {MLPH_DTYPE_F16, MLPH_DTYPE_BF16}) {
      const bool half = dtype == MLPH_DTYPE_F16;
      std::vector<uint16_t> host(4096);
      for (size_t i = 0; i < host.size(); ++i) host[i] = half ? to_f16(value(i, rank())) : to_bf16(value(i, rank()));
      DeviceBuffer<uint16_t> d(host.size());
      d.put(host);
      ok(calls_->allreduce(g_comm->comm(), d.data, host.size(), dtype, op, stream_));
      finish();
      host = d.get();
      for (size_t i = 0; i < host.size(); ++i)
        ASSERT_EQ(half ? from_f16(host[i]) : from_bf16(host[i]), expected(i, op)) << "dtype " << dtype << " op " << op << " element " << i;
    }
    if (op != MLPH_REDUCE_AVERAGE) {
      std::vector<int32_t> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(value(i, rank()));
      DeviceBuffer<int32_t> d(n);
      d.put(host);
      ok(calls_->allreduce(g_comm->comm(), d.data, n, MLPH_DTYPE_I32, op, stream_));
      finish();
      host = d.get();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[i], static_cast<int32_t>(expected(i, op))) << "i32 op " << op << " element " << i;
    }
  }
}

TEST_F(NcclDevice, ArgumentsAreCheckedAsTheHostCallsCheckThem) {
  DeviceBuffer<int32_t> d(4);
  const auto [code, message] =
      LoadedComm::outcome(calls_->allreduce(g_comm->comm(), d.data, 4, MLPH_DTYPE_I32, MLPH_REDUCE_AVERAGE, stream_));
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(message.find("AVERAGE of i32 (integers) is not defined"), std::string::npos) << message;
  EXPECT_EQ(LoadedComm::outcome(calls_->allreduce(g_comm->comm(), d.data, 4, MLPH_DTYPE_I16, MLPH_REDUCE_SUM, stream_)).first,
            MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(LoadedComm::outcome(calls_->broadcast(g_comm->comm(), d.data, 16, size(), stream_)).first,
            MLPH_INVALID_ARGUMENT);
  // Bound once: the same device again is nothing, another one a precondition failure.
  EXPECT_EQ(LoadedComm::outcome(calls_->bind(g_comm->comm(), device())).first, MLPH_OK);
  EXPECT_EQ(LoadedComm::outcome(calls_->bind(g_comm->comm(), {MLPH_DEVICE_CUDA, device().id + 1})).first,
            MLPH_FAILED_PRECONDITION);
  finish();  // none of that broke the communicator
}

TEST_F(NcclDevice, BroadcastFromEveryRootAndAllgatherRankMajor) {
  for (int32_t root = 0; root < size(); ++root) {
    std::vector<uint8_t> host(100003);
    for (size_t i = 0; i < host.size(); ++i) host[i] = rank() == root ? static_cast<uint8_t>(i * 7 + root) : 0;
    DeviceBuffer<uint8_t> d(host.size());
    d.put(host);
    ok(calls_->broadcast(g_comm->comm(), d.data, host.size(), root, stream_));
    finish();
    host = d.get();
    for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], static_cast<uint8_t>(i * 7 + root)) << i;
  }
  const std::vector<int32_t> mine = {rank(), 10 * rank() + 1, 100 * rank() + 2};
  DeviceBuffer<int32_t> send(3), recv(3 * static_cast<size_t>(size()));
  send.put(mine);
  ok(calls_->allgather(g_comm->comm(), send.data, recv.data, sizeof(int32_t) * 3, stream_));
  finish();
  const std::vector<int32_t> all = recv.get();
  for (int32_t r = 0; r < size(); ++r)
    EXPECT_EQ(std::vector<int32_t>(all.begin() + 3 * r, all.begin() + 3 * r + 3),
              (std::vector<int32_t>{r, 10 * r + 1, 100 * r + 2}));
}

namespace {
// A 3-D block (rows x cols x channels) whose rows are split over the ranks and both dims periodic
// (with one rank both wrap onto it): dim 0's slab is contiguous (sent in place), dim 1's strided.
MLPH_HaloSpec halo_spec(int32_t ranks, MLPH_DType dtype) {
  MLPH_HaloSpec spec{};
  spec.struct_size = sizeof spec;
  spec.dtype = dtype;
  spec.ndim = 3;
  spec.grid_ndim = 2;
  spec.shape[0] = 5 + 2 * 2, spec.shape[1] = 6 + 2 * 1, spec.shape[2] = 3;
  spec.grid[0] = ranks, spec.grid[1] = 1;
  spec.halo[0] = 2, spec.halo[1] = 1;
  spec.periodic[0] = 1, spec.periodic[1] = 1;
  return spec;
}
}  // namespace

// The device exchange and its transpose move exactly what the host versions move (same sdk::halo
// steps): the same block through both, compared to the bit.
TEST_F(NcclDevice, HaloExchangeAndAccumulateMatchTheHostVersions) {
  for (const MLPH_DType dtype : {MLPH_DTYPE_F32, MLPH_DTYPE_F64}) {
    for (const bool accumulate : {false, true}) {
      const MLPH_HaloSpec spec = halo_spec(size(), dtype);
      const size_t n = static_cast<size_t>(spec.shape[0] * spec.shape[1] * spec.shape[2]);
      const size_t bytes = n * mlph_dtype_size(dtype);
      std::vector<std::byte> host(bytes);
      for (size_t i = 0; i < n; ++i) {
        const double v = mlph_uniform(3, static_cast<uint64_t>(rank()), accumulate, i) - 0.5;
        if (dtype == MLPH_DTYPE_F64)
          std::memcpy(host.data() + i * 8, &v, 8);
        else {
          const auto f = static_cast<float>(v);
          std::memcpy(host.data() + i * 4, &f, 4);
        }
      }
      DeviceBuffer<std::byte> d(bytes);
      d.put(host);
      ok(accumulate ? calls_->halo_accumulate(g_comm->comm(), d.data, &spec, stream_)
                    : calls_->halo_exchange(g_comm->comm(), d.data, &spec, stream_));
      finish();
      ok(accumulate ? g_comm->api()->halo_accumulate(g_comm->comm(), host.data(), &spec)
                    : g_comm->api()->halo_exchange(g_comm->comm(), host.data(), &spec));
      EXPECT_TRUE(d.get() == host) << (accumulate ? "accumulate" : "exchange") << " dtype " << dtype;
    }
  }
}

TEST_F(NcclDevice, ASplitCommunicatorBindsAndReducesOverItsRanks) {
  MLPH_Comm* part = nullptr;
  ok(g_comm->api()->split(g_comm->comm(), rank() % 2, rank(), &part));
  ok(calls_->bind(part, device()));
  MLPH_Topology t{};
  t.struct_size = sizeof t;
  ok(g_comm->api()->topology(part, &t));
  DeviceBuffer<float> d(1);
  d.put({1.0f});
  ok(calls_->allreduce(part, d.data, 1, MLPH_DTYPE_F32, MLPH_REDUCE_SUM, stream_));
  finish(part);
  EXPECT_EQ(d.get()[0], static_cast<float>(t.size));
  g_comm->api()->destroy(part);
}

// The watchdog on a real stall: a send to this rank itself that no receive matches never completes.
// Within the timeout (1 s) and a few polls the communicator is failed naming the collective, NCCL is
// aborted, and the stream drains rather than hangs.
TEST(NcclDeviceWatchdog, AStalledCollectiveIsAbortedInTimeAndTheStreamDrains) {
  const std::string why = no_device();
  if (!why.empty()) GTEST_SKIP() << why;
  if (g_comm->size() > 1) GTEST_SKIP() << "one rank's own communicator";
  using mlph::comms::nccl::NcclCommunicator;
  NcclCommunicator::Setup setup;
  setup.where = "comms/nccl: rank 0 of 1";
  setup.timeout_s = 1;
  ASSERT_EQ(ncclGetUniqueId(&setup.id), ncclSuccess);
  NcclCommunicator communicator(setup);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 1024), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  try {
    communicator.run("send", 1024, stream, [&](NcclCommunicator::Enqueue& q) {
      q.nccl(ncclGroupStart(), "ncclGroupStart");
      q.nccl(ncclSend(buffer, 1024, ncclUint8, 0, q.comm(), q.stream()), "ncclSend");
      q.nccl(ncclGroupEnd(), "ncclGroupEnd");
    });
  } catch (const std::exception& e) {
    GTEST_SKIP() << "NCCL refused a lone send to itself, so no stall can be made on one GPU: " << e.what();
  }
  while (!communicator.failed() && std::chrono::steady_clock::now() - start < 20s) std::this_thread::sleep_for(1ms);
  const auto failed_after = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(communicator.failed());
  EXPECT_GE(failed_after, 1s);
  EXPECT_LT(failed_after, 5s);
  try {
    communicator.check();
  } catch (const mlph::sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_DEADLINE_EXCEEDED);
    EXPECT_EQ(std::string(e.what()), "comms/nccl: rank 0 of 1: device send #1 (1024 bytes) did not complete within 1 s "
                                     "(comms.timeout_s); the NCCL communicator was aborted");
  }
  cudaError_t drained = cudaErrorNotReady;
  while ((drained = cudaStreamQuery(stream)) == cudaErrorNotReady && std::chrono::steady_clock::now() - start < 30s)
    std::this_thread::sleep_for(1ms);
  EXPECT_NE(drained, cudaErrorNotReady) << "the stream still waits on the aborted send";
  cudaFree(buffer);
  cudaStreamDestroy(stream);
}

// bind's other bound: a communicator of 2 ranks whose second never joins is not ready within the
// timeout, and fails saying so instead of waiting for it.
TEST(NcclDeviceWatchdog, APeerThatNeverJoinsFailsTheCommunicatorInTime) {
  const std::string why = no_device();
  if (!why.empty()) GTEST_SKIP() << why;
  using mlph::comms::nccl::NcclCommunicator;
  NcclCommunicator::Setup setup;
  setup.where = "comms/nccl: rank 0 of 2";
  setup.size = 2;
  setup.timeout_s = 1;
  ASSERT_EQ(ncclGetUniqueId(&setup.id), ncclSuccess);
  const auto start = std::chrono::steady_clock::now();
  try {
    NcclCommunicator communicator(setup);
    ADD_FAILURE() << "a communicator of 2 was made with one rank";
  } catch (const mlph::sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_DEADLINE_EXCEEDED) << e.what();
    EXPECT_EQ(std::string(e.what()),
              "comms/nccl: rank 0 of 2: ncclCommInitRankConfig was still in progress after 1 s (comms.timeout_s)");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}
