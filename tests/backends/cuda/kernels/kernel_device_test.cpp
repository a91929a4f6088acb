// The cuda kernels' launchers (backends/cuda/kernels/launch.hpp) on a GPU, against their bodies run on
// the CPU in the launchers' order (device_order.hpp; math_*_test.cpp checks those bodies against
// the reference). The kernels are built with --fmad=false and this test without fp contraction, so
// +, -, *, /, sqrt and every sum must give the same bits on both sides; only CUDA's transcendental
// functions (log1pf, tanhf, exp, log) differ from glibc's, by an ulp or two, and are compared so.
// Without a GPU the device cases skip, saying why; the launchers' own argument checks and their
// failing cleanly without a GPU run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <vector>

#include "device_order.hpp"
#include "kernels/launch.hpp"

namespace mlph::cuda {
namespace {

using test::each;
using test::each_row_channel;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device copy of a host vector; read() synchronizes (the launchers run on the legacy default stream).
template <class T>
class Device {
 public:
  explicit Device(const std::vector<T>& host) : size_(host.size()) {
    void* memory = nullptr;
    check(cudaMalloc(&memory, bytes() ? bytes() : 1), "cudaMalloc");
    data_ = static_cast<T*>(memory);
    check(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  explicit Device(size_t size, T fill = T{}) : Device(std::vector<T>(size, fill)) {}
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(data_); }
  T* get() const { return data_; }
  std::vector<T> read() const {
    std::vector<T> host(size_);
    check(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
    return host;
  }

 private:
  size_t bytes() const { return size_ * sizeof(T); }
  T* data_ = nullptr;
  size_t size_;
};

struct Workspace : Device<char> {
  explicit Workspace(size_t size) : Device<char>(size), bytes(size) {}
  size_t bytes;
};

using test::random_floats;

// Bit for bit, except that a NaN is any NaN: its payload is the hardware's (the GPU makes 0x7fffffff
// where x86 makes 0xffc00000), and nothing reads it.
template <class T>
void expect_same_bits(const std::vector<T>& actual, const std::vector<T>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(expected[i]) && std::isnan(actual[i])) continue;
    ASSERT_EQ(std::memcmp(&actual[i], &expected[i], sizeof(T)), 0)
        << what << " at " << i << ": the device's " << actual[i] << ", the host's " << expected[i];
  }
}

// Within `ulps` units in the last place (CUDA's log1pf: 1, tanhf: 2, per the CUDA math documentation).
void expect_ulps(const std::vector<float>& actual, const std::vector<float>& expected, int ulps, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(actual[i])) << what << " at " << i;
      continue;
    }
    const auto a = static_cast<int64_t>(std::bit_cast<int32_t>(actual[i]));
    const auto e = static_cast<int64_t>(std::bit_cast<int32_t>(expected[i]));
    ASSERT_LE(std::abs(a - e), ulps) << what << " at " << i << ": the device's " << actual[i] << ", the host's "
                                     << expected[i];
  }
}

void expect_relative(double actual, double expected, double tolerance, const char* what) {
  ASSERT_LE(std::fabs(actual - expected), tolerance * (1.0 + std::fabs(expected)))
      << what << ": the device's " << actual << ", the host's " << expected;
}

// What cudaGetDeviceCount says, or an empty string when a device is there.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  return count == 0 ? "no CUDA device" : "";
}

class CudaKernelLaunchers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = no_device_reason(); !why.empty()) GTEST_SKIP() << "no GPU here (" << why << ")";
  }
  static void ok(cudaError_t e) {
    check(e, "launch");
    check(cudaDeviceSynchronize(), "the kernel");
  }
  static constexpr cudaStream_t kStream = nullptr;
};

// ---- anywhere: argument checks, and a clean error without a GPU ------------------------------------

TEST(CudaKernelLaunchersAnywhere, AWorkspaceTooSmallIsRefusedBeforeAnyLaunch) {
  // Null device pointers: the check comes first, so nothing runs (no GPU needed).
  const int64_t rows = 1000, channels = 40;
  const size_t needed = channel_sums_workspace_bytes(1, rows, channels);
  char* small = reinterpret_cast<char*>(8);
  const float* none = nullptr;  // the fp32 overloads (the bf16 ones check alike: one template)
  EXPECT_EQ(batch_norm_sum(nullptr, rows, channels, none, nullptr, small, needed - 1), cudaErrorInvalidValue);
  EXPECT_EQ(batch_norm_backward_sums(nullptr, rows, channels, none, none, nullptr, nullptr, nullptr, needed),
            cudaErrorInvalidValue);
  EXPECT_EQ(mse_forward(nullptr, 5000, nullptr, nullptr, nullptr, small, flat_sums_workspace_bytes(5000) - 8),
            cudaErrorInvalidValue);
  EXPECT_EQ(iou_forward(nullptr, 3, 10, 4, nullptr, nullptr, nullptr, small, 1 << 20), cudaErrorInvalidValue)
      << "rows must be a multiple of the batch";
  const DeviceChunks chunks{nullptr, 10, nullptr, 3};
  EXPECT_EQ(lamb(nullptr, chunks, nullptr, 1.0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, small,
                 multi_tensor_workspace_bytes(10, 3) - 1, nullptr),
            cudaErrorInvalidValue);
  const std::vector<const float*> inputs(2);
  const std::vector<int64_t> widths(3);
  EXPECT_EQ(concat_forward(nullptr, 4, inputs, widths, nullptr), cudaErrorInvalidValue);
}

TEST(CudaKernelLaunchersAnywhere, WithoutAGpuALaunchReturnsTheRuntimesErrorInsteadOfCrashing) {
  if (no_device_reason().empty()) GTEST_SKIP() << "a GPU is here: the device cases run instead";
  float* nowhere = reinterpret_cast<float*>(64);
  const cudaError_t e = relu_forward(nullptr, 1000, nowhere, nowhere);
  EXPECT_NE(e, cudaSuccess);
  EXPECT_NE(std::string(cudaGetErrorString(e)), "");
}

// ---- on a GPU ------------------------------------------------------------------------------------

constexpr int64_t kN = 3 * 1024 * 1024 + 7;  // more than one pass of the grid-stride loops (8192 blocks)

