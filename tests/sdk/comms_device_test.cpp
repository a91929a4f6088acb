// The SDK's device-collectives extension (sdk/comms/plugin.hpp): a C++ comms class that defines the device
// calls gets MLPH_DeviceCollectives on its table's extension chain, every communicator (split ones
// too) takes them, and a backend finds them with find_device_collectives and calls them through
// DeviceComm. A class without them gets no extension.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mlph/core/host.hpp"
#include "mlph/sdk/comms/plugin.hpp"

namespace {

// What the fake device calls saw, shared by every communicator of the plug-in.
std::vector<std::string> g_calls;

class HostOnly : public mlph::sdk::Comm {
 public:
  HostOnly() = default;
  HostOnly(const MLPH_HostApi*, const mlph::sdk::Options&) {}
  MLPH_Topology topology() override { return {sizeof(MLPH_Topology), nullptr, 0, 1, 0, 1, 1}; }
  void allreduce(void*, size_t, MLPH_DType, MLPH_ReduceOp) override {}
  void broadcast(void*, size_t, int32_t) override {}
  void allgather(const void*, void*, size_t) override {}
  void barrier() override {}
  void halo_exchange(void*, const MLPH_HaloSpec&) override {}
  std::unique_ptr<mlph::sdk::Comm> split(int32_t, int32_t) override { return std::make_unique<HostOnly>(); }
};

class WithDevice final : public HostOnly {
 public:
  static constexpr MLPH_DeviceType device_type = MLPH_DEVICE_EMULATED;
  WithDevice(std::string name = "world") : name_(std::move(name)) {}
  WithDevice(const MLPH_HostApi*, const mlph::sdk::Options&) {}
  // color 7: a communicator of another class, as a plug-in whose split forgot its own.
  std::unique_ptr<mlph::sdk::Comm> split(int32_t color, int32_t) override {
    if (color == 7) return std::make_unique<HostOnly>();
    return std::make_unique<WithDevice>("part" + std::to_string(color));
  }
  using HostOnly::allgather, HostOnly::allreduce, HostOnly::broadcast, HostOnly::halo_exchange;
  void bind(MLPH_Device device) { record("bind " + std::to_string(device.id)); }
  void allreduce(void*, size_t count, MLPH_DType, MLPH_ReduceOp, MLPH_Stream stream) {
    record("allreduce " + std::to_string(count) + on(stream));
  }
  void broadcast(void*, size_t bytes, int32_t root, MLPH_Stream stream) {
    record("broadcast " + std::to_string(bytes) + " from " + std::to_string(root) + on(stream));
  }
  void allgather(const void*, void*, size_t bytes, MLPH_Stream stream) {
    record("allgather " + std::to_string(bytes) + on(stream));
  }
  void halo_exchange(void*, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
    record("halo_exchange " + std::to_string(spec.ndim) + on(stream));
  }
  void halo_accumulate(void*, const MLPH_HaloSpec& spec, MLPH_Stream stream) {
    record("halo_accumulate " + std::to_string(spec.ndim) + on(stream));
  }
  void status() {
    if (name_ == "part3") mlph::sdk::fail(MLPH_DEADLINE_EXCEEDED, "part3 timed out");
  }

 private:
  static std::string on(MLPH_Stream stream) { return " on " + std::to_string(reinterpret_cast<uintptr_t>(stream)); }
  void record(const std::string& call) { g_calls.push_back(name_ + ": " + call); }
  std::string name_ = "world";
};

MLPH_Comm* create(const MLPH_CommsApi* api) {
  MLPH_Comm* comm = nullptr;
  EXPECT_EQ(api->create(mlph::core::host_api(), nullptr, 0, &comm), nullptr);
  return comm;
}

std::pair<MLPH_Code, std::string> outcome(MLPH_Error* error) {
  if (!error) return {MLPH_OK, ""};
  std::pair<MLPH_Code, std::string> result{mlph::core::error_code(error), mlph::core::error_message(error)};
  mlph::core::error_free(error);
  return result;
}

}  // namespace

TEST(SdkDeviceCollectives, AClassWithTheCallsHangsTheExtensionOnItsTable) {
  const MLPH_CommsApi* api = mlph::sdk::comms_api<WithDevice>();
  const MLPH_Extension* ext = mlph_find_extension(api->ext, MLPH_EXT_DEVICE_COLLECTIVES);
  ASSERT_NE(ext, nullptr);
  EXPECT_EQ(ext->version, 1u);
  EXPECT_EQ(ext->struct_size, sizeof(MLPH_DeviceCollectives));
  EXPECT_EQ(ext->next, nullptr);
  EXPECT_EQ(mlph::sdk::find_device_collectives(api, MLPH_DEVICE_EMULATED),
            reinterpret_cast<const MLPH_DeviceCollectives*>(ext));
  EXPECT_EQ(mlph::sdk::find_device_collectives(api, MLPH_DEVICE_CUDA), nullptr) << "another device's memory";
  EXPECT_EQ(mlph::sdk::comms_api<HostOnly>()->ext, nullptr);
  EXPECT_EQ(mlph::sdk::find_device_collectives(mlph::sdk::comms_api<HostOnly>(), MLPH_DEVICE_EMULATED), nullptr);
}

