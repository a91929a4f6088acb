#include "context.hpp"

#include "mlph/sdk/util/error.hpp"

namespace mlph::cuda::runtime {

Context Context::for_device(int index, const std::string& name) {
  return Context("cuda backend: device " + std::to_string(index) + " (" + name + ")");
}

std::string Context::line(const char* call, const std::string& about, const std::string& status) const {
  return where_ + ": " + call + (about.empty() ? "" : " for " + about) + ": " + status;
}

void Context::fail(MLPH_Code code, const char* call, const std::string& about, const std::string& status) const {
  sdk::fail(code, line(call, about, status));
}

void Context::fail(MLPH_Code code, const std::string& what) const { sdk::fail(code, where_ + ": " + what); }

}  // namespace mlph::cuda::runtime