TEST_F(CudaKernelLaunchers, ElementWiseAndDropoutAreTheBodiesBits) {
  const std::vector<float> x = random_floats(kN, 1, -3.0f, 3.0f), dy = random_floats(kN, 2), dx0 = random_floats(kN, 3);
  const Device<float> dx_in(x), ddy(dy);
  const uint64_t step_value = 77;
  const Device<uint64_t> step(std::vector<uint64_t>{step_value});
  const DropoutStream d = dropout_stream(0.3, 12345, 6);

  struct Case {
    const char* name;
    cudaError_t (*launch)(const float*, const float*, float*, const DropoutStream&, const uint64_t*);
    void (*body)(int64_t, const float*, const float*, float*, const DropoutStream&, const uint64_t*);
    bool accumulates;
  };
  const Case cases[] = {
      {"relu forward", [](const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         return relu_forward(kStream, kN, a, o);
       }, [](int64_t i, const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         relu_forward_at(i, a, o);
       }, false},
      {"relu backward", [](const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return relu_backward(kStream, kN, a, g, o);
       }, [](int64_t i, const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         relu_backward_at(i, a, g, o);
       }, true},
      {"leaky_relu forward", [](const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         return leaky_relu_forward(kStream, kN, 0.3f, a, o);
       }, [](int64_t i, const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         leaky_relu_forward_at(i, 0.3f, a, o);
       }, false},
      {"leaky_relu backward", [](const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return leaky_relu_backward(kStream, kN, 0.3f, a, g, o);
       }, [](int64_t i, const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         leaky_relu_backward_at(i, 0.3f, a, g, o);
       }, true},
      {"tanh backward", [](const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return tanh_backward(kStream, kN, a, g, o);
       }, [](int64_t i, const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         tanh_backward_at(i, a, g, o);
       }, true},
      {"scale forward", [](const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         return scale_forward(kStream, kN, -1.5f, a, o);
       }, [](int64_t i, const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         scale_forward_at(i, -1.5f, a, o);
       }, false},
      {"scale backward", [](const float*, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return scale_backward(kStream, kN, -1.5f, g, o);
       }, [](int64_t i, const float*, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         scale_backward_at(i, -1.5f, g, o);
       }, true},
      {"add", [](const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return add_forward(kStream, kN, a, g, o);
       }, [](int64_t i, const float* a, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         add_forward_at(i, a, g, o);
       }, false},
      {"accumulate", [](const float*, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         return accumulate(kStream, kN, g, o);
       }, [](int64_t i, const float*, const float* g, float* o, const DropoutStream&, const uint64_t*) {
         accumulate_at(i, g, o);
       }, true},
      {"copy", [](const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         return copy(kStream, kN, a, o);
       }, [](int64_t i, const float* a, const float*, float* o, const DropoutStream&, const uint64_t*) {
         o[i] = a[i];
       }, false},
      {"dropout mask", [](const float*, const float*, float* o, const DropoutStream& s, const uint64_t* k) {
         return dropout_mask(kStream, kN, s, k, o);
       }, [](int64_t i, const float*, const float*, float* o, const DropoutStream& s, const uint64_t* k) {
         dropout_mask_at(i, s, k, o);
       }, false},
      {"dropout forward", [](const float* a, const float*, float* o, const DropoutStream& s, const uint64_t* k) {
         return dropout_forward(kStream, kN, s, k, a, o);
       }, [](int64_t i, const float* a, const float*, float* o, const DropoutStream& s, const uint64_t* k) {
         dropout_forward_at(i, s, k, a, o);
       }, false},
      {"dropout backward", [](const float*, const float* g, float* o, const DropoutStream& s, const uint64_t* k) {
         return dropout_backward(kStream, kN, s, k, g, o);
       }, [](int64_t i, const float*, const float* g, float* o, const DropoutStream& s, const uint64_t* k) {
         dropout_backward_at(i, s, k, g, o);
       }, true},
  };
  for (const Case& c : cases) {
    std::vector<float> expected = c.accumulates ? dx0 : std::vector<float>(kN, 0.0f);
    const Device<float> out(expected);
    ok(c.launch(dx_in.get(), ddy.get(), out.get(), d, step.get()));
    each(kN, [&](int64_t i) { c.body(i, x.data(), dy.data(), expected.data(), d, &step_value); });
    expect_same_bits(out.read(), expected, c.name);
  }

  // CUDA's log1pf and tanhf are not glibc's: within their documented error.
  std::vector<float> y(kN), counts_as_float(65536), y16(65536);
  const Device<float> out(kN);
  ok(log1p_forward(kStream, kN, dx_in.get(), out.get()));
  each(kN, [&](int64_t i) { log1p_forward_at(i, x.data(), y.data()); });
  expect_ulps(out.read(), y, 2, "log1p");
  ok(tanh_forward(kStream, kN, dx_in.get(), out.get()));
  each(kN, [&](int64_t i) { tanh_forward_at(i, x.data(), y.data()); });
  expect_ulps(out.read(), y, 3, "tanh");
  std::vector<int16_t> counts(65536);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int16_t>(i);
  const Device<int16_t> dcounts(counts);
  const Device<float> out16(counts.size());
  ok(int16_to_float(kStream, 65536, dcounts.get(), out16.get()));
  each(65536, [&](int64_t i) { int16_to_float_at(i, counts.data(), counts_as_float.data()); });
  expect_same_bits(out16.read(), counts_as_float, "int16 to float");
  ok(log1p_forward(kStream, 65536, dcounts.get(), out16.get()));
  each(65536, [&](int64_t i) { log1p_int16_forward_at(i, counts.data(), y16.data()); });
  expect_ulps(out16.read(), y16, 2, "log1p of int16");
}

TEST_F(CudaKernelLaunchers, ChannelOpsAndTheirSumsAreTheBodiesBits) {
  const int64_t batch = 3, positions = 5000, channels = 67, rows = batch * positions;
  const auto n = static_cast<size_t>(rows * channels);
  const std::vector<float> x = random_floats(n, 10), dy = random_floats(n, 11), dx0 = random_floats(n, 12);
  const std::vector<float> w = random_floats(channels, 13), b = random_floats(channels, 14);
  const std::vector<float> dw0 = random_floats(channels, 15), db0 = random_floats(channels, 16);
  const Device<float> dx_in(x), ddy(dy), dw_in(w), db_in(b);
  Workspace ws(channel_sums_workspace_bytes(batch, positions, channels));

  std::vector<float> y(n);
  const Device<float> out(n);
  ok(channel_affine_forward(kStream, rows, channels, dx_in.get(), dw_in.get(), db_in.get(), out.get()));
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
    channel_affine_forward_at(r, c, channels, x.data(), w.data(), b.data(), y.data());
  });
  expect_same_bits(out.read(), y, "channel_affine forward");

  std::vector<float> dx = dx0, dw = dw0, db = db0;
  const Device<float> ddx(dx0), ddw(dw0), ddb(db0);
  ok(channel_affine_backward(kStream, rows, channels, dx_in.get(), dw_in.get(), ddy.get(), ddx.get(), ddw.get(),
                             ddb.get(), ws.get(), ws.bytes));
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
    channel_affine_backward_data_at(r, c, channels, w.data(), dy.data(), dx.data());
  });
  const std::vector<double> sums =
      test::channel_sums(ChannelAffineParamTerm{x.data(), dy.data(), channels}, 1, rows, channels);
  each(channels, [&](int64_t c) { channel_affine_params_at(c, channels, sums.data(), dw.data(), db.data()); });
  expect_same_bits(ddx.read(), dx, "channel_affine dx");
  expect_same_bits(ddw.read(), dw, "channel_affine dw");
  expect_same_bits(ddb.read(), db, "channel_affine db");

  ok(shift_scale_forward(kStream, rows, channels, dx_in.get(), dw_in.get(), db_in.get(), out.get()));
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
    shift_scale_forward_at(r, c, channels, x.data(), w.data(), b.data(), y.data());
  });
  expect_same_bits(out.read(), y, "shift_scale");

  std::vector<float> pooled(static_cast<size_t>(batch * channels));
  const Device<float> dpooled(pooled.size());
  ok(global_avg_pool_forward(kStream, batch, positions, channels, dx_in.get(), dpooled.get(), ws.get(), ws.bytes));
  const std::vector<double> pool_sums = test::channel_sums(SumTerm{x.data(), channels}, batch, positions, channels);
  each(batch * channels, [&](int64_t i) { global_avg_pool_finish_at(i, positions, pool_sums.data(), pooled.data()); });
  expect_same_bits(dpooled.read(), pooled, "global_avg_pool forward");
  const Device<float> gx(dx0);
  dx = dx0;
  ok(global_avg_pool_backward(kStream, batch, positions, channels, dpooled.get(), gx.get()));
  const float inverse = 1.0f / static_cast<float>(positions);
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
    global_avg_pool_backward_at(r, c, channels, positions, inverse, pooled.data(), dx.data());
  });
  expect_same_bits(gx.read(), dx, "global_avg_pool backward");

  // Broadcast [N,1,1,C] -> [N,50,100,C] and back; concat of three bands and back.
  const BroadcastShape s = broadcast_shape(std::vector<int64_t>{batch, 1, 1, channels},
                                           std::vector<int64_t>{batch, 50, 100, channels});
  ok(broadcast_forward(kStream, s, dpooled.get(), out.get()));
  each_row_channel(s.out_rows(), channels,
                   [&](int64_t r, int64_t c) { broadcast_forward_at(r, c, s, pooled.data(), y.data()); });
  expect_same_bits(out.read(), y, "broadcast forward");
  std::vector<float> back = random_floats(pooled.size(), 17);
  const Device<float> dback(back);
  ok(broadcast_backward(kStream, s, ddy.get(), dback.get()));
  each_row_channel(s.in_rows(), channels,
                   [&](int64_t q, int64_t c) { broadcast_backward_at(q, c, s, dy.data(), back.data()); });
  expect_same_bits(dback.read(), back, "broadcast backward");

  const std::vector<int64_t> widths = {20, 7, 40};  // 67 channels
  const int64_t total = 67;
  std::vector<std::vector<float>> parts;
  std::vector<std::unique_ptr<Device<float>>> dparts;
  std::vector<const float*> inputs;
  std::vector<float*> grads;
  for (size_t k = 0; k < widths.size(); ++k) {
    parts.push_back(random_floats(static_cast<size_t>(rows * widths[k]), 20 + static_cast<uint32_t>(k)));
    dparts.push_back(std::make_unique<Device<float>>(parts.back()));
    inputs.push_back(dparts.back()->get());
    grads.push_back(k == 1 ? nullptr : dparts.back()->get());
  }
  ok(concat_forward(kStream, rows, inputs, widths, out.get()));
  int64_t offset = 0;
  for (size_t k = 0; k < widths.size(); offset += widths[k], ++k)
    each_row_channel(rows, widths[k], [&](int64_t r, int64_t c) {
      copy_columns_at(r, c, widths[k], parts[k].data(), total, offset, y.data());
    });
  expect_same_bits(out.read(), y, "concat forward");
  ok(concat_backward(kStream, rows, grads, widths, ddy.get()));
  offset = 0;
  for (size_t k = 0; k < widths.size(); offset += widths[k], ++k) {
    if (k == 1) continue;
    each_row_channel(rows, widths[k], [&](int64_t r, int64_t c) {
      add_columns_at(r, c, widths[k], dy.data(), total, offset, parts[k].data());
    });
    expect_same_bits(dparts[k]->read(), parts[k], "concat backward");
  }
  expect_same_bits(dparts[1]->read(), random_floats(static_cast<size_t>(rows * widths[1]), 21), "concat: no gradient");
}

