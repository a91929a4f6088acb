// comms/nccl's multi-rank host logic under mpirun -np 2, without a GPU: the agreement between bind's
// steps, rank 0's NCCL unique id reaching every rank, and the watchdog naming the rank that did not
// reach a device collective by asking the other ranks over MPI (fake markers stand for CUDA events).
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "bootstrap.hpp"
#include "mlph/core/host.hpp"
#include "mpi_transport.hpp"
#include "peers.hpp"
#include "watchdog.hpp"

using namespace mlph::comms::nccl;
using mlph::comms::MpiComm;
using namespace std::chrono_literals;

namespace {

// One transport for the whole program: MPI initializes once per process.
MpiComm* g_comm = nullptr;

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { g_comm = new MpiComm(mlph::core::host_api(), "comms/nccl", 20); }
  void TearDown() override { delete g_comm; }
};

const auto* const registered = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

MpiComm& comm() { return *g_comm; }

std::pair<MLPH_Code, std::string> outcome_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const mlph::sdk::Error& e) {
    return {e.code(), e.what()};
  }
  return {MLPH_OK, ""};
}

class FlagCompletion final : public Completion {
 public:
  explicit FlagCompletion(bool done) : done_(done) {}
  bool done() override { return done_; }

 private:
  bool done_;
};

Work work(uint64_t sequence, bool done) {
  Work w;
  w.sequence = sequence;
  w.operation = "allreduce";
  w.bytes = 64;
  w.completion = std::make_unique<FlagCompletion>(done);
  w.enqueued = Clock::now();
  return w;
}

// A watchdog asking and answering over `mpi` as comms/nccl's does, on its own thread.
std::unique_ptr<Watchdog> watchdog_over(MpiComm& mpi, double timeout_s, std::atomic<int>& aborts) {
  Peers peers = peers_over(mpi, timeout_s);
  EXPECT_TRUE(peers.missing && peers.answer) << "this MPI lacks MPI_THREAD_MULTIPLE";
  Hooks hooks;
  hooks.missing = peers.missing;
  hooks.answer = peers.answer;
  hooks.abort = [&aborts] { ++aborts; };
  return std::make_unique<Watchdog>(mpi.where(), timeout_s, hooks);
}

std::string wait_for_failure(const Watchdog& w) {
  const auto start = Clock::now();
  while (!w.failed() && Clock::now() - start < 20s) std::this_thread::sleep_for(1ms);
  return outcome_of([&] { w.check(); }).second;
}

}  // namespace

TEST(NcclRanks, TheUniqueIdRank0MakesReachesEveryRank) {
  ASSERT_EQ(comm().size(), 2) << "run under mpirun -np 2";
  const ncclUniqueId id = share_from_rank0<ncclUniqueId>(comm(), comm().where(), [] {
    EXPECT_EQ(comm().rank(), 0) << "only rank 0 makes the id";
    ncclUniqueId made{};
    EXPECT_EQ(ncclGetUniqueId(&made), ncclSuccess);  // works without a GPU
    return made;
  });
  std::vector<ncclUniqueId> all(2);
  comm().allgather(&id, all.data(), sizeof id);
  EXPECT_EQ(std::memcmp(&all[0], &all[1], sizeof id), 0);
  EXPECT_TRUE(std::any_of(id.internal, id.internal + sizeof id.internal, [](char c) { return c != 0; }));
}

TEST(NcclRanks, Rank0FailingToMakeTheIdFailsEveryRankWithItsLine) {
  const auto [code, message] = outcome_of([] {
    share_from_rank0<ncclUniqueId>(comm(), comm().where(), []() -> ncclUniqueId {
      mlph::sdk::fail(MLPH_UNAVAILABLE, comm().where() + ": ncclGetUniqueId failed: ncclSystemError: no socket");
    });
  });
  EXPECT_EQ(code, MLPH_UNAVAILABLE);
  const std::string rank0 = "comms/nccl: rank 0 of 2: ncclGetUniqueId failed: ncclSystemError: no socket";
  EXPECT_EQ(message, comm().rank() == 0 ? rank0 : "comms/nccl: rank 1 of 2: stopped because rank 0 failed: " + rank0);
}

TEST(NcclRanks, AgreementGoesOnWhenEveryRankIsReady) {
  EXPECT_EQ(outcome_of([] { agree(comm(), comm().where(), {}); }).first, MLPH_OK);
}

// The case bind guards against: one rank cannot use its device and the other must not wait for it in
// ncclCommInitRank. Both fail, each with one line; the ready one names the other's failure.
TEST(NcclRanks, OneRankFailingFailsEveryRankNamingIt) {
  const std::string failure = "comms/nccl: rank 1 of 2: cannot bind to CUDA device 1: this process sees 1 CUDA device(s)";
  const Outcome mine = comm().rank() == 1 ? Outcome{MLPH_INVALID_ARGUMENT, failure} : Outcome{};
  const auto [code, message] = outcome_of([&] { agree(comm(), comm().where(), mine); });
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_EQ(message, comm().rank() == 1 ? failure
                                        : "comms/nccl: rank 0 of 2: stopped because another rank failed: " + failure);
}

TEST(NcclRanks, EveryRankFailingGivesEachItsOwnLine) {
  const std::string mine = comm().where() + ": cannot bind to CUDA device 0: no CUDA-capable device is detected";
  EXPECT_EQ(outcome_of([&] { agree(comm(), comm().where(), {MLPH_UNAVAILABLE, mine}); }),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE, mine}));
}

// Rank 1's process stops making device collectives after #1 (its host thread hung), while its
// watchdog thread still answers: rank 0's #2 times out and names rank 1 and how far it got. (A 2 s
// timeout: the others' answers are awaited for as long, at most 2 s.)
TEST(NcclRanks, TheWatchdogNamesTheRankThatDidNotReachADeviceCollective) {
  auto part = comm().split_mpi(0, comm().rank());  // its own questions, apart from the other tests'
  std::atomic<int> aborts{0};
  auto watchdog = watchdog_over(*part, 2.0, aborts);
  watchdog->watch(work(1, true));
  if (comm().rank() == 0) {
    watchdog->watch(work(2, false));
    EXPECT_EQ(wait_for_failure(*watchdog),
              "comms/nccl: rank 0 (0 of 2 in a split communicator): device allreduce #2 (64 bytes) did not complete "
              "within 2 s (comms.timeout_s): rank(s) 1 (at #1) did not reach it; the NCCL communicator was aborted");
    EXPECT_EQ(aborts, 1);
  }
  comm().barrier();  // rank 1's watchdog answers meanwhile
  if (comm().rank() == 1) {
    EXPECT_FALSE(watchdog->failed());
  }
}

// Both ranks made #1 and it never completes (NCCL or the network stuck): each asks the other while
// answering it, and says every rank reached it.
TEST(NcclRanks, WhenEveryRankReachedTheCollectiveTheWatchdogSaysSo) {
  auto part = comm().split_mpi(0, comm().rank());
  std::atomic<int> aborts{0};
  auto watchdog = watchdog_over(*part, 2.0, aborts);
  watchdog->watch(work(1, false));
  EXPECT_EQ(wait_for_failure(*watchdog),
            part->where() + ": device allreduce #1 (64 bytes) did not complete within 2 s (comms.timeout_s): every "
                            "rank reached it; NCCL or the network is stuck; the NCCL communicator was aborted");
  comm().barrier();
}
