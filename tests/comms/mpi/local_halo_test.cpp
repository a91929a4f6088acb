// comms/local: the halo exchange of a one-rank grid wraps periodic dims and leaves the others alone.
#include <gtest/gtest.h>

#include "comms_fixture.hpp"
#include "halo_check.hpp"

using mlph::test::HaloCase;
using mlph::test::LoadedComm;

TEST(LocalComms, HaloExchangeOnOneRank) {
  LoadedComm comm("local");
  for (bool periodic : {false, true}) {
    HaloCase k;
    k.periodic[0] = periodic;
    mlph::test::check_halo_exchange(comm, k);
    k.grid_ndim = 2;
    k.halo[1] = 1;
    k.periodic[1] = !periodic;
    mlph::test::check_halo_exchange(comm, k);
  }
}

// The transpose on one rank: periodic dims send their halos back onto this rank's own interior.
TEST(LocalComms, HaloAccumulateIsTheTransposeOfTheExchange) {
  LoadedComm comm("local");
  for (bool periodic : {false, true}) {
    HaloCase k;
    k.halo[0] = 2;
    k.periodic[0] = periodic;
    mlph::test::check_halo_adjoint(comm, k);
    k.grid_ndim = 2;
    k.halo[1] = 1;
    k.periodic[1] = !periodic;
    mlph::test::check_halo_adjoint(comm, k);
  }
}

TEST(LocalComms, HaloExchangeIsOptionalForOneDotZeroTables) {
  LoadedComm comm("local");
  MLPH_CommsApi table = *comm.api();
  EXPECT_TRUE(mlph::sdk::has_halo_exchange(&table));
  table.struct_size = MLPH_STRUCT_SIZE(MLPH_CommsApi, barrier);  // a 1.0 plug-in's table ends there
  EXPECT_FALSE(mlph::sdk::has_halo_exchange(&table));
  table.struct_size = sizeof table;
  table.halo_exchange = nullptr;
  EXPECT_FALSE(mlph::sdk::has_halo_exchange(&table));
  EXPECT_TRUE(mlph::sdk::has_halo_accumulate(&table));
  table.struct_size = MLPH_STRUCT_SIZE(MLPH_CommsApi, split);  // a 1.2 plug-in's table ends before it
  EXPECT_FALSE(mlph::sdk::has_halo_accumulate(&table));
}

TEST(LocalComms, SplitGivesAOneRankCommunicator) {
  LoadedComm comm("local");
  ASSERT_TRUE(mlph::sdk::has_split(comm.api()));
  MLPH_Comm* part = nullptr;
  ASSERT_EQ(LoadedComm::outcome(comm.api()->split(comm.comm(), 0, 0, &part)).first, MLPH_OK);
  MLPH_Topology t{};
  t.struct_size = sizeof t;
  ASSERT_EQ(LoadedComm::outcome(comm.api()->topology(part, &t)).first, MLPH_OK);
  EXPECT_EQ(t.size, 1);
  double x = 2.5;
  EXPECT_EQ(LoadedComm::outcome(comm.api()->allreduce(part, &x, 1, MLPH_DTYPE_F64, MLPH_REDUCE_SUM)).first, MLPH_OK);
  EXPECT_EQ(x, 2.5);
  comm.api()->destroy(part);
  const auto [code, message] = LoadedComm::outcome(comm.api()->split(comm.comm(), -1, 0, &part));
  EXPECT_EQ(code, MLPH_INVALID_ARGUMENT);
  EXPECT_NE(message.find("color -1 is negative"), std::string::npos) << message;
}