TEST_F(CudaKernelLaunchers, BatchNormPassesAreTheBodiesBitsAndRepeat) {
  const int64_t rows = 2 * 96 * 144, channels = 64;  // a DeepCAM-like shape, scaled down
  const auto n = static_cast<size_t>(rows * channels);
  const std::vector<float> x = random_floats(n, 30, 0.5f, 3.0f), dy = random_floats(n, 31);
  const std::vector<float> gamma = random_floats(channels, 32), beta = random_floats(channels, 33);
  const std::vector<float> rm0 = random_floats(channels, 34), rv0 = random_floats(channels, 35, 0.5f, 2.0f);
  const Device<float> dx_in(x), ddy(dy), dgamma_in(gamma), dbeta_in(beta), rm(rm0), rv(rv0);
  const Device<double> stats(static_cast<size_t>(2 * channels + 1)), stats_again(static_cast<size_t>(2 * channels + 1));
  const Device<float> saved(static_cast<size_t>(2 * channels)), scale_shift(static_cast<size_t>(2 * channels));
  const Device<float> out(n);
  Workspace ws(channel_sums_workspace_bytes(1, rows, channels));
  const double eps = 1e-5, momentum = 0.1;

  ok(batch_norm_sum(kStream, rows, channels, dx_in.get(), stats.get(), ws.get(), ws.bytes));
  ok(batch_norm_variance(kStream, rows, channels, dx_in.get(), stats.get(), ws.get(), ws.bytes));
  ok(batch_norm_finalize(kStream, channels, eps, momentum, stats.get(), dgamma_in.get(), dbeta_in.get(), rm.get(),
                         rv.get(), saved.get(), scale_shift.get()));
  ok(batch_norm_apply(kStream, rows, channels, dx_in.get(), scale_shift.get(), out.get()));
  // The same statistics again: deterministic sums.
  ok(batch_norm_sum(kStream, rows, channels, dx_in.get(), stats_again.get(), ws.get(), ws.bytes));
  ok(batch_norm_variance(kStream, rows, channels, dx_in.get(), stats_again.get(), ws.get(), ws.bytes));
  expect_same_bits(stats_again.read(), stats.read(), "batch_norm statistics, twice");

  std::vector<double> host_stats(static_cast<size_t>(2 * channels + 1));
  const std::vector<double> sum = test::channel_sums(SumTerm{x.data(), channels}, 1, rows, channels);
  std::copy(sum.begin(), sum.end(), host_stats.begin());
  host_stats[static_cast<size_t>(channels)] = static_cast<double>(rows);
  each(channels, [&](int64_t c) { batch_norm_mean_at(c, channels, host_stats.data()); });
  const std::vector<double> deviations =
      test::channel_sums(BatchNormDeviationTerm{x.data(), host_stats.data(), channels}, 1, rows, channels);
  std::copy(deviations.begin(), deviations.end(), host_stats.begin() + channels + 1);
  expect_same_bits(stats.read(), host_stats, "batch_norm statistics");
  std::vector<float> host_rm = rm0, host_rv = rv0, host_saved(2 * channels), host_ss(2 * channels), y(n);
  each(channels, [&](int64_t c) {
    batch_norm_finalize_at(c, channels, eps, momentum, host_stats.data(), gamma.data(), beta.data(), host_rm.data(),
                           host_rv.data(), host_saved.data(), host_ss.data());
  });
  each_row_channel(rows, channels,
                   [&](int64_t r, int64_t c) { batch_norm_apply_at(r, c, channels, x.data(), host_ss.data(), y.data()); });
  expect_same_bits(saved.read(), host_saved, "batch_norm saved");
  expect_same_bits(rm.read(), host_rm, "batch_norm running_mean");
  expect_same_bits(rv.read(), host_rv, "batch_norm running_var");
  expect_same_bits(out.read(), y, "batch_norm y");
  // One pass (backend.batch_norm=one_pass): the moments as the host sums them, then the same outputs.
  const Device<double> moments(static_cast<size_t>(2 * channels + 1));
  const Device<float> rm1(rm0), rv1(rv0), saved1(static_cast<size_t>(2 * channels));
  ok(batch_norm_moments(kStream, rows, channels, dx_in.get(), moments.get(), ws.get(), ws.bytes));
  ok(batch_norm_finalize_moments(kStream, channels, eps, momentum, moments.get(), dgamma_in.get(), dbeta_in.get(),
                                 rm1.get(), rv1.get(), saved1.get(), scale_shift.get()));
  std::vector<double> host_moments = test::channel_sums(BatchNormMomentsTerm{x.data(), channels}, 1, rows, channels);
  host_moments.push_back(static_cast<double>(rows));
  expect_same_bits(moments.read(), host_moments, "batch_norm moments");
  std::vector<float> one_rm = rm0, one_rv = rv0, one_saved(2 * channels), one_ss(2 * channels);
  each(channels, [&](int64_t c) {
    batch_norm_finalize_moments_at(c, channels, eps, momentum, host_moments.data(), gamma.data(), beta.data(),
                                   one_rm.data(), one_rv.data(), one_saved.data(), one_ss.data());
  });
  expect_same_bits(saved1.read(), one_saved, "batch_norm saved, one pass");
  expect_same_bits(rv1.read(), one_rv, "batch_norm running_var, one pass");
  expect_same_bits(scale_shift.read(), one_ss, "batch_norm scale and shift, one pass");

  ok(batch_norm_eval_coefficients(kStream, channels, eps, dgamma_in.get(), dbeta_in.get(), rm.get(), rv.get(),
                                  scale_shift.get()));
  each(channels, [&](int64_t c) {
    batch_norm_eval_coefficients_at(c, channels, eps, gamma.data(), beta.data(), host_rm.data(), host_rv.data(),
                                    host_ss.data());
  });
  expect_same_bits(scale_shift.read(), host_ss, "batch_norm evaluation scale and shift");

  // Backward.
  const Device<double> sums(static_cast<size_t>(2 * channels + 1));
  const std::vector<float> dx0 = random_floats(n, 36), dg0 = random_floats(channels, 37), db0 = random_floats(channels, 38);
  const Device<float> ddx(dx0), ddg(dg0), ddb(db0), coefficients(static_cast<size_t>(3 * channels));
  ok(batch_norm_backward_sums(kStream, rows, channels, dx_in.get(), ddy.get(), saved.get(), sums.get(), ws.get(),
                              ws.bytes));
  ok(batch_norm_backward_params(kStream, channels, sums.get(), ddg.get(), ddb.get()));
  ok(batch_norm_backward_data(kStream, rows, channels, dx_in.get(), ddy.get(), dgamma_in.get(), saved.get(), sums.get(),
                              coefficients.get(), ddx.get()));
  std::vector<double> host_sums =
      test::channel_sums(BatchNormBackwardTerm{x.data(), dy.data(), host_saved.data(), channels}, 1, rows, channels);
  host_sums.push_back(static_cast<double>(rows));
  std::vector<float> dx = dx0, dg = dg0, db = db0, host_coefficients(3 * channels);
  each(channels, [&](int64_t c) { batch_norm_backward_params_at(c, channels, host_sums.data(), dg.data(), db.data()); });
  each(channels, [&](int64_t c) {
    batch_norm_backward_coefficients_at(c, channels, host_sums.data(), gamma.data(), host_saved.data(),
                                        host_coefficients.data());
  });
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) {
    batch_norm_backward_data_at(r, c, channels, x.data(), dy.data(), host_saved.data(), host_coefficients.data(),
                                dx.data());
  });
  expect_same_bits(sums.read(), host_sums, "batch_norm backward sums");
  expect_same_bits(ddg.read(), dg, "batch_norm dgamma");
  expect_same_bits(ddb.read(), db, "batch_norm dbeta");
  expect_same_bits(ddx.read(), dx, "batch_norm dx");
}

