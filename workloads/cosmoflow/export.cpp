#include "export.hpp"

#include <regex>
#include <string>

namespace mlph::cosmoflow {

std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param) {
  const std::string name = param.name ? param.name : "";
  std::smatch m;
  // Our conv<i> (1-based, Keras' order) is the port's conv_seq[i - 1] (a Conv3DActMP: conv, act, mp).
  static const std::regex conv(R"(conv([1-9][0-9]*)\.(kernel|bias))");
  if (std::regex_match(name, m, conv)) {
    const std::string key = "conv_seq." + std::to_string(std::stoi(m[1]) - 1) + ".conv.";
    return {m[2] == "kernel" ? sdk::torch_conv(key + "weight", param) : sdk::torch_as_is(key + "bias", param)};
  }
  static const std::regex dense(R"((dense1|dense2|output)\.(kernel|bias))");
  if (std::regex_match(name, m, dense)) {
    const std::string layer = m[1];
    return {m[2] == "kernel" ? sdk::torch_linear(layer + ".weight", param) : sdk::torch_as_is(layer + ".bias", param)};
  }
  sdk::fail(MLPH_NOT_FOUND, "CosmoFlow has no parameter '" + name + "'");
}

}  // namespace mlph::cosmoflow
