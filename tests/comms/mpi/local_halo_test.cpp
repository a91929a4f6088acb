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

TEST(LocalComms, HaloExchangeIsOptionalForOneDotZeroTables) {
  LoadedComm comm("local");
  MLPH_CommsApi table = *comm.api();
  EXPECT_TRUE(mlph::sdk::has_halo_exchange(&table));
  table.struct_size = MLPH_STRUCT_SIZE(MLPH_CommsApi, barrier);  // a 1.0 plug-in's table ends there
  EXPECT_FALSE(mlph::sdk::has_halo_exchange(&table));
  table.struct_size = sizeof table;
  table.halo_exchange = nullptr;
  EXPECT_FALSE(mlph::sdk::has_halo_exchange(&table));
}