// CosmoFlow's 2x2x2 / 2 (windows that tile and cover x) and overlapping 2-D windows.
const PoolShape kPoolShapes[] = {PoolShape{4, 4, {16, 16, 16}, {8, 8, 8}, {2, 2, 2}, {2, 2, 2}},
                                 PoolShape{2, 32, {1, 65, 97}, {1, 32, 48}, {1, 3, 3}, {1, 2, 2}}};

TEST_F(CudaKernelLaunchers, MaxPoolIsTheBodiesBits) {
  for (const PoolShape& s : kPoolShapes) {
    std::mt19937 gen(40);
    std::vector<float> x(static_cast<size_t>(s.in_positions() * s.channels));
    for (float& v : x) v = static_cast<float>(gen() % 5);
    for (size_t i = 3; i < x.size(); i += 101) x[i] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> dy = random_floats(static_cast<size_t>(s.out_positions() * s.channels), 41);
    const std::vector<float> dx0 = random_floats(x.size(), 42);
    const Device<float> dx_in(x), ddy(dy), out(dy.size()), ddx(dx0);
    std::vector<float> y(dy.size()), dx = dx0;
    ok(max_pool_forward(kStream, s, dx_in.get(), out.get()));
    ok(max_pool_backward(kStream, s, dx_in.get(), ddy.get(), ddx.get()));
    each_row_channel(s.out_positions(), s.channels,
                     [&](int64_t pos, int64_t c) { max_pool_forward_at(pos, c, s, x.data(), y.data()); });
    each_row_channel(s.in_positions(), s.channels,
                     [&](int64_t p, int64_t c) { max_pool_backward_at(p, c, s, x.data(), dy.data(), dx.data()); });
    expect_same_bits(out.read(), y, "max_pool forward");
    expect_same_bits(ddx.read(), dx, "max_pool backward");
  }
}

// Issue 33: the depthwise conv (4 channels at once where C % 4 == 0, else 1) and the fused batch-norm +
// ReLU and add + ReLU, against their bodies run here in the launchers' order.
TEST_F(CudaKernelLaunchers, DepthwiseAndFusedKernelsAreTheBodiesBits) {
  for (const int64_t channels : {int64_t{12}, int64_t{13}}) {
    DepthwiseShape s;
    s.batch = 2, s.channels = channels, s.bias = true;
    s.in[1] = 37, s.in[2] = 29, s.kernel[1] = s.kernel[2] = 3;
    s.stride[1] = s.stride[2] = 2, s.dilation[1] = s.dilation[2] = 2, s.pad[1] = s.pad[2] = 2;
    s.out[1] = (37 + 4 - 4 - 1) / 2 + 1, s.out[2] = (29 + 4 - 4 - 1) / 2 + 1;
    const int64_t c = channels, in = s.in_positions() * c, out = s.out_positions() * c, w_size = s.taps() * c;
    const std::vector<float> x = random_floats(static_cast<size_t>(in), 60), w = random_floats(static_cast<size_t>(w_size), 61);
    const std::vector<float> b = random_floats(static_cast<size_t>(c), 62), dy = random_floats(static_cast<size_t>(out), 63);
    const std::vector<float> dx0 = random_floats(static_cast<size_t>(in), 64), dw0 = random_floats(static_cast<size_t>(w_size), 65);
    const Device<float> dx_(x), dw_(w), db_(b), ddy(dy), dout(static_cast<size_t>(out)), ddx(dx0), ddw(dw0), ddb(b);
    const Workspace ws(depthwise_workspace_bytes(s));
    ok(depthwise_forward(kStream, s, dx_.get(), dw_.get(), db_.get(), dout.get()));
    ok(depthwise_backward_data(kStream, s, dw_.get(), ddy.get(), ddx.get()));
    ok(depthwise_backward_weights(kStream, s, dx_.get(), ddy.get(), ddw.get(), ddb.get(), ws.get(), ws.bytes));
    std::vector<float> y(static_cast<size_t>(out)), dx = dx0, dw = dw0, db = b;
    each_row_channel(s.out_positions(), c, [&](int64_t p, int64_t ch) {
      depthwise_forward_at<1>(p, ch, s, x.data(), w.data(), b.data(), y.data());
    });
    each_row_channel(s.in_positions(), c, [&](int64_t p, int64_t ch) {
      depthwise_backward_data_at<1>(p, ch, s, w.data(), dy.data(), dx.data());
    });
    const std::vector<double> sums =  // the launcher's: 3x3, all taps per channel at once
        test::channel_sums(Depthwise3x3WeightTerm{s, x.data(), dy.data()}, 1, s.out_positions(), c);
    test::each(w_size, [&](int64_t j) { depthwise_weight_add_at(j, sums.data(), dw.data()); });
    const std::vector<double> bias_sums = test::channel_sums(SumTerm{dy.data(), c}, 1, s.out_positions(), c);
    test::each(c, [&](int64_t ch) { bias_backward_at(ch, bias_sums.data(), db.data()); });
    expect_same_bits(dout.read(), y, "depthwise forward");
    expect_same_bits(ddx.read(), dx, "depthwise dx");
    expect_same_bits(ddw.read(), dw, "depthwise dw");
    expect_same_bits(ddb.read(), db, "depthwise db");

    const int64_t rows = 4099;  // fused: [rows, C]
    const std::vector<float> a = random_floats(static_cast<size_t>(rows * c), 66), a2 = random_floats(a.size(), 67);
    const std::vector<float> g = random_floats(a.size(), 68), scale_shift = random_floats(static_cast<size_t>(2 * c), 69);
    const Device<float> da(a), da2(a2), dg(g), dss(scale_shift), dy1(a.size()), dy2(a.size()), dsum1(a), dsum2(a2);
    ok(batch_norm_relu_apply(kStream, rows, c, da.get(), dss.get(), dy1.get()));
    ok(add_relu_forward(kStream, rows, c, da.get(), da2.get(), dy2.get()));
    std::vector<float> y1(a.size()), y2(a.size()), s1 = a, s2 = a2;
    test::each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_relu_apply_at<1>(r, ch, c, a.data(), scale_shift.data(), y1.data());
      add_relu_forward_at<1>(r, ch, c, a.data(), a2.data(), y2.data());
    });
    ok(add_relu_backward(kStream, rows, c, dy2.get(), dg.get(), dsum1.get(), dsum2.get()));
    test::each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      add_relu_backward_at<1>(r, ch, c, y2.data(), g.data(), s1.data(), s2.data());
    });
    expect_same_bits(dy1.read(), y1, "batch norm + relu");
    expect_same_bits(dy2.read(), y2, "add + relu");
    expect_same_bits(dsum1.read(), s1, "add + relu da");
    expect_same_bits(dsum2.read(), s2, "add + relu db");
  }
}

std::vector<uint16_t> bits_of(const std::vector<Bf16>& v) {
  std::vector<uint16_t> out;
  for (const Bf16& h : v) out.push_back(h.bits);
  return out;
}
std::vector<Bf16> random_bf16(size_t n, uint32_t seed) {
  std::vector<Bf16> out;
  for (float f : random_floats(n, seed)) out.push_back(Bf16{float_to_bfloat16(f)});
  return out;
}

