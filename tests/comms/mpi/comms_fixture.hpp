// A comms plug-in loaded from the build tree, called through its C table as the core calls it.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mlph/comms.h"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"

namespace mlph::test {

class LoadedComm {
 public:
  explicit LoadedComm(const std::string& name, std::vector<MLPH_KeyValue> options = {})
      : plugin_(core::PluginLoader::load_file(std::string(MLPH_PLUGIN_DIR) + "/libmlph-comms-" + name + ".so",
                                              MLPH_KIND_COMMS, name)) {
    core::check(api()->create(core::host_api(), options.data(), options.size(), &comm_), "comms/" + name);
    core::check(api()->topology(comm_, &topology_));
  }
  ~LoadedComm() { api()->destroy(comm_); }
  LoadedComm(const LoadedComm&) = delete;
  LoadedComm& operator=(const LoadedComm&) = delete;

  const MLPH_CommsApi* api() const { return plugin_.api<MLPH_CommsApi>(); }
  MLPH_Comm* comm() const { return comm_; }
  int32_t rank() const { return topology_.rank; }
  int32_t size() const { return topology_.size; }
  const MLPH_Topology& topology() const { return topology_; }

  // The error's code and message (MLPH_OK and "" on success), the error freed.
  static std::pair<MLPH_Code, std::string> outcome(MLPH_Error* error) {
    if (!error) return {MLPH_OK, ""};
    std::pair<MLPH_Code, std::string> result{core::error_code(error), core::error_message(error)};
    core::error_free(error);
    return result;
  }

 private:
  core::LoadedPlugin plugin_;
  MLPH_Comm* comm_ = nullptr;
  MLPH_Topology topology_{};
};

}  // namespace mlph::test