TEST(SdkDeviceCollectives, AMalformedOrOlderExtensionIsNotUsed) {
  MLPH_DeviceCollectives calls = *mlph::sdk::find_device_collectives(mlph::sdk::comms_api<WithDevice>(),
                                                                      MLPH_DEVICE_EMULATED);
  MLPH_CommsApi api = *mlph::sdk::comms_api<WithDevice>();
  api.ext = &calls.base;
  EXPECT_NE(mlph::sdk::find_device_collectives(&api, MLPH_DEVICE_EMULATED), nullptr);
  calls.base.struct_size = MLPH_STRUCT_SIZE(MLPH_DeviceCollectives, halo_accumulate);  // no status
  EXPECT_EQ(mlph::sdk::find_device_collectives(&api, MLPH_DEVICE_EMULATED), nullptr);
  calls.base.struct_size = sizeof calls;
  calls.base.version = 0;
  EXPECT_EQ(mlph::sdk::find_device_collectives(&api, MLPH_DEVICE_EMULATED), nullptr);
}

TEST(SdkDeviceCollectives, EveryCallReachesTheClassAndSplitCommunicatorsTakeThemToo) {
  g_calls.clear();
  const MLPH_CommsApi* api = mlph::sdk::comms_api<WithDevice>();
  const MLPH_DeviceCollectives* calls = mlph::sdk::find_device_collectives(api, MLPH_DEVICE_EMULATED);
  MLPH_Comm* world = create(api);
  MLPH_Comm* part = nullptr;
  ASSERT_EQ(api->split(world, 2, 0, &part), nullptr);
  const mlph::sdk::DeviceComm device(mlph::core::host_api(), calls, world), in_part(mlph::core::host_api(), calls, part);
  auto* stream = reinterpret_cast<MLPH_Stream>(uintptr_t{42});
  MLPH_HaloSpec spec{};
  spec.ndim = 3;
  float data[4] = {};
  device.bind({MLPH_DEVICE_EMULATED, 1});
  device.allreduce(data, 4, MLPH_DTYPE_F32, MLPH_REDUCE_SUM, stream);
  device.broadcast(data, 16, 1, stream);
  device.allgather(data, data, 8, nullptr);
  in_part.bind({MLPH_DEVICE_EMULATED, 0});
  in_part.halo_exchange(data, spec, stream);
  in_part.halo_accumulate(data, spec, stream);
  device.status();
  EXPECT_EQ(g_calls, (std::vector<std::string>{"world: bind 1", "world: allreduce 4 on 42", "world: broadcast 16 from 1 on 42",
                                               "world: allgather 8 on 0", "part2: bind 0", "part2: halo_exchange 3 on 42",
                                               "part2: halo_accumulate 3 on 42"}));
  api->destroy(part);
  api->destroy(world);
}

TEST(SdkDeviceCollectives, ErrorsComeBackAsTheAbiSaysAndDeviceCommThrowsThem) {
  g_calls.clear();
  const MLPH_CommsApi* api = mlph::sdk::comms_api<WithDevice>();
  const MLPH_DeviceCollectives* calls = mlph::sdk::find_device_collectives(api, MLPH_DEVICE_EMULATED);
  MLPH_Comm* world = create(api);
  EXPECT_EQ(outcome(calls->bind(world, {MLPH_DEVICE_CUDA, 0})),
            (std::pair<MLPH_Code, std::string>{MLPH_INVALID_ARGUMENT,
                                               "bind: a cuda device, but these device collectives take emulated devices"}));
  EXPECT_EQ(outcome(calls->halo_exchange(world, nullptr, nullptr, nullptr)),
            (std::pair<MLPH_Code, std::string>{MLPH_INVALID_ARGUMENT, "halo exchange: no MLPH_HaloSpec"}));
  EXPECT_EQ(outcome(calls->halo_accumulate(world, nullptr, nullptr, nullptr)).first, MLPH_INVALID_ARGUMENT);
  EXPECT_TRUE(g_calls.empty()) << "refused before reaching the class";
  MLPH_Comm* late = nullptr;
  ASSERT_EQ(api->split(world, 3, 0, &late), nullptr);
  EXPECT_EQ(outcome(calls->status(late)), (std::pair<MLPH_Code, std::string>{MLPH_DEADLINE_EXCEEDED, "part3 timed out"}));
  try {
    mlph::sdk::DeviceComm(mlph::core::host_api(), calls, late).status();
    ADD_FAILURE() << "status did not throw";
  } catch (const mlph::sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_DEADLINE_EXCEEDED);
    EXPECT_EQ(std::string(e.what()), "comms: part3 timed out");
  }
  MLPH_Comm* stray = nullptr;
  ASSERT_EQ(api->split(world, 7, 0, &stray), nullptr);
  EXPECT_EQ(outcome(calls->status(stray)),
            (std::pair<MLPH_Code, std::string>{
                MLPH_INTERNAL, "device collectives: a communicator of another class (split() must return its own)"}));
  api->destroy(stray);
  api->destroy(late);
  api->destroy(world);
}