// Max pooling on bf16 storage (pool_chain=off), and its first writer where the windows cover x.
TEST_F(CudaKernelLaunchers, Bf16MaxPoolIsTheBodiesBits) {
  for (const PoolShape& s : kPoolShapes) {
    const auto in = static_cast<size_t>(s.in_positions() * s.channels), out = static_cast<size_t>(s.out_positions() * s.channels);
    const std::vector<Bf16> x = random_bf16(in, 43), dy = random_bf16(out, 44);
    const Device<Bf16> bx(x), bdy(dy), by(out), bdx(in, Bf16{0x4000});
    std::vector<Bf16> y(out), dx(in, Bf16{0});
    const bool first = pool_windows_cover(s);
    ok(max_pool_forward(kStream, s, bx.get(), by.get()));
    if (first) {
      ok(max_pool_backward(kStream, s, bx.get(), bdy.get(), bdx.get(), false));
      each_row_channel(s.out_positions(), s.channels,
                       [&](int64_t pos, int64_t c) { max_pool_backward_tiled_at(pos, c, s, x.data(), dy.data(), dx.data()); });
    } else {
      EXPECT_EQ(max_pool_backward(kStream, s, bx.get(), bdy.get(), bdx.get(), false), cudaErrorInvalidValue);
      dx.assign(in, Bf16{0x4000});
      ok(max_pool_backward(kStream, s, bx.get(), bdy.get(), bdx.get()));
      each_row_channel(s.in_positions(), s.channels,
                       [&](int64_t p, int64_t c) { max_pool_backward_at(p, c, s, x.data(), dy.data(), dx.data()); });
    }
    each_row_channel(s.out_positions(), s.channels,
                     [&](int64_t pos, int64_t c) { max_pool_forward_at(pos, c, s, x.data(), y.data()); });
    expect_same_bits(bits_of(by.read()), bits_of(y), "bf16 max_pool forward");
    expect_same_bits(bits_of(bdx.read()), bits_of(dx), first ? "bf16 max_pool backward, written first" : "bf16 max_pool backward");
  }
}

// The same kernels on bf16 storage (8 channels, 16 bytes, at once where C % 8 == 0), against their bodies.
TEST_F(CudaKernelLaunchers, Bf16StorageKernelsAreTheBodiesBits) {
  for (const int64_t c : {int64_t{16}, int64_t{13}}) {
    DepthwiseShape s;
    s.batch = 2, s.channels = c, s.bias = true;
    s.in[1] = 21, s.in[2] = 17, s.kernel[1] = s.kernel[2] = 3, s.stride[1] = s.stride[2] = 2, s.pad[1] = s.pad[2] = 1;
    s.out[1] = (21 + 2 - 2 - 1) / 2 + 1, s.out[2] = (17 + 2 - 2 - 1) / 2 + 1;
    const auto in = static_cast<size_t>(s.in_positions() * c), out = static_cast<size_t>(s.out_positions() * c);
    const std::vector<Bf16> x = random_bf16(in, 70), dy = random_bf16(out, 71), dx0 = random_bf16(in, 72);
    const std::vector<float> w = random_floats(static_cast<size_t>(s.taps() * c), 73), b = random_floats(static_cast<size_t>(c), 74);
    const Device<Bf16> dx_(x), ddy(dy), dout(out), ddx(dx0);
    const Device<float> dw_(w), db_(b);
    ok(depthwise_forward(kStream, s, dx_.get(), dw_.get(), db_.get(), dout.get()));
    ok(depthwise_backward_data(kStream, s, dw_.get(), ddy.get(), ddx.get()));
    std::vector<Bf16> y(out), dx = dx0;
    each_row_channel(s.out_positions(), c, [&](int64_t p, int64_t ch) {
      depthwise_forward_at<1>(p, ch, s, x.data(), w.data(), b.data(), y.data());
    });
    each_row_channel(s.in_positions(), c, [&](int64_t p, int64_t ch) {
      depthwise_backward_data_at<1>(p, ch, s, w.data(), dy.data(), dx.data());
    });
    expect_same_bits(bits_of(dout.read()), bits_of(y), "bf16 depthwise forward");
    expect_same_bits(bits_of(ddx.read()), bits_of(dx), "bf16 depthwise dx");
    const Device<Bf16> biased(x);  // a conv's bias added to its bf16 y in place
    ok(bias_forward(kStream, s.in_positions(), c, db_.get(), biased.get()));
    std::vector<Bf16> biased_host = x;
    each_row_channel(s.in_positions(), c, [&](int64_t r, int64_t ch) { bias_forward_at(r, ch, c, b.data(), biased_host.data()); });
    expect_same_bits(bits_of(biased.read()), bits_of(biased_host), "bf16 bias forward");

    const int64_t rows = 2053;
    const size_t n = static_cast<size_t>(rows * c);
    const std::vector<Bf16> a = random_bf16(n, 75), a2 = random_bf16(n, 76), g = random_bf16(n, 77);
    const std::vector<float> scale_shift = random_floats(static_cast<size_t>(2 * c), 78);
    const Device<Bf16> da(a), da2(a2), dg(g), dy1(n), dy2(n), dsum1(a), dsum2(a2);
    const Device<float> dss(scale_shift);
    ok(batch_norm_relu_apply(kStream, rows, c, da.get(), dss.get(), dy1.get()));
    ok(add_relu_forward(kStream, rows, c, da.get(), da2.get(), dy2.get()));
    ok(add_relu_backward(kStream, rows, c, dy2.get(), dg.get(), dsum1.get(), dsum2.get()));
    std::vector<Bf16> y1(n), y2(n), s1 = a, s2 = a2;
    test::each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      batch_norm_relu_apply_at<1>(r, ch, c, a.data(), scale_shift.data(), y1.data());
      add_relu_forward_at<1>(r, ch, c, a.data(), a2.data(), y2.data());
    });
    test::each_row_channel(rows, c, [&](int64_t r, int64_t ch) {
      add_relu_backward_at<1>(r, ch, c, y2.data(), g.data(), s1.data(), s2.data());
    });
    expect_same_bits(bits_of(dy1.read()), bits_of(y1), "bf16 batch norm + relu");
    expect_same_bits(bits_of(dy2.read()), bits_of(y2), "bf16 add + relu");
    expect_same_bits(bits_of(dsum1.read()), bits_of(s1), "bf16 add + relu da");
    expect_same_bits(bits_of(dsum2.read()), bits_of(s2), "bf16 add + relu db");
  }
}

// Issue 33 item 5: CosmoFlow's bias + leaky ReLU + max-pool (one thread per window and channel) against
// its body here, fp32 and bf16: with a ragged edge (dz zeroed there by the launcher) and without, a NaN
// in the bias, ties from a coarse grid of values.
TEST_F(CudaKernelLaunchers, PoolChainIsTheBodiesBits) {
  for (const bool ragged : {false, true}) {
    PoolChainShape s;
    s.batch = 2, s.channels = s.channel_block = ragged ? 13 : 32, s.alpha = 0.3f;
    for (int d = 0; d < 3; ++d) s.in[d] = ragged ? 9 + d : 8, s.kernel[d] = 2, s.out[d] = s.in[d] / 2;
    const auto zn = static_cast<size_t>(s.batch * s.in[0] * s.in[1] * s.in[2] * s.channels);
    const auto yn = static_cast<size_t>(s.out_positions() * s.channels);
    std::mt19937 gen(80);
    std::vector<float> z(zn), dy = random_floats(yn, 81), bias = random_floats(static_cast<size_t>(s.channels), 82);
    for (float& v : z) v = 0.25f * static_cast<float>(static_cast<int>(gen() % 13) - 6);
    bias[1] = std::numeric_limits<float>::quiet_NaN();
    const Device<float> dz_in(z), db(bias), ddy(dy), dout(yn), ddz(zn, -5.0f);
    const Device<uint8_t> dwin(yn);
    ok(pool_chain_forward(kStream, s, dz_in.get(), db.get(), dout.get(), dwin.get()));
    ok(pool_chain_backward(kStream, s, dz_in.get(), db.get(), ddy.get(), dwin.get(), ddz.get()));
    std::vector<float> y(yn), dz(zn, 0.0f);
    std::vector<uint8_t> winner(yn);
    each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
      chain_pool_forward_at(pos, c, s, z.data(), bias.data(), y.data(), winner.data());
    });
    each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
      chain_pool_backward_at(pos, c, s, z.data(), bias.data(), dy.data(), winner.data(), dz.data());
    });
    expect_same_bits(dout.read(), y, "pool chain forward");
    expect_same_bits(dwin.read(), winner, "pool chain winners");
    expect_same_bits(ddz.read(), dz, "pool chain backward");
    // bf16 storage
    std::vector<Bf16> zb(zn), dyb(yn), yb(yn), dzb(zn, Bf16{0});
    for (size_t i = 0; i < zn; ++i) zb[i] = Bf16{float_to_bfloat16(z[i])};
    for (size_t i = 0; i < yn; ++i) dyb[i] = Bf16{float_to_bfloat16(dy[i])};
    const Device<Bf16> bz(zb), bdy(dyb), bout(yn), bdz(zn, Bf16{0x4000});
    ok(pool_chain_forward(kStream, s, bz.get(), db.get(), bout.get(), dwin.get()));
    ok(pool_chain_backward(kStream, s, bz.get(), db.get(), bdy.get(), dwin.get(), bdz.get()));
    each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
      chain_pool_forward_at(pos, c, s, zb.data(), bias.data(), yb.data(), winner.data());
    });
    each_row_channel(s.out_positions(), s.channels, [&](int64_t pos, int64_t c) {
      chain_pool_backward_at(pos, c, s, zb.data(), bias.data(), dyb.data(), winner.data(), dzb.data());
    });
    expect_same_bits(bits_of(bout.read()), bits_of(yb), "bf16 pool chain forward");
    expect_same_bits(bits_of(bdz.read()), bits_of(dzb), "bf16 pool chain backward");
  }
}

