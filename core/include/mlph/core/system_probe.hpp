// What the machine tells about itself: for the log (submission_platform) and for the system
// description of a submission.
#pragma once

#include <map>
#include <string>

namespace mlph::core {

std::string host_name();

// System-description fields (host_processor_model_name, host_processor_core_count,
// host_memory_capacity, operating_system, ...) from /proc and /sys. The accelerators are the backend's
// to state (ABI 1.6 attributes, logged as mlph_backend_device): the core reads no driver files.
std::map<std::string, std::string> detect_system();

}  // namespace mlph::core
