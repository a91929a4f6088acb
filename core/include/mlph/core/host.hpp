// The host side of the ABI: the services table plug-ins receive, and the owner of MLPH_Error.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "mlph/common.h"

namespace mlph::core {

// The process-wide services table handed to every plug-in.
const MLPH_HostApi* host_api();

// Thrown by the core when a plug-in call returns an error; what() is the plug-in's message.
class PluginError : public std::runtime_error {
 public:
  PluginError(MLPH_Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  MLPH_Code code() const noexcept { return code_; }

 private:
  MLPH_Code code_;
};

// Takes ownership of `error` (may be NULL): returns normally for NULL, otherwise frees it and
// throws PluginError with `context` prefixed to the message.
void check(MLPH_Error* error, const std::string& context = "");

MLPH_Code error_code(const MLPH_Error* error);
const char* error_message(const MLPH_Error* error);
void error_free(MLPH_Error* error);

}  // namespace mlph::core