TEST_F(CudaKernelLaunchers, LossesAndIouMatchTheBodies) {
  const int64_t n = 1'000'003;
  const std::vector<float> p = random_floats(n, 50), t = random_floats(n, 51);
  const Device<float> dp_in(p), dt_in(t), loss(1), dloss(std::vector<float>{0.5f});
  Workspace ws(flat_sums_workspace_bytes(n));
  ok(mse_forward(kStream, n, dp_in.get(), dt_in.get(), loss.get(), ws.get(), ws.bytes));
  expect_same_bits(loss.read(), {mse_loss(test::flat_sums(MseTerm{p.data(), t.data()}, n)[0], n)}, "mse");
  ok(abs_error_sum(kStream, n, dp_in.get(), dt_in.get(), loss.get(), ws.get(), ws.bytes));
  expect_same_bits(loss.read(), {static_cast<float>(test::flat_sums(AbsErrorTerm{p.data(), t.data()}, n)[0])},
                   "abs_error_sum");
  const std::vector<float> g0 = random_floats(n, 52);
  std::vector<float> gp = g0, gt = g0;
  const Device<float> dgp(g0), dgt(g0);
  const float half = 0.5f;
  ok(mse_backward(kStream, n, dp_in.get(), dt_in.get(), dloss.get(), dgp.get(), dgt.get()));
  each(n, [&](int64_t i) { mse_backward_at(i, n, &half, p.data(), t.data(), gp.data(), gt.data()); });
  expect_same_bits(dgp.read(), gp, "mse backward, prediction");
  expect_same_bits(dgt.read(), gt, "mse backward, target");
  ok(mse_backward(kStream, n, dp_in.get(), dt_in.get(), dloss.get(), dgp.get(), dgt.get(), 3u));  // both written first
  std::fill(gp.begin(), gp.end(), 0.0f), std::fill(gt.begin(), gt.end(), 0.0f);
  each(n, [&](int64_t i) { mse_backward_at(i, n, &half, p.data(), t.data(), gp.data(), gt.data()); });
  expect_same_bits(dgp.read(), gp, "mse backward, prediction written first");
  expect_same_bits(dgt.read(), gt, "mse backward, target written first");

  // DeepCAM's 3 classes: exp and log are CUDA's on the device.
  const int64_t rows = 400'001, classes = 3;
  const std::vector<float> logits = random_floats(static_cast<size_t>(rows * classes), 53, -5.0f, 5.0f);
  std::mt19937 gen(54);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int32_t& l : labels) l = static_cast<int32_t>(gen() % classes);
  const std::vector<float> weights = {0.5f, 2.0f, 7.0f};
  const Device<float> dlogits_in(logits), dweights(weights);
  const Device<int32_t> dlabels(labels);
  Workspace ce_ws(flat_sums_workspace_bytes(rows));
  ok(softmax_cross_entropy_forward(kStream, rows, classes, dlogits_in.get(), dlabels.get(), dweights.get(), loss.get(),
                                   ce_ws.get(), ce_ws.bytes));
  const float expected_loss = softmax_cross_entropy_loss(
      test::flat_sums(SoftmaxCrossEntropyTerm{logits.data(), labels.data(), weights.data(), classes}, rows)[0], rows);
  expect_relative(loss.read()[0], expected_loss, 1e-6, "softmax_cross_entropy (CUDA's exp and log)");
  const std::vector<float> dz0 = random_floats(logits.size(), 55);
  std::vector<float> dz = dz0;
  const Device<float> ddz(dz0);
  ok(softmax_cross_entropy_backward(kStream, rows, classes, dlogits_in.get(), dlabels.get(), dweights.get(),
                                    dloss.get(), ddz.get()));
  each(rows, [&](int64_t r) {
    softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &half, dz.data());
  });
  const std::vector<float> device_dz = ddz.read();
  for (size_t i = 0; i < dz.size(); ++i)
    expect_relative(device_dz[i], dz[i], 1e-6, "softmax_cross_entropy backward (CUDA's exp and log)");
  ok(softmax_cross_entropy_backward(kStream, rows, classes, dlogits_in.get(), dlabels.get(), dweights.get(),
                                    dloss.get(), ddz.get(), false));  // the first writer: what dz held is gone
  std::vector<float> written(dz.size(), 0.0f);
  each(rows, [&](int64_t r) {
    softmax_cross_entropy_backward_at(r, rows, classes, logits.data(), labels.data(), weights.data(), &half,
                                      written.data());
  });
  const std::vector<float> device_written = ddz.read();
  for (size_t i = 0; i < written.size(); ++i)
    expect_relative(device_written[i], written[i], 1e-6, "softmax_cross_entropy backward written first");

  const int64_t batch = 4;
  const Device<float> iou(static_cast<size_t>(batch));
  Workspace iou_ws(channel_sums_workspace_bytes(batch, rows / batch, classes));
  ASSERT_EQ(iou_forward(kStream, batch, rows, classes, dlogits_in.get(), dlabels.get(), iou.get(), iou_ws.get(),
                        iou_ws.bytes),
            cudaErrorInvalidValue)
      << "400001 rows are not 4 samples";
  const int64_t whole = rows - 1;
  ok(iou_forward(kStream, batch, whole, classes, dlogits_in.get(), dlabels.get(), iou.get(), iou_ws.get(), iou_ws.bytes));
  const std::vector<double> counts =
      test::channel_sums(IouCountTerm{logits.data(), labels.data(), classes}, batch, whole / batch, classes);
  std::vector<float> expected_iou(batch);
  each(batch, [&](int64_t i) { iou_finish_at(i, classes, counts.data(), expected_iou.data()); });
  expect_same_bits(iou.read(), expected_iou, "iou");

  const Device<int64_t> first(1);
  ok(find_bad_label(kStream, rows, dlabels.get(), classes, first.get()));
  EXPECT_EQ(first.read()[0], -1);
  labels[1234] = 3, labels[99999] = -1;
  const Device<int32_t> bad(labels);
  ok(find_bad_label(kStream, rows, bad.get(), classes, first.get()));
  EXPECT_EQ(first.read()[0], 1234);
}

