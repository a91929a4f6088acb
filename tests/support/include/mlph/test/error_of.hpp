// The one line a test compares: the message of the error a call throws, once for every test file
// (four kept a copy each).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "mlph/common.h"
#include "mlph/sdk/util/error.hpp"

namespace mlph::test {

// The message of the E that `f` throws (sdk::Error unless named), or "" when it returns. Tests compare
// the whole line, so a changed message fails them; any other exception escapes and fails the test.
template <class E = sdk::Error>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// The code and message of the sdk::Error that `f` throws; {MLPH_OK, ""} when it returns.
inline std::pair<MLPH_Code, std::string> code_and_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    return {e.code(), e.what()};
  }
  return {MLPH_OK, ""};
}

}  // namespace mlph::test
