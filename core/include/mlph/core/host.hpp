// The host side of the ABI: the services table plug-ins receive, and the owner of MLPH_Error.
#pragma once

#include <memory>
#include <string>

#include "mlph/common.h"
#include "mlph/sdk/util/error.hpp"

namespace mlph::core {

// The process-wide services table handed to every plug-in.
const MLPH_HostApi* host_api();

// Thrown by the core when a plug-in call returns an error; what() is the plug-in's message. It is the
// SDK's error (a code and a message), marked as one a plug-in returned through the ABI: borrow.cpp
// and mlperf-conformance catch exactly those (a backend's failure is a row of the report; a failing
// SDK helper in the harness itself is not), so the subtype stays while the body is the SDK's.
class PluginError : public sdk::Error {
 public:
  using sdk::Error::Error;
};

// Takes ownership of `error` (may be NULL): returns normally for NULL, otherwise frees it and
// throws PluginError with `context` prefixed to the message.
void check(MLPH_Error* error, const std::string& context = "");

MLPH_Code error_code(const MLPH_Error* error);
const char* error_message(const MLPH_Error* error);
void error_free(MLPH_Error* error);

}  // namespace mlph::core