TEST_F(CudaKernelLaunchers, OptimizersOverChunkedBuffersAreTheBodiesBits) {
  const std::vector<TensorSlice> slices = {{0, 5}, {5, 300000}, {300005, 1}, {300006, 150000}};
  const int64_t n = 450006;
  const ChunkTable table = make_chunks(slices, kOptimizerChunk);
  const Device<Chunk> dchunks(table.chunks);
  const Device<int64_t> dfirst(table.first_chunk);
  const DeviceChunks chunks{dchunks.get(), static_cast<int64_t>(table.chunks.size()), dfirst.get(),
                            static_cast<int32_t>(slices.size())};
  const std::vector<double> decay = {0.01, 0.0, 0.005, 0.01};
  const std::vector<float> g = random_floats(static_cast<size_t>(n), 60), w0 = random_floats(static_cast<size_t>(n), 61);
  const std::vector<float> m0 = random_floats(static_cast<size_t>(n), 62), v0 = random_floats(static_cast<size_t>(n), 63, 0.0f, 1.0f);
  const Device<float> dg(g);
  Workspace ws(multi_tensor_workspace_bytes(chunks.count, chunks.tensors));
  const double nonfinite_count = 1;
  const Device<double> overflow(std::vector<double>{nonfinite_count});

  {  // SGD, and its skip on overflow
    const SgdScalars k = sgd_scalars(0.05, 0.9);
    const Device<SgdScalars> dk(std::vector<SgdScalars>{k});
    const Device<float> w(w0), velocity(m0);
    ok(sgd_keras(kStream, chunks, dk.get(), nullptr, dg.get(), velocity.get(), w.get(), nullptr));
    std::vector<float> hw = w0, hv = m0;
    each(n, [&](int64_t i) { sgd_keras_at(i, k, g.data(), hv.data(), hw.data()); });
    expect_same_bits(w.read(), hw, "sgd_keras weights");
    expect_same_bits(velocity.read(), hv, "sgd_keras velocity");
    ok(sgd_keras(kStream, chunks, dk.get(), nullptr, dg.get(), velocity.get(), w.get(), overflow.get()));
    expect_same_bits(w.read(), hw, "sgd_keras skipped on overflow");
  }
  for (bool decoupled : {false, true}) {  // Adam, AdamW
    std::vector<AdamScalars> k;
    for (double dcy : decay) k.push_back(adam_scalars(1e-3, 0.9, 0.999, 1e-8, 5, dcy, decoupled));
    const Device<AdamScalars> dk(k);
    const Device<float> w(w0), m(m0), v(v0);
    // the half copies written in the same pass: tensor 1 in bf16 (odd length: a scalar tail), tensor 3
    // in fp16, padded (rows of 3 as rows of 8: 50000 rows; the padding's zeros stay)
    const Device<uint16_t> half1(static_cast<size_t>(slices[1].count)), half3(std::vector<uint16_t>(400000, 0));
    std::vector<HalfCopy> halves(slices.size());
    halves[1] = {half1.get(), slices[1].offset, FloatType::bf16, 0, 0};
    halves[3] = {half3.get(), slices[3].offset, FloatType::f16, 3, 8};
    const Device<HalfCopy> dhalves(halves);
    ok(adam(kStream, chunks, dk.get(), dhalves.get(), dg.get(), m.get(), v.get(), w.get(), nullptr));
    std::vector<float> hw = w0, hm = m0, hv = v0;
    for (const Chunk& c : table.chunks)
      for (int64_t i = c.begin; i < c.end; ++i)
        adam_at(i, k[static_cast<size_t>(c.tensor)], g.data(), hm.data(), hv.data(), hw.data());
    expect_same_bits(w.read(), hw, decoupled ? "adamw weights" : "adam weights");
    const std::vector<uint16_t> h1 = half1.read(), h3 = half3.read();
    for (int64_t j = 0; j < slices[1].count; ++j)
      ASSERT_EQ(h1[static_cast<size_t>(j)], float_to_bfloat16(hw[static_cast<size_t>(slices[1].offset + j)])) << j;
    for (int64_t j = 0; j < 400000; ++j) {
      const int64_t r = j / 8, c = j % 8;
      ASSERT_EQ(h3[static_cast<size_t>(j)], c < 3 ? float_to_half(hw[static_cast<size_t>(slices[3].offset + r * 3 + c)]) : 0)
          << j;
    }
    expect_same_bits(m.read(), hm, "adam m");
    expect_same_bits(v.read(), hv, "adam v");
  }
  {  // LAMB, clipped (max_grad_norm 1), every sum in the launchers' order
    std::vector<LambScalars> k;
    for (double dcy : decay) k.push_back(lamb_scalars(2e-3, 0.9, 0.999, 1e-6, 5, dcy));
    const Device<LambScalars> dk(k);
    const Device<float> w(w0), m(m0), v(v0), update(static_cast<size_t>(n));
    ok(lamb(kStream, chunks, dk.get(), 1.0, nullptr, dg.get(), m.get(), v.get(), w.get(), update.get(), ws.get(), ws.bytes,
            nullptr));
    std::vector<float> hw = w0, hm = m0, hv = v0, hu(static_cast<size_t>(n));
    const std::vector<double> squares =
        test::chunk_sums<1>(table, [&](int64_t i, int32_t, double* s) { s[0] = square(g[static_cast<size_t>(i)]); });
    double square_sum = 0;
    for (double s : squares) square_sum += s;
    const float clip = lamb_clip(square_sum, 1.0);
    ASSERT_GT(clip, 1.0f) << "the test means to clip";
    const std::vector<double> norms = test::chunk_sums<2>(table, [&](int64_t i, int32_t tensor, double* s) {
      lamb_moments_at(i, k[static_cast<size_t>(tensor)], clip, g.data(), hm.data(), hv.data(), hw.data(), hu.data());
      s[0] = square(hw[static_cast<size_t>(i)]), s[1] = square(hu[static_cast<size_t>(i)]);
    });
    for (const Chunk& c : table.chunks) {
      double p_square = 0, u_square = 0;
      for (int64_t b = table.first_chunk[static_cast<size_t>(c.tensor)];
           b < table.first_chunk[static_cast<size_t>(c.tensor) + 1]; ++b)
        p_square += norms[static_cast<size_t>(2 * b)], u_square += norms[static_cast<size_t>(2 * b + 1)];
      const float step = lamb_step(k[static_cast<size_t>(c.tensor)], p_square, u_square);
      for (int64_t i = c.begin; i < c.end; ++i) lamb_apply_at(i, step, hu.data(), hw.data());
    }
    expect_same_bits(m.read(), hm, "lamb m");
    expect_same_bits(v.read(), hv, "lamb v");
    expect_same_bits(w.read(), hw, "lamb weights");
  }
  {  // L2 regularization: gradient and penalty
    const std::vector<double> l2 = {1e-4, 0.0, 0.5, 2e-3};
    const Device<double> dl2(l2), penalty(1);
    const std::vector<float> dw0 = random_floats(static_cast<size_t>(n), 64);
    const Device<float> w(w0), dw(dw0);
    ok(l2_regularize(kStream, chunks, dl2.get(), w.get(), dw.get(), penalty.get(), ws.get(), ws.bytes));
    std::vector<float> hdw = dw0;
    const std::vector<double> squares = test::chunk_sums<1>(table, [&](int64_t i, int32_t tensor, double* s) {
      const double l = l2[static_cast<size_t>(tensor)];
      s[0] = 0;
      if (l == 0) return;
      l2_gradient_at(i, l, w0.data(), hdw.data());
      s[0] = square(w0[static_cast<size_t>(i)]);
    });
    double total = 0;
    for (size_t t = 0; t < slices.size(); ++t) {
      if (l2[t] == 0) continue;
      double sum = 0;
      for (int64_t b = table.first_chunk[t]; b < table.first_chunk[t + 1]; ++b) sum += squares[static_cast<size_t>(b)];
      total += l2[t] * sum;
    }
    expect_same_bits(dw.read(), hdw, "l2 gradient");
    expect_same_bits(penalty.read(), {total}, "l2 penalty");
  }
}

TEST_F(CudaKernelLaunchers, PrecisionCastsAndLossScalingAreTheBodiesBits) {
  std::vector<float> x = random_floats(kN, 70, -70000.0f, 70000.0f);
  for (size_t i = 0; i < x.size(); i += 1000) x[i] *= 1e-9f;  // subnormal halves
  x[1] = std::numeric_limits<float>::infinity(), x[2] = std::numeric_limits<float>::quiet_NaN();
  const Device<float> dx_in(x), back(x.size());
  const Device<uint16_t> halves(x.size());
  std::vector<uint16_t> h(x.size());
  std::vector<float> f(x.size());
  ok(float_to_bfloat16(kStream, kN, dx_in.get(), halves.get()));
  each(kN, [&](int64_t i) { float_to_bfloat16_at(i, x.data(), h.data()); });
  expect_same_bits(halves.read(), h, "float to bfloat16");
  ok(bfloat16_to_float(kStream, kN, halves.get(), back.get()));
  each(kN, [&](int64_t i) { bfloat16_to_float_at(i, h.data(), f.data()); });
  expect_same_bits(back.read(), f, "bfloat16 to float");
  ok(float_to_half(kStream, kN, dx_in.get(), halves.get()));
  each(kN, [&](int64_t i) { float_to_half_at(i, x.data(), h.data()); });
  expect_same_bits(halves.read(), h, "float to half");
  ok(half_to_float(kStream, kN, halves.get(), back.get()));
  each(kN, [&](int64_t i) { half_to_float_at(i, h.data(), f.data()); });
  expect_same_bits(back.read(), f, "half to float");

  std::vector<float> g = random_floats(kN, 71, -1e4f, 1e4f);
  g[5] = std::numeric_limits<float>::infinity(), g[kN - 1] = std::numeric_limits<float>::quiet_NaN();
  const Device<float> dg(g), scale(std::vector<float>{4096.0f});
  const Device<double> nonfinite(1);
  const Device<int32_t> good(std::vector<int32_t>{0});
  Workspace ws(flat_sums_workspace_bytes(kN));
  ok(unscale_gradients(kStream, kN, dg.get(), scale.get(), nonfinite.get(), ws.get(), ws.bytes));
  const float host_scale = 4096.0f;
  const double count = test::flat_sums(UnscaleTerm{g.data(), &host_scale}, kN)[0];
  expect_same_bits(dg.read(), g, "unscaled gradients");
  expect_same_bits(nonfinite.read(), {count}, "non-finite count");
  ok(update_loss_scale(kStream, LossScaleRule{}, nonfinite.get(), scale.get(), good.get()));
  expect_same_bits(scale.read(), {2048.0f}, "loss scale backed off");
}

