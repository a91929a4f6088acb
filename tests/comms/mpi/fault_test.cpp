// A dead or hung rank never hangs the job, and an MPI error is one clear line: the rank that sees
// it fails within a bound with a message naming the call and the rank, and every rank exits non-zero.
#include <gtest/gtest.h>

#include <chrono>

#include "../../integration/cli.hpp"
#include "mpirun.hpp"

using mlph::test::CliResult;
using mlph::test::run_command;

namespace {

CliResult run_probe(const std::string& scenario, double* seconds) {
  const std::string command = mlph::test::mpirun_2_ranks() + MLPH_PROBE + " " + scenario + " 2";
  const auto start = std::chrono::steady_clock::now();
  CliResult r = run_command(command);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace

TEST(MpiFaults, HungRankTimesOutNamingItAndAbortsEveryRank) {
  double seconds = 0;
  const CliResult r = run_probe("skip", &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("barrier #"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not complete within 2 s (comms.timeout_s): rank(s) 1 did not reach it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("code 4"), std::string::npos) << r.output;  // MLPH_DEADLINE_EXCEEDED
  // 2 s timeout + 2 s of listening for notices + the abort; rank 1 alone would sleep 60 s.
  EXPECT_LT(seconds, 15.0) << r.output;
}

TEST(MpiFaults, KilledRankEndsTheJob) {
  double seconds = 0;
  const CliResult r = run_probe("kill", &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

TEST(MpiFaults, MpiErrorBecomesOneClearLineAndAbortsEveryRank) {
  double seconds = 0;
  const CliResult r = run_probe("truncate", &seconds);  // rank 1 receives a broadcast into too small a buffer
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("code 14: comms/mpi: rank 1 of 2: broadcast failed: MPI_ERR_TRUNCATE"), std::string::npos)
      << r.output;  // MLPH_UNAVAILABLE with MPI's own words
  EXPECT_LT(seconds, 15.0) << r.output;
}

// A spatially split sample's neighbour that hangs between two halo exchanges: rank 0's second one
// times out within comms.timeout_s naming the exchange and the rank, and the job ends non-zero.
TEST(MpiFaults, HungNeighbourInAHaloExchangeTimesOutNamingIt) {
  double seconds = 0;
  const CliResult r = run_probe("halo-skip", &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0: halo exchange 1 returned code 0"), std::string::npos) << r.output;
  // #3: the split communicator's first call counts its nodes (an allreduce); 16 bytes: one face of 4 floats.
  EXPECT_NE(r.output.find("halo exchange #3 (16 bytes) did not complete within 2 s (comms.timeout_s): rank(s) 1 "
                          "did not reach it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(0 of 2 in a split communicator)"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

// A neighbour that dies between two halo exchanges: the launcher names it and ends rank 0.
TEST(MpiFaults, DeadNeighbourInAHaloExchangeEndsTheJob) {
  double seconds = 0;
  const CliResult r = run_probe("halo-kill", &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}
