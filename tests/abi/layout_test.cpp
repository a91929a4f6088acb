// Pins the ABI (1.0 and what 1.1-1.5 appended): every table's last member and its offset. A change
// here is an ABI change: append members (and bump MLPH_ABI_MINOR), never move or remove them.
#include <gtest/gtest.h>

#include <cstring>

#include "mlph/plugin.h"
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/workload/workload.hpp"

extern "C" int mlph_c_compile_check(void);

// Last: nothing but the trailing padding follows it.
#define MLPH_LAST_MEMBER(T, m) \
  static_assert(sizeof(T) - MLPH_STRUCT_SIZE(T, m) < alignof(T), #T ": " #m " is not the last member")
MLPH_LAST_MEMBER(MLPH_Plugin, api);
MLPH_LAST_MEMBER(MLPH_HostApi, error_free);
MLPH_LAST_MEMBER(MLPH_BackendApi, read_loss);  // 1.4 appended `read_state`, `write_state` after 1.0's `read_gradient`;
                                                // 1.6 `create_with`, `attributes`, `alloc_input`, `free_input`, `read_loss`
MLPH_LAST_MEMBER(MLPH_BackendCreateArgs, topology);
MLPH_LAST_MEMBER(MLPH_BackendAttributes, deterministic);
MLPH_LAST_MEMBER(MLPH_DeviceCollectives, status);
// 1.2 appended `sample_order`, 1.3 `benchmark_info`, `borrow_hparams`, 1.4 `reference_layout`,
// 1.5 `dataset_read_part`
MLPH_LAST_MEMBER(MLPH_WorkloadApi, dataset_read_part);
MLPH_LAST_MEMBER(MLPH_ExportEntry, perm);
MLPH_LAST_MEMBER(MLPH_SamplePart, n_inputs);
MLPH_LAST_MEMBER(MLPH_BenchmarkInfo, n_hparam_log_keys);
MLPH_LAST_MEMBER(MLPH_CommsApi, halo_accumulate);  // 1.1 appended `halo_exchange` after 1.0's `barrier`, 1.2 `split`,
                                                   // 1.5 `halo_accumulate`
MLPH_LAST_MEMBER(MLPH_HaloSpec, periodic);
MLPH_LAST_MEMBER(MLPH_StorageApi, read_range);  // 1.1 appended `stage` after 1.0's `stats`, 1.4 `abandon`, 1.5 `read_range`
MLPH_LAST_MEMBER(MLPH_StageStats, shard_count);
MLPH_LAST_MEMBER(MLPH_Graph, opset);  // 1.3 appended `opset` after 1.0's `seed`
MLPH_LAST_MEMBER(MLPH_StepArgs, defer_loss);  // 1.2 appended micro_step, apply_update after `step`, 1.6 defer_loss
MLPH_LAST_MEMBER(MLPH_WorkloadInfo, n_spatial_dims);  // 1.2 appended gradient_accumulation, 1.3 eval_per_sample,
                                                     // 1.5 spatial_dims, n_spatial_dims
MLPH_LAST_MEMBER(MLPH_Tensor, data);

// Frozen offsets of ABI 1.0 (LP64): function tables are struct_size, ext, then pointers in order.
static_assert(offsetof(MLPH_BackendApi, read_gradient) / sizeof(void*) == 10, "MLPH_BackendApi 1.0 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, generate_data) / sizeof(void*) == 13, "MLPH_WorkloadApi 1.0 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, sample_order) / sizeof(void*) == 14, "MLPH_WorkloadApi 1.2 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, benchmark_info) / sizeof(void*) == 15 &&
                  offsetof(MLPH_WorkloadApi, borrow_hparams) / sizeof(void*) == 16,
              "MLPH_WorkloadApi 1.3 layout changed");
