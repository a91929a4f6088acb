// comms/nccl's watchdog and launcher detection, as host code: fake completions, a fake clock, fake
// hooks. No GPU, no MPI.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>

#include "launcher.hpp"
#include "mlph/sdk/util/error.hpp"
#include "watchdog.hpp"

using namespace mlph::comms::nccl;
using namespace std::chrono_literals;

namespace {

// A collective's marker that the test completes, or makes fail as a device error would.
struct FakeMarker {
  std::atomic<bool> done{false};
  std::atomic<bool> broken{false};
};

class FakeCompletion final : public Completion {
 public:
  explicit FakeCompletion(std::shared_ptr<FakeMarker> marker) : marker_(std::move(marker)) {}
  bool done() override {
    if (marker_->broken) mlph::sdk::fail(MLPH_UNAVAILABLE, "CUDA error: an illegal memory access was encountered");
    return marker_->done;
  }

 private:
  std::shared_ptr<FakeMarker> marker_;
};

// A watchdog polled by hand on a clock the test moves, with every hook recorded.
struct Harness {
  Clock::time_point now = Clock::time_point{} + 1000s;
  int aborts = 0;
  std::vector<uint64_t> asked, answered;
  std::optional<std::string> async;
  std::string missing = "rank(s) 1 (at #0) did not reach it";
  Watchdog watchdog{"comms/nccl: rank 0 of 2", 2.0, hooks(), false};

  Hooks hooks() {
    Hooks h;
    h.now = [this] { return now; };
    h.abort = [this] { ++aborts; };
    h.async_error = [this] { return async; };
    h.missing = [this](uint64_t sequence) {
      asked.push_back(sequence);
      return missing;
    };
    h.answer = [this](uint64_t progress) { answered.push_back(progress); };
    return h;
  }

  std::shared_ptr<FakeMarker> watch(uint64_t sequence, const std::string& operation = "allreduce", size_t bytes = 64) {
    auto marker = std::make_shared<FakeMarker>();
    Work work;
    work.sequence = sequence;
    work.operation = operation;
    work.bytes = bytes;
    work.completion = std::make_unique<FakeCompletion>(marker);
    work.enqueued = now;
    watchdog.watch(std::move(work));
    return marker;
  }
};

std::pair<MLPH_Code, std::string> failure(const Watchdog& w) {
  try {
    w.check();
  } catch (const mlph::sdk::Error& e) {
    return {e.code(), e.what()};
  }
  return {MLPH_OK, ""};
}

}  // namespace

TEST(NcclWatchdog, CollectivesCompletedInTimeAreRetired) {
  Harness h;
  auto first = h.watch(1), second = h.watch(2);
  h.now += 1500ms;
  first->done = true;
  h.watchdog.poll();
  EXPECT_EQ(h.watchdog.pending(), 1u);
  second->done = true;
  h.now += 1500ms;  // 3 s after both were enqueued: still fine, both done
  h.watchdog.poll();
  EXPECT_EQ(h.watchdog.pending(), 0u);
  EXPECT_FALSE(h.watchdog.failed());
  EXPECT_EQ(h.aborts, 0);
}

TEST(NcclWatchdog, OneNotCompleteByItsDeadlineFailsTheCommunicatorAndAbortsItOnce) {
  Harness h;
  h.watch(1)->done = true;
  h.watch(2, "allreduce", 4096);
  h.watchdog.poll();  // retires #1: #2's clock runs from here
  h.now += 2000ms;    // exactly the timeout: not yet
  h.watchdog.poll();
  EXPECT_FALSE(h.watchdog.failed());
  h.now += 1ms;
  h.watchdog.poll();
  const auto [code, message] = failure(h.watchdog);
  EXPECT_EQ(code, MLPH_DEADLINE_EXCEEDED);
  EXPECT_EQ(message,
            "comms/nccl: rank 0 of 2: device allreduce #2 (4096 bytes) did not complete within 2 s (comms.timeout_s): "
            "rank(s) 1 (at #0) did not reach it; the NCCL communicator was aborted");
  EXPECT_EQ(h.asked, std::vector<uint64_t>{2});  // the others were asked about #2
  EXPECT_EQ(h.aborts, 1);
  h.now += 10s;
  h.watchdog.poll();
  EXPECT_EQ(h.aborts, 1);  // once
  // Every later call fails with the same line.
  auto marker = std::make_shared<FakeMarker>();
  Work later;
  later.sequence = 3;
  later.completion = std::make_unique<FakeCompletion>(marker);
  try {
    h.watchdog.watch(std::move(later));
    ADD_FAILURE() << "watch after a failure succeeded";
  } catch (const mlph::sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_DEADLINE_EXCEEDED);
    EXPECT_EQ(e.what(), message);
  }
  EXPECT_EQ(h.watchdog.pending(), 0u);
}

// Collectives on one communicator run in order: one waiting behind a slow one is given its full time
// from when that one completed.
TEST(NcclWatchdog, AQueuedCollectivesClockStartsWhenTheOneBeforeCompletes) {
  Harness h;
  auto first = h.watch(1), second = h.watch(2);
  h.now += 1500ms;
  first->done = true;
  h.watchdog.poll();
  h.now += 1900ms;  // 3.4 s after enqueue, 1.9 s after the first completed
  h.watchdog.poll();
  EXPECT_FALSE(h.watchdog.failed());
  h.now += 200ms;
  h.watchdog.poll();
  EXPECT_EQ(failure(h.watchdog).first, MLPH_DEADLINE_EXCEEDED);
  EXPECT_NE(failure(h.watchdog).second.find("device allreduce #2 "), std::string::npos);
}

