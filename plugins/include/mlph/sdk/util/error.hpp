// C++ side of the ABI's error contract for plug-in authors: throw mlph::sdk::Error (or any
// std::exception) inside, and `guard` turns it into an MLPH_Error* at the boundary.
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "mlph/common.h"

namespace mlph::sdk {

class Error : public std::runtime_error {
 public:
  Error(MLPH_Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  MLPH_Code code() const noexcept { return code_; }

 private:
  MLPH_Code code_;
};

[[noreturn]] inline void fail(MLPH_Code code, const std::string& message) { throw Error(code, message); }

// For errors another plug-in returned through the host: frees `error` and throws it as an Error,
// `context` first. No-op for NULL.
inline void check(const MLPH_HostApi* host, MLPH_Error* error, const std::string& context) {
  if (!error) return;
  const MLPH_Code code = host->error_code(error);
  std::string message = host->error_message(error);
  host->error_free(error);
  throw Error(code, context.empty() ? message : context + ": " + message);
}

// Runs `body` and converts any exception into an error owned by the host. No exception escapes.
template <class Body>
MLPH_Error* guard(const MLPH_HostApi* host, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return nullptr;
  } catch (const Error& e) {
    return host->error_new(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host->error_new(MLPH_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return host->error_new(MLPH_INTERNAL, e.what());
  } catch (...) {
    return host->error_new(MLPH_INTERNAL, "unknown C++ exception");
  }
}

}  // namespace mlph::sdk