static_assert(offsetof(MLPH_BackendApi, read_state) / sizeof(void*) == 11 &&
                  offsetof(MLPH_BackendApi, write_state) / sizeof(void*) == 12,
              "MLPH_BackendApi 1.4 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, reference_layout) / sizeof(void*) == 17, "MLPH_WorkloadApi 1.4 layout changed");
static_assert(offsetof(MLPH_BackendApi, create_with) / sizeof(void*) == 13 &&
                  offsetof(MLPH_BackendApi, attributes) / sizeof(void*) == 14 &&
                  offsetof(MLPH_BackendApi, alloc_input) / sizeof(void*) == 15 &&
                  offsetof(MLPH_BackendApi, free_input) / sizeof(void*) == 16 &&
                  offsetof(MLPH_BackendApi, read_loss) / sizeof(void*) == 17,
              "MLPH_BackendApi 1.6 layout changed");
static_assert(offsetof(MLPH_BackendCreateArgs, host) == 16 && offsetof(MLPH_BackendCreateArgs, options) == 24 &&
                  offsetof(MLPH_BackendCreateArgs, n_options) == 32 && offsetof(MLPH_BackendCreateArgs, topology) == 40,
              "MLPH_BackendCreateArgs 1.6 layout changed");
static_assert(offsetof(MLPH_BackendAttributes, device) == 16 && offsetof(MLPH_BackendAttributes, device_name) == 24 &&
                  offsetof(MLPH_BackendAttributes, devices_per_node) == 32 &&
                  offsetof(MLPH_BackendAttributes, device_memory_bytes) == 40 &&
                  offsetof(MLPH_BackendAttributes, precision) == 48 &&
                  offsetof(MLPH_BackendAttributes, deterministic) == 56,
              "MLPH_BackendAttributes 1.6 layout changed");
static_assert(offsetof(MLPH_DeviceCollectives, device_type) == 24 && offsetof(MLPH_DeviceCollectives, bind) == 32 &&
                  offsetof(MLPH_DeviceCollectives, status) == 80 && sizeof(MLPH_DeviceCollectives) == 88,
              "MLPH_DeviceCollectives 1.6 layout changed");
static_assert(offsetof(MLPH_ExportEntry, key) == 16 && offsetof(MLPH_ExportEntry, kind) == 24 &&
                  offsetof(MLPH_ExportEntry, ndim) == 28 && offsetof(MLPH_ExportEntry, shape) == 32 &&
                  offsetof(MLPH_ExportEntry, perm) == 96 && sizeof(MLPH_ExportEntry) == 128,
              "MLPH_ExportEntry 1.4 layout changed");
static_assert(offsetof(MLPH_BenchmarkInfo, benchmark) == 16 && offsetof(MLPH_BenchmarkInfo, submission_runs) == 24 &&
                  offsetof(MLPH_BenchmarkInfo, hparam_log_keys) == 32 && offsetof(MLPH_BenchmarkInfo, n_hparam_log_keys) == 40,
              "MLPH_BenchmarkInfo 1.3 layout changed");
static_assert(offsetof(MLPH_CommsApi, barrier) / sizeof(void*) == 8, "MLPH_CommsApi 1.0 layout changed");
static_assert(offsetof(MLPH_CommsApi, halo_exchange) / sizeof(void*) == 9, "MLPH_CommsApi 1.1 layout changed");
static_assert(offsetof(MLPH_CommsApi, split) / sizeof(void*) == 10, "MLPH_CommsApi 1.2 layout changed");
static_assert(offsetof(MLPH_CommsApi, halo_accumulate) / sizeof(void*) == 11, "MLPH_CommsApi 1.5 layout changed");
static_assert(offsetof(MLPH_StorageApi, stats) / sizeof(void*) == 6, "MLPH_StorageApi 1.0 layout changed");
static_assert(offsetof(MLPH_StorageApi, stage) / sizeof(void*) == 7, "MLPH_StorageApi 1.1 layout changed");
static_assert(offsetof(MLPH_StorageApi, abandon) / sizeof(void*) == 8, "MLPH_StorageApi 1.4 layout changed");
static_assert(offsetof(MLPH_StorageApi, read_range) / sizeof(void*) == 9, "MLPH_StorageApi 1.5 layout changed");
static_assert(offsetof(MLPH_WorkloadApi, dataset_read_part) / sizeof(void*) == 18, "MLPH_WorkloadApi 1.5 layout changed");
static_assert(offsetof(MLPH_SamplePart, offsets) == 16 && offsetof(MLPH_SamplePart, n_inputs) == 24,
              "MLPH_SamplePart 1.5 layout changed");
static_assert(offsetof(MLPH_HostApi, error_free) / sizeof(void*) == 8, "MLPH_HostApi 1.0 layout changed");
static_assert(offsetof(MLPH_StepArgs, step) == 24 && offsetof(MLPH_StepArgs, micro_step) == 32 &&
                  offsetof(MLPH_StepArgs, apply_update) == 40,
              "MLPH_StepArgs 1.2 layout changed");
// 1.6's defer_loss fills 1.2's trailing padding (sizeof stays 48): a 1.2-1.5 caller's struct_size
// covers it with garbage, so a backend reads it only from a core of ABI 1.6 or later (host->abi_minor).
static_assert(offsetof(MLPH_StepArgs, defer_loss) == 44 && sizeof(MLPH_StepArgs) == 48, "MLPH_StepArgs 1.6 layout changed");
static_assert(offsetof(MLPH_Graph, seed) == 128 && offsetof(MLPH_Graph, opset) == 136, "MLPH_Graph 1.3 layout changed");
static_assert(offsetof(MLPH_WorkloadInfo, n_log_entries) == 64 && offsetof(MLPH_WorkloadInfo, gradient_accumulation) == 72,
              "MLPH_WorkloadInfo 1.2 layout changed");
// 1.3's eval_per_sample fills 1.2's trailing padding (sizeof stays 80): a 1.2 workload's struct_size
// covers it, so the core reads it only from workloads of ABI 1.3 or later.
static_assert(offsetof(MLPH_WorkloadInfo, eval_per_sample) == 76, "MLPH_WorkloadInfo 1.3 layout changed");
static_assert(offsetof(MLPH_WorkloadInfo, spatial_dims) == 80 && offsetof(MLPH_WorkloadInfo, n_spatial_dims) == 88 &&
                  sizeof(MLPH_WorkloadInfo) == 96,
              "MLPH_WorkloadInfo 1.5 layout changed");

// A caller of ABI 1.0/1.1 sends a StepArgs without the accumulation members: it means "update now".
TEST(Abi, OlderStepArgsMeanOneUpdatePerStep) {
  MLPH_StepArgs args = mlph::sdk::step_args(0.5, 7, 99, false);
  args.struct_size = MLPH_STRUCT_SIZE(MLPH_StepArgs, step);
  const mlph::sdk::StepPlan plan = mlph::sdk::read_step_args(args, "test");
  EXPECT_EQ(plan.micro_step, 7u);
  EXPECT_TRUE(plan.apply_update);
  args.struct_size = sizeof args;
  EXPECT_FALSE(mlph::sdk::read_step_args(args, "test").apply_update);
  EXPECT_EQ(mlph::sdk::read_step_args(args, "test").micro_step, 99u);
  args.struct_size = MLPH_STRUCT_SIZE(MLPH_StepArgs, learning_rate);
  EXPECT_THROW(mlph::sdk::read_step_args(args, "test"), mlph::sdk::Error);
}

// A workload built with 1.2 answering a 1.1 caller writes no more than the caller's struct holds.
TEST(Abi, DescribeFillsNoMoreThanTheCallersStruct) {
  MLPH_WorkloadInfo full{};
  full.struct_size = sizeof full;
  full.max_epochs = 3;
  full.gradient_accumulation = 4;
  struct {
    MLPH_WorkloadInfo info;
    unsigned char canary[8];
  } older{};
  older.info.struct_size = MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, n_log_entries);
  std::memset(older.canary, 0xab, sizeof older.canary);
  std::memset(&older.info.gradient_accumulation, 0xab, sizeof older.info.gradient_accumulation);
  mlph::sdk::copy_info(full, older.info);
  EXPECT_EQ(older.info.struct_size, MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, n_log_entries));
  EXPECT_EQ(older.info.max_epochs, 3u);
  EXPECT_EQ(older.info.gradient_accumulation, 0xababababu) << "beyond the caller's struct_size: untouched";
  MLPH_WorkloadInfo unsized{};  // struct_size 0, as 1.1's core sent it: read as 1.1's size
  mlph::sdk::copy_info(full, unsized);
  EXPECT_EQ(unsized.struct_size, MLPH_STRUCT_SIZE(MLPH_WorkloadInfo, n_log_entries));
  MLPH_WorkloadInfo current{};
  current.struct_size = sizeof current;
  mlph::sdk::copy_info(full, current);
  EXPECT_EQ(current.gradient_accumulation, 4u);
}

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
