#include "settings.hpp"

#include <algorithm>
#include <vector>

#include "mlph/sdk/util/error.hpp"

namespace mlph::cuda {

namespace {
// An implementation choice: the option's value, one of `values` (the first, its default, when the key is
// absent); any other value fails naming the key and the values ("expected own, one_pass or cudnn").
std::string read_choice(const sdk::Options& options, const std::string& key, const std::vector<std::string>& values) {
  const std::string value = options.get(key, values.front());
  if (std::find(values.begin(), values.end(), value) != values.end()) return value;
  std::string expected = values.front();
  for (size_t i = 1; i < values.size(); ++i) expected += (i + 1 == values.size() ? " or " : ", ") + values[i];
  sdk::fail(MLPH_INVALID_ARGUMENT,
            std::string(kWho) + ": option '" + key + "' is '" + value + "'; expected " + expected);
}
}  // namespace

Settings read_settings(const sdk::Options& options) {
  options.allow_only(sdk::with_compute_options({"device", "workspace_mb", "graphs", "loss_scale", "profile",
                                                "batch_norm", "depthwise", "pointwise", "pool_chain", "small_channels"}),
                     kWho);
  Settings s;
  s.compute = sdk::read_compute_settings(
      options, {sdk::Precision::fp32, sdk::Precision::tf32, sdk::Precision::bf16, sdk::Precision::fp16}, kWho);
  if (options.has("device")) s.device = options.get_int<int>("device", 0, 0);
  s.workspace_bytes = options.get_int<size_t>("workspace_mb", s.workspace_bytes >> 20, 0, size_t{1} << 30) << 20;
  s.graphs = options.get_bool("graphs", true, kWho);
  const std::string batch_norm = read_choice(options, "batch_norm", {"own", "one_pass", "cudnn"});
  s.own_batch_norm = batch_norm != "cudnn";
  s.batch_norm_one_pass = batch_norm == "one_pass";
  s.own_depthwise = read_choice(options, "depthwise", {"own", "cudnn"}) == "own";
  if (options.has("loss_scale")) {
    const auto scale = options.get_int<long long>("loss_scale", 65536, 1, 1LL << 24);
    if ((scale & (scale - 1)) != 0)
      sdk::fail(MLPH_INVALID_ARGUMENT, std::string(kWho) + ": option 'loss_scale' is " + std::to_string(scale) +
                                           "; expected a power of two from 1 to 2^24");
    s.loss_scale = static_cast<float>(scale);
  }
  s.pointwise = read_choice(options, "pointwise", {"gemm", "cudnn"}) == "gemm" ? plan::Pointwise::gemm
                                                                            : plan::Pointwise::cudnn;
  s.pool_chain = read_choice(options, "pool_chain", {"own", "off"}) == "own";
  s.fold_taps = read_choice(options, "small_channels", {"fold", "pad"}) == "fold";
  if (options.has("profile")) s.profile_dir = options.get("profile");
  return s;
}

int select_device(const Settings& settings, const MLPH_Topology& topology, int count) {
  if (settings.device) {
    if (*settings.device >= count)
      sdk::fail(MLPH_INVALID_ARGUMENT, std::string(kWho) + ": option 'device' is " + std::to_string(*settings.device) +
                                           " but this process sees " + std::to_string(count) + " CUDA device" +
                                           (count == 1 ? "" : "s") + " (0.." + std::to_string(count - 1) + ")");
    return *settings.device;
  }
  const int32_t local_rank = topology.local_rank < 0 ? 0 : topology.local_rank;
  return local_rank % count;
}

}  // namespace mlph::cuda
