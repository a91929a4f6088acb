// mlph-stage-bench: times storage/stage on one rank (comms/local), for comparison with cp/tar.
//   mlph-stage-bench SOURCE TARGET [THREADS] [INFLATE]   prints files, bytes and bytes/s; removes the copy
// (INFLATE: storage.inflate, 0 or 1)
#include <cstdio>
#include <string>

#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"

using namespace mlph::core;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mlph-stage-bench SOURCE TARGET [THREADS] [INFLATE]\n");
    return 2;
  }
  try {
    PluginLoader loader({MLPH_PLUGIN_DIR});
    const LoadedPlugin storage_lib = loader.load(MLPH_KIND_STORAGE, "stage");
    const LoadedPlugin comms_lib = loader.load(MLPH_KIND_COMMS, "local");
    const auto* storage_api = storage_lib.api<MLPH_StorageApi>();
    const auto* comms_api = comms_lib.api<MLPH_CommsApi>();
    MLPH_Comm* comm = nullptr;
    check(comms_api->create(host_api(), nullptr, 0, &comm), "comms");
    const std::string threads = argc > 3 ? argv[3] : "2";
    const std::string inflate = argc > 4 ? argv[4] : "0";
    const MLPH_KeyValue options[] = {{"target", argv[2]}, {"threads", threads.c_str()}, {"inflate", inflate.c_str()}};
    MLPH_Storage* storage = nullptr;
    check(storage_api->create(host_api(), options, 3, &storage), "storage");
    const MLPH_CommsHandle handle{sizeof(MLPH_CommsHandle), nullptr, comms_api, comm};
    MLPH_StageStats stats{};
    stats.struct_size = sizeof stats;
    MLPH_Error* error = storage_api->stage(storage, argv[1], &handle, &stats);
    storage_api->destroy(storage);
    comms_api->destroy(comm);
    check(error, "stage");
    std::printf("%llu files, %llu bytes written, %llu read, %.3f s: %.1f MB/s written, %.1f MB/s read\n",
                static_cast<unsigned long long>(stats.files), static_cast<unsigned long long>(stats.bytes_written),
                static_cast<unsigned long long>(stats.bytes_read), stats.seconds, stats.bytes_written / stats.seconds / 1e6,
                stats.bytes_read / stats.seconds / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlph-stage-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
