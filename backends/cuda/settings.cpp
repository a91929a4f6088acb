#include "settings.hpp"

#include "mlph/sdk/util/error.hpp"

namespace mlph::cuda {

namespace {
// own (true) or cudnn (false).
bool read_own_or_cudnn(const sdk::Options& options, const std::string& key) {
  if (!options.has(key)) return true;
  const std::string value = options.get(key);
  if (value == "own") return true;
  if (value == "cudnn") return false;
  sdk::fail(MLPH_INVALID_ARGUMENT, std::string(kWho) + ": option '" + key + "' is '" + value + "'; expected own or cudnn");
}
}  // namespace

Settings read_settings(const sdk::Options& options) {
  options.allow_only(sdk::with_compute_options({"device", "workspace_mb", "graphs", "loss_scale", "profile",
                                                "batch_norm", "depthwise", "pointwise", "pool_chain"}),
                     kWho);
  Settings s;
  s.compute = sdk::read_compute_settings(
      options, {sdk::Precision::fp32, sdk::Precision::tf32, sdk::Precision::bf16, sdk::Precision::fp16}, kWho);
  if (options.has("device")) s.device = options.get_int<int>("device", 0, 0);
  s.workspace_bytes = options.get_int<size_t>("workspace_mb", s.workspace_bytes >> 20, 0, size_t{1} << 30) << 20;
  s.graphs = options.get_bool("graphs", true, kWho);
  if (options.has("batch_norm")) {
    const std::string value = options.get("batch_norm");
    if (value != "own" && value != "cudnn" && value != "one_pass")
      sdk::fail(MLPH_INVALID_ARGUMENT,
                std::string(kWho) + ": option 'batch_norm' is '" + value + "'; expected own, one_pass or cudnn");
    s.own_batch_norm = value != "cudnn";
    s.batch_norm_one_pass = value == "one_pass";
  }
  s.own_depthwise = read_own_or_cudnn(options, "depthwise");
  if (options.has("loss_scale")) {
    const auto scale = options.get_int<long long>("loss_scale", 65536, 1, 1LL << 24);
    if ((scale & (scale - 1)) != 0)
      sdk::fail(MLPH_INVALID_ARGUMENT, std::string(kWho) + ": option 'loss_scale' is " + std::to_string(scale) +
                                           "; expected a power of two from 1 to 2^24");
    s.loss_scale = static_cast<float>(scale);
  }
  if (options.has("pointwise")) {
    const std::string value = options.get("pointwise");
    if (value != "gemm" && value != "cudnn")
      sdk::fail(MLPH_INVALID_ARGUMENT,
                std::string(kWho) + ": option 'pointwise' is '" + value + "'; expected gemm or cudnn");
    s.pointwise = value == "gemm" ? plan::Pointwise::gemm : plan::Pointwise::cudnn;
  }
  if (options.has("pool_chain")) {
    const std::string value = options.get("pool_chain");
    if (value != "own" && value != "off")
      sdk::fail(MLPH_INVALID_ARGUMENT, std::string(kWho) + ": option 'pool_chain' is '" + value + "'; expected own or off");
    s.pool_chain = value == "own";
  }
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