TEST_F(CudaKernelLaunchers, LayoutAndTypeLaunchersAreTheBodiesBits) {
  // Casts and cast-and-add, both half types.
  const std::vector<float> x = random_floats(kN, 80, -300.0f, 300.0f);
  const Device<float> dx(x), sum(std::vector<float>(x.size(), 1.0f));
  const Device<uint16_t> halves(x.size());
  std::vector<uint16_t> h(x.size());
  std::vector<float> expected(x.size(), 1.0f);
  ok(convert(kStream, kN, FloatType::f32, dx.get(), FloatType::f16, halves.get()));
  each(kN, [&](int64_t i) { convert_at(i, FloatType::f32, x.data(), FloatType::f16, h.data()); });
  expect_same_bits(halves.read(), h, "convert to f16");
  ok(convert_add(kStream, kN, FloatType::f16, halves.get(), sum.get()));
  each(kN, [&](int64_t i) { convert_add_at(i, FloatType::f16, h.data(), expected.data()); });
  expect_same_bits(sum.read(), expected, "cast and add");
  ok(convert_add(kStream, kN, FloatType::f16, halves.get(), sum.get(), false));  // the first writer: 0 + x
  std::fill(expected.begin(), expected.end(), 0.0f);
  each(kN, [&](int64_t i) { convert_add_at(i, FloatType::f16, h.data(), expected.data()); });
  expect_same_bits(sum.read(), expected, "cast written first");
  // Bias forward and its gradient (a channel sum, in the device's order).
  const int64_t rows = 70001, channels = 24;
  const std::vector<float> b = random_floats(channels, 81), dy = random_floats(rows * channels, 82);
  std::vector<float> y = random_floats(rows * channels, 83);
  const Device<float> dy_dev(dy), y_dev(y), b_dev(b), db(std::vector<float>(channels, 0.5f));
  ok(bias_forward(kStream, rows, channels, b_dev.get(), y_dev.get()));
  each_row_channel(rows, channels, [&](int64_t r, int64_t c) { bias_forward_at(r, c, channels, b.data(), y.data()); });
  expect_same_bits(y_dev.read(), y, "bias forward");
  Workspace ws(channel_sums_workspace_bytes(1, rows, channels));
  ok(bias_backward(kStream, rows, channels, dy_dev.get(), db.get(), ws.get(), ws.bytes));
  const std::vector<double> sums = test::channel_sums(SumTerm{dy.data(), channels}, 1, rows, channels);
  std::vector<float> db_host(channels, 0.5f);
  each(channels, [&](int64_t c) { bias_backward_at(c, sums.data(), db_host.data()); });
  expect_same_bits(db.read(), db_host, "bias backward");
  // Padded channels: 4 -> 8 (bf16, zeros), then cropped back to 3 and added into fp32.
  const int64_t channel_rows = 70001;
  const std::vector<float> x4 = random_floats(channel_rows * 4, 86);
  const Device<float> x4_dev(x4), added(std::vector<float>(channel_rows * 3, 0.75f));
  const Device<uint16_t> x8_dev(channel_rows * 8);
  std::vector<uint16_t> x8(channel_rows * 8);
  std::vector<float> added_host(channel_rows * 3, 0.75f);
  ok(channels_copy(kStream, channel_rows, 4, 8, FloatType::f32, x4_dev.get(), FloatType::bf16, x8_dev.get(), false));
  each(channel_rows * 8, [&](int64_t i) { channels_copy_at(i, 4, 8, FloatType::f32, x4.data(), FloatType::bf16, x8.data(), false); });
  expect_same_bits(x8_dev.read(), x8, "channels padded");
  ok(channels_copy(kStream, channel_rows, 8, 3, FloatType::bf16, x8_dev.get(), FloatType::f32, added.get(), true));
  each(channel_rows * 3, [&](int64_t i) { channels_copy_at(i, 8, 3, FloatType::bf16, x8.data(), FloatType::f32, added_host.data(), true); });
  expect_same_bits(added.read(), added_host, "channels cropped and added");
  // Taps folded into channels, fp32 -> bf16: CosmoFlow conv1's input (3 taps x 4 channels into 16, shift 1:
  // the 16-byte path) and 3 channels (9 into 16: element by element).
  for (const int64_t channels : {4, 3}) {
    TapsFold fold;
    fold.lines = 2 * 7 * 9, fold.in_width = fold.out_width = 127, fold.channels = channels, fold.taps = 3,
    fold.shift = 1, fold.width = 16;
    const std::vector<float> lines = random_floats(fold.lines * fold.in_width * channels, 87);
    const Device<float> lines_dev(lines);
    const Device<uint16_t> folded_dev(fold.size());
    std::vector<uint16_t> folded(static_cast<size_t>(fold.size()));
    ok(taps_fold(kStream, fold, FloatType::f32, lines_dev.get(), FloatType::bf16, folded_dev.get()));
    each(fold.size(), [&](int64_t i) { taps_fold_at(i, fold, FloatType::f32, lines.data(), FloatType::bf16, folded.data()); });
    expect_same_bits(folded_dev.read(), folded, channels == 4 ? "taps folded, 16-byte path" : "taps folded, 3 channels");
  }
  // A chunked weight gradient's partials (7 chunks of 728 x 728) added in chunk order.
  const int64_t chunks = 7, partial = 728 * 728;
  const std::vector<float> partials = random_floats(chunks * partial, 85);
  const Device<float> partials_dev(partials), summed(std::vector<float>(partial, 0.5f));
  std::vector<float> summed_host(partial, 0.5f);
  ok(chunk_sum_add(kStream, chunks, partial, partials_dev.get(), summed.get()));
  each(partial, [&](int64_t i) { chunk_sum_add_at(i, chunks, partial, partials.data(), summed_host.data()); });
  expect_same_bits(summed.read(), summed_host, "chunked partials in order");
  // A 3-D box into a padded buffer and back out, adding.
  Box pad;
  pad.batch = 2, pad.channels = 5;
  pad.src[0] = 6, pad.src[1] = 7, pad.src[2] = 8;
  pad.dst[0] = 8, pad.dst[1] = 9, pad.dst[2] = 8;
  pad.extent[0] = 6, pad.extent[1] = 7, pad.extent[2] = 7;
  pad.dst_offset[0] = 1, pad.dst_offset[1] = 2, pad.dst_offset[2] = 1;
  const std::vector<float> box_in = random_floats(2 * 6 * 7 * 8 * 5, 85);
  const Device<float> box_dev(box_in), padded(std::vector<float>(2 * 8 * 9 * 8 * 5, 0.0f));
  std::vector<float> padded_host(2 * 8 * 9 * 8 * 5, 0.0f);
  ok(box_copy(kStream, pad, FloatType::f32, box_dev.get(), FloatType::f32, padded.get(), false));
  each(pad.size(), [&](int64_t i) { box_copy_at(i, pad, FloatType::f32, box_in.data(), FloatType::f32, padded_host.data(), false); });
  expect_same_bits(padded.read(), padded_host, "padded");
  EXPECT_EQ(box_copy(kStream, pad, FloatType::f32, box_dev.get(), FloatType::bf16, padded.get(), true), cudaErrorInvalidValue)
      << "adding needs an fp32 destination";
  // The first bad label is latched across calls.
  const Device<int32_t> labels(std::vector<int32_t>{0, 9, 1, -1});
  const Device<int64_t> first(1), latched(std::vector<int64_t>{-1, 0});
  ok(find_bad_label(kStream, 4, labels.get(), 3, first.get()));
  ok(latch_bad_label(kStream, first.get(), labels.get(), latched.get()));
  EXPECT_EQ(latched.read(), (std::vector<int64_t>{1, 9}));
}

}  // namespace
}  // namespace mlph::cuda