TEST(NcclWatchdog, AnAsynchronousNcclErrorFailsItNamingTheCollectiveInFlight) {
  Harness h;
  h.watch(7, "halo exchange", 128);
  h.async = "ncclRemoteError: remote process exited or there was a network error";
  h.watchdog.poll();
  const auto [code, message] = failure(h.watchdog);
  EXPECT_EQ(code, MLPH_UNAVAILABLE);
  EXPECT_EQ(message,
            "comms/nccl: rank 0 of 2: NCCL failed during device halo exchange #7 (128 bytes): ncclRemoteError: remote "
            "process exited or there was a network error; the NCCL communicator was aborted");
  EXPECT_EQ(h.aborts, 1);
  EXPECT_TRUE(h.asked.empty());
}

TEST(NcclWatchdog, AnAsynchronousErrorWithNothingInFlightFailsItToo) {
  Harness h;
  h.async = "ncclSystemError: unhandled system error";
  h.watchdog.poll();
  EXPECT_EQ(failure(h.watchdog).second,
            "comms/nccl: rank 0 of 2: NCCL failed: ncclSystemError: unhandled system error; the NCCL communicator was "
            "aborted");
}

TEST(NcclWatchdog, ADeviceErrorInAMarkerFailsIt) {
  Harness h;
  h.watch(1, "broadcast", 8)->broken = true;
  h.watchdog.poll();
  EXPECT_EQ(failure(h.watchdog),
            (std::pair<MLPH_Code, std::string>{
                MLPH_UNAVAILABLE, "comms/nccl: rank 0 of 2: device broadcast #1 (8 bytes): CUDA error: an illegal memory "
                                  "access was encountered; the NCCL communicator was aborted"}));
  EXPECT_EQ(h.aborts, 1);
}

TEST(NcclWatchdog, AnswersTheOtherRanksWithItsProgressAlsoAfterFailing) {
  Harness h;
  h.watchdog.poll();
  h.watch(1)->done = true;
  h.watch(2);
  h.watchdog.poll();
  h.now += 3s;
  h.watchdog.poll();  // fails
  h.watchdog.poll();
  EXPECT_EQ(h.answered, (std::vector<uint64_t>{0, 2, 2, 2}));
}

// The first failure is the one every call reports: one found while enqueueing, then the watchdog's.
TEST(NcclWatchdog, TheFirstFailureStays) {
  Harness h;
  h.watch(1);
  EXPECT_TRUE(h.watchdog.fail(MLPH_UNAVAILABLE, "comms/nccl: rank 0 of 2: device allreduce: ncclAllReduce failed"));
  EXPECT_FALSE(h.watchdog.fail(MLPH_DEADLINE_EXCEEDED, "later"));
  h.now += 1h;
  h.watchdog.poll();
  EXPECT_EQ(failure(h.watchdog),
            (std::pair<MLPH_Code, std::string>{MLPH_UNAVAILABLE,
                                               "comms/nccl: rank 0 of 2: device allreduce: ncclAllReduce failed"}));
  EXPECT_EQ(h.aborts, 0);  // the caller that failed it aborts
}

// Its own thread on the real clock: a collective that never completes fails the communicator within
// the timeout and a few polls, with nobody calling into it.
TEST(NcclWatchdog, ItsThreadFailsAStuckCollectiveOnTime) {
  std::atomic<int> aborts{0};
  Hooks hooks;
  hooks.abort = [&] { ++aborts; };
  Watchdog watchdog("comms/nccl: rank 0 of 1", 0.2, hooks);
  auto marker = std::make_shared<FakeMarker>();
  Work work;
  work.sequence = 1;
  work.operation = "allgather";
  work.completion = std::make_unique<FakeCompletion>(marker);
  const auto start = Clock::now();
  work.enqueued = start;
  watchdog.watch(std::move(work));
  while (!watchdog.failed() && Clock::now() - start < 10s) std::this_thread::sleep_for(1ms);
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(watchdog.failed());
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(failure(watchdog).second,
            "comms/nccl: rank 0 of 1: device allgather #1 (0 bytes) did not complete within 0.2 s (comms.timeout_s); the "
            "NCCL communicator was aborted");
}

TEST(NcclWatchdog, DescribesWhichRanksDidNotReachTheCollective) {
  const auto name = [](int r) { return std::to_string(10 + r); };  // world ranks of a split communicator
  EXPECT_EQ(describe_missing(5, {5, 5, 6}, name), "every rank reached it; NCCL or the network is stuck");
  EXPECT_EQ(describe_missing(5, {5, 4, 5}, name), "rank(s) 11 (at #4) did not reach it");
  EXPECT_EQ(describe_missing(5, {5, std::nullopt, 3}, name),
            "rank(s) 12 (at #3) did not reach it; rank(s) 11 did not answer (dead, or the whole process hung)");
}

TEST(NcclLauncher, TheRankVariablesOfOpenMpiPmixAndSlurmSayALauncherStartedUs) {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const std::map<std::string, std::string> env = {{variable, "0"}, {"HOME", "/root"}};
    EXPECT_TRUE(started_by_launcher([&](const char* name) {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    })) << variable;
  }
  EXPECT_FALSE(started_by_launcher([](const char* name) {
    return std::string(name) == "OMPI_MCA_btl_vader_single_copy_mechanism" ? "none" : nullptr;
  }));
}
