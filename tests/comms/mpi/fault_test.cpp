// A dead or hung rank never hangs the job, and an MPI error is one clear line: the rank that sees
// it fails within a bound with a message naming the call and the rank, and every rank exits non-zero.
// comms/mpi's cases (MpiFaults), and the same for comms/nccl's host side (NcclFaults) where it is built.
#include <gtest/gtest.h>

#include <chrono>

#include "../../integration/cli.hpp"
#include "mpirun.hpp"

using mlph::test::CliResult;
using mlph::test::run_command;

namespace {

CliResult run_probe(const std::string& scenario, const std::string& plugin, double* seconds) {
  const std::string command = mlph::test::mpirun_2_ranks() + MLPH_PROBE + " " + scenario + " 2 " + plugin;
  const auto start = std::chrono::steady_clock::now();
  CliResult r = run_command(command);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void hung_rank_times_out_naming_it(const std::string& plugin) {
  double seconds = 0;
  const CliResult r = run_probe("skip", plugin, &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("comms/" + plugin + ": rank 0 of 2: barrier #"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not complete within 2 s (comms.timeout_s): rank(s) 1 did not reach it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("code 4"), std::string::npos) << r.output;  // MLPH_DEADLINE_EXCEEDED
  // 2 s timeout + 2 s of listening for notices + the abort; rank 1 alone would sleep 60 s.
  EXPECT_LT(seconds, 15.0) << r.output;
}

void killed_rank_ends_the_job(const std::string& plugin) {
  double seconds = 0;
  const CliResult r = run_probe("kill", plugin, &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

void mpi_error_becomes_one_clear_line(const std::string& plugin) {
  double seconds = 0;
  const CliResult r = run_probe("truncate", plugin, &seconds);  // rank 1 receives a broadcast into too small a buffer
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("code 14: comms/" + plugin + ": rank 1 of 2: broadcast failed: MPI_ERR_TRUNCATE"),
            std::string::npos)
      << r.output;  // MLPH_UNAVAILABLE with MPI's own words
  EXPECT_LT(seconds, 15.0) << r.output;
}

// A spatially split sample's neighbour that hangs between two halo exchanges: rank 0's second one
// times out within comms.timeout_s naming the exchange and the rank, and the job ends non-zero.
void hung_neighbour_in_a_halo_exchange_times_out_naming_it(const std::string& plugin) {
  double seconds = 0;
  const CliResult r = run_probe("halo-skip", plugin, &seconds);
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
void dead_neighbour_in_a_halo_exchange_ends_the_job(const std::string& plugin) {
  double seconds = 0;
  const CliResult r = run_probe("halo-kill", plugin, &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}

}  // namespace

TEST(MpiFaults, HungRankTimesOutNamingItAndAbortsEveryRank) { hung_rank_times_out_naming_it("mpi"); }
TEST(MpiFaults, KilledRankEndsTheJob) { killed_rank_ends_the_job("mpi"); }
TEST(MpiFaults, MpiErrorBecomesOneClearLineAndAbortsEveryRank) { mpi_error_becomes_one_clear_line("mpi"); }
TEST(MpiFaults, HungNeighbourInAHaloExchangeTimesOutNamingIt) {
  hung_neighbour_in_a_halo_exchange_times_out_naming_it("mpi");
}
TEST(MpiFaults, DeadNeighbourInAHaloExchangeEndsTheJob) { dead_neighbour_in_a_halo_exchange_ends_the_job("mpi"); }

#ifdef MLPH_TEST_NCCL
// comms/nccl's host collectives are the MPI transport's, bounded and failing alike.
TEST(NcclFaults, HungRankTimesOutNamingItAndAbortsEveryRank) { hung_rank_times_out_naming_it("nccl"); }
TEST(NcclFaults, KilledRankEndsTheJob) { killed_rank_ends_the_job("nccl"); }
TEST(NcclFaults, MpiErrorBecomesOneClearLineAndAbortsEveryRank) { mpi_error_becomes_one_clear_line("nccl"); }
TEST(NcclFaults, HungNeighbourInAHaloExchangeTimesOutNamingIt) {
  hung_neighbour_in_a_halo_exchange_times_out_naming_it("nccl");
}
#endif
