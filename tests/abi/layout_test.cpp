// Pins ABI 1.0: every table's last member and its offset. A change here is an ABI change: append
// members (and bump MLPH_ABI_MINOR), never move or remove them.
#include <gtest/gtest.h>

#include "mlph/plugin.h"

extern "C" int mlph_c_compile_check(void);

#define MLPH_LAST_MEMBER(T, m) static_assert(sizeof(T) == MLPH_STRUCT_SIZE(T, m), #T ": " #m " is not the last member")
MLPH_LAST_MEMBER(MLPH_Plugin, api);
MLPH_LAST_MEMBER(MLPH_HostApi, error_free);
MLPH_LAST_MEMBER(MLPH_BackendApi, read_gradient);
MLPH_LAST_MEMBER(MLPH_WorkloadApi, generate_data);
MLPH_LAST_MEMBER(MLPH_CommsApi, halo_exchange);  // 1.1 appended `halo_exchange` after 1.0's `barrier`
MLPH_LAST_MEMBER(MLPH_HaloSpec, periodic);
MLPH_LAST_MEMBER(MLPH_StorageApi, stage);  // 1.1 appended `stage` after 1.0's `stats`
MLPH_LAST_MEMBER(MLPH_StageStats, shard_count);
MLPH_LAST_MEMBER(MLPH_Graph, seed);
MLPH_LAST_MEMBER(MLPH_Tensor, data);

// Frozen offsets of ABI 1.0 (LP64): function tables are struct_size, ext, then pointers in order.
static_assert(offsetof(MLPH_BackendApi, read_gradient) / sizeof(void*) == 10, "MLPH_BackendApi 1.0 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, generate_data) / sizeof(void*) == 13, "MLPH_WorkloadApi 1.0 layout changed");
static_assert(offsetof(MLPH_CommsApi, barrier) / sizeof(void*) == 8, "MLPH_CommsApi 1.0 layout changed");
static_assert(offsetof(MLPH_CommsApi, halo_exchange) / sizeof(void*) == 9, "MLPH_CommsApi 1.1 layout changed");
static_assert(offsetof(MLPH_StorageApi, stats) / sizeof(void*) == 6, "MLPH_StorageApi 1.0 layout changed");
static_assert(offsetof(MLPH_StorageApi, stage) / sizeof(void*) == 7, "MLPH_StorageApi 1.1 layout changed");
static_assert(offsetof(MLPH_HostApi, error_free) / sizeof(void*) == 8, "MLPH_HostApi 1.0 layout changed");

TEST(Abi, HeadersCompileAsC) { EXPECT_EQ(mlph_c_compile_check(), 0); }

TEST(Abi, UniformStreamIsDeterministicAndInRange) {
  // The dropout stream every backend must reproduce: pin a few values so a change is caught.
  EXPECT_FLOAT_EQ(mlph_uniform(0, 0, 0, 0), mlph_uniform(0, 0, 0, 0));
  EXPECT_NE(mlph_uniform(1, 0, 0, 0), mlph_uniform(1, 0, 0, 1));
  EXPECT_NE(mlph_uniform(1, 0, 0, 0), mlph_uniform(1, 1, 0, 0));
  double mean = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const float u = mlph_uniform(7, 3, 2, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    mean += u;
  }
  EXPECT_NEAR(mean / 100000, 0.5, 0.005);
}
