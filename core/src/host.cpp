#include "mlph/core/host.hpp"

#include <chrono>
#include <cstdio>
#include <mutex>

struct MLPH_Error {
  MLPH_Code code;
  std::string message;
};

namespace mlph::core {
namespace {

// Returned when even an error cannot be allocated; never freed.
MLPH_Error kOutOfMemory{MLPH_RESOURCE_EXHAUSTED, "out of memory"};

MLPH_Error* error_new(MLPH_Code code, const char* message) {
  try {
    return new MLPH_Error{code, message ? message : ""};  // ABI-owned object, freed by error_free
  } catch (...) {
    return &kOutOfMemory;
  }
}

void log(MLPH_LogLevel level, const char* origin, const char* message) {
  static std::mutex mutex;
  static const char* names[] = {"debug", "info", "warning", "error"};
  if (level < MLPH_LOG_INFO) return;
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "[%s] %s: %s\n", origin ? origin : "plugin", names[level], message ? message : "");
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

MLPH_Code host_error_code(const MLPH_Error* error);
const char* host_error_message(const MLPH_Error* error);
void host_error_free(MLPH_Error* error);

const MLPH_HostApi kHost = {
    sizeof(MLPH_HostApi), nullptr,          MLPH_ABI_MAJOR,      MLPH_ABI_MINOR, error_new, log, now_seconds,
    host_error_code,      host_error_message, host_error_free,
};

}  // namespace

const MLPH_HostApi* host_api() { return &kHost; }

MLPH_Code error_code(const MLPH_Error* error) { return error ? error->code : MLPH_OK; }
const char* error_message(const MLPH_Error* error) { return error ? error->message.c_str() : ""; }
void error_free(MLPH_Error* error) {
  if (error != &kOutOfMemory) delete error;
}

void check(MLPH_Error* error, const std::string& context) {
  if (!error) return;
  MLPH_Code code = error->code;
  std::string message = context.empty() ? error->message : context + ": " + error->message;
  error_free(error);
  throw PluginError(code, message);
}

namespace {
MLPH_Code host_error_code(const MLPH_Error* error) { return error_code(error); }
const char* host_error_message(const MLPH_Error* error) { return error_message(error); }
void host_error_free(MLPH_Error* error) { error_free(error); }
}  // namespace

}  // namespace mlph::core
