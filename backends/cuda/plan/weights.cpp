#include "weights.hpp"

#include <map>

namespace mlph::cuda::plan {

std::vector<ParamMap> param_maps(const Program& p, const std::vector<NodeLowering>& lowering) {
  std::map<int32_t, size_t> param_of;
  for (size_t i = 0; i < p.params.size(); ++i) param_of[p.params[i].value] = i;
  std::vector<ParamMap> maps(p.params.size());
  std::vector<int> reader(p.params.size(), -1);  // the node that decided each parameter's layout
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const Node& node = p.nodes[k];
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const auto found = param_of.find(node.inputs[slot]);
      if (found == param_of.end()) continue;
      const size_t i = found->second;
      ParamMap map;
      if (slot == 1 && lowering[k].conv) {
        // Padded channels (pad_channels) live in the half copy only: the masters keep the graph's Ci.
        const ConvPlan& c = *lowering[k].conv;
        map = {c.channels ? c.filter.rows / c.padded_channels * c.channels : c.filter.rows, c.filter.cols};
      }
      if (reader[i] >= 0 && (map.rows != maps[i].rows || map.cols != maps[i].cols))
        fail_node(node, "it reads parameter '" + p.value(node.inputs[slot]).name + "' in another layout than node '" +
                            p.nodes[static_cast<size_t>(reader[i])].name + "' does; the cuda backend keeps one");
      maps[i] = map;
      reader[i] = static_cast<int>(k);
    }
  }
  return maps;
}

void to_device(const ParamMap& map, const float* model, float* device, int64_t count) {
  for (int64_t i = 0; i < count; ++i) device[map.device(i)] = model[i];
}

void to_model(const ParamMap& map, const float* device, float* model, int64_t count) {
  for (int64_t i = 0; i < count; ++i) model[i] = device[map.device(i)];
}

}  // namespace mlph::cuda::plan
