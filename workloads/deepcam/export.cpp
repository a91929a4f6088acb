#include "export.hpp"

#include <map>
#include <regex>
#include <string>

namespace mlph::deepcam {
namespace {

// Our layers outside the Xception blocks (model.cpp's names) and the reference's modules for the
// conv and for the batch norm after it ("" when none follows).
struct Modules {
  std::string conv, batch_norm;
};
const std::map<std::string, Modules>& plain_layers() {
  static const std::map<std::string, Modules> table = {
      {"xception.conv1", {"xception_features.conv1", "xception_features.bn1"}},
      {"xception.conv2", {"xception_features.conv2", "xception_features.bn2"}},
      {"aspp1", {"bottleneck.aspp1.atrous_convolution", "bottleneck.aspp1.bn"}},
      {"aspp2", {"bottleneck.aspp2.atrous_convolution", "bottleneck.aspp2.bn"}},
      {"aspp3", {"bottleneck.aspp3.atrous_convolution", "bottleneck.aspp3.bn"}},
      {"aspp4", {"bottleneck.aspp4.atrous_convolution", "bottleneck.aspp4.bn"}},
      {"global_pool.conv", {"bottleneck.global_avg_pool.global_average_pool.1", ""}},
      {"aspp.project", {"bottleneck.conv", "bottleneck.bn"}},
      {"decoder.low_level", {"conv2", "bn2"}},
      {"decoder.deconv1a", {"upsample.deconv1.0", "upsample.deconv1.1"}},
      {"decoder.deconv1b", {"upsample.deconv1.3", "upsample.deconv1.4"}},
      {"decoder.conv1", {"upsample.conv1.0", "upsample.conv1.1"}},
      {"decoder.conv2", {"upsample.conv1.3", "upsample.conv1.4"}},
      {"decoder.conv3", {"upsample.conv1.6", ""}},
      {"decoder.deconv2", {"upsample.deconv2.0", "upsample.deconv2.1"}},
      {"decoder.last_deconv", {"upsample.last_deconv.0", ""}},
  };
  return table;
}

// A Block's rep is [Sep, BN, ReLU] per repetition with the last ReLU dropped, then the stride-2 (or
// is_last) separable conv: repetition i's Sep is rep.<3i>, its BN rep.<3i+1>, the last Sep rep.<3 reps - 1>.
int repetitions(int block) { return block >= 4 && block <= 19 ? 3 : 2; }

// A batch norm (the GBN wrapper `module`) field; after running_var, PyTorch's num_batches_tracked.
std::vector<sdk::ExportEntry> batch_norm(const std::string& module, const std::string& field, const MLPH_Value& param) {
  if (field != "weight" && field != "bias" && field != "running_mean" && field != "running_var") return {};
  std::vector<sdk::ExportEntry> out = {sdk::torch_as_is(module + ".bn." + field, param)};
  if (field == "running_var") out.push_back(sdk::torch_batches_tracked(module + ".bn.num_batches_tracked"));
  return out;
}

std::vector<sdk::ExportEntry> conv(const std::string& module, const std::string& field, const MLPH_Value& param) {
  if (field == "weight") return {sdk::torch_conv(module + ".weight", param)};
  if (field == "bias") return {sdk::torch_as_is(module + ".bias", param)};
  return {};
}

std::vector<sdk::ExportEntry> block_layer(const std::smatch& m, const MLPH_Value& param) {
  const std::string block = "xception_features.block" + m[1].str();
  const int n = std::stoi(m[1]);
  const std::string layer = m[2], field = m[4];
  const bool skip = layer.starts_with("skip");
  if (skip == m[3].matched) return {};  // the skip's conv and batch norm have no sub-layer; the rest one
  if (layer == "skip") return conv(block + ".skip", field, param);
  if (layer == "skipbn") return batch_norm(block + ".skipbn", field, param);
  if (layer == "down" || layer == "last")
    return conv(block + ".rep." + std::to_string(3 * repetitions(n) - 1) + "." + m[3].str(), field, param);
  const int i = std::stoi(layer.substr(3));  // rep<i>
  if (m[3] == "bn") return batch_norm(block + ".rep." + std::to_string(3 * i + 1), field, param);
  return conv(block + ".rep." + std::to_string(3 * i) + "." + m[3].str(), field, param);
}

}  // namespace

std::vector<sdk::ExportEntry> reference_layout(const MLPH_Value& param) {
  const std::string name = param.name ? param.name : "";
  std::vector<sdk::ExportEntry> out;
  std::smatch m;
  // xception.block<N>.{skip, skipbn, rep<i>, down, last}[.{conv1, pointwise, bn}].<field>
  static const std::regex block(R"(xception\.block(\d+)\.(skip|skipbn|rep\d+|down|last)(?:\.(conv1|pointwise|bn))?\.(\w+))");
  // The exit flow's separable convs xception.conv<3..5>.{conv1, pointwise, bn}.<field>
  static const std::regex exit_flow(R"(xception\.conv([345])\.(conv1|pointwise|bn)\.(\w+))");
  static const std::regex layer(R"((.+?)(\.bn)?\.(weight|bias|running_mean|running_var))");
  if (name == "normalize.shift" || name == "normalize.scale") return {};  // the reference's data loader
  if (name == "global_pool.affine.weights" || name == "global_pool.affine.bias") {
    const std::string field = name.substr(name.rfind('.') + 1);
    out = {sdk::torch_as_is("bottleneck.global_avg_pool.global_average_pool.2." + field, param,
                            {param.shape[0], 1, 1})};
  } else if (std::regex_match(name, m, block)) {
    out = block_layer(m, param);
  } else if (std::regex_match(name, m, exit_flow)) {
    out = m[2] == "bn" ? batch_norm("xception_features.bn" + m[1].str(), m[3], param)
                       : conv("xception_features.conv" + m[1].str() + "." + m[2].str(), m[3], param);
  } else if (std::regex_match(name, m, layer)) {
    const auto found = plain_layers().find(m[1]);
    if (found != plain_layers().end()) {
      const Modules& modules = found->second;
      if (m[2].matched && !modules.batch_norm.empty()) out = batch_norm(modules.batch_norm, m[3], param);
      if (!m[2].matched && (m[3] == "weight" || m[3] == "bias")) out = conv(modules.conv, m[3], param);
    }
  }
  if (out.empty()) sdk::fail(MLPH_NOT_FOUND, "DeepCAM has no parameter '" + name + "'");
  return out;
}

}  // namespace mlph::deepcam
