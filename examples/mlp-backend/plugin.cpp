// libmlph-backend-mlp.so: an example backend, built outside the mlperf-hpc tree against its installed
// SDK (docs/writing-a-backend.md). It runs multilayer perceptrons: the dense, relu, tanh, scale and mse ops
// and the sgd_keras optimizer with l2 regularization and gradient accumulation, as plain loops on
// one rank. Everything else it refuses at compile, naming what, as docs/ops.md asks.
#include "mlph/sdk/model/backend.hpp"
#include "mlph/sdk/model/compute.hpp"
#include "model.hpp"

namespace mlp {

class MlpBackend final : public mlph::sdk::Backend {
 public:
  // Only the options every backend shares (mlph/sdk/model/compute.hpp): it computes in fp32, deterministic
  // whether asked or not. Any other backend.* key given to it is an error naming the key.
  MlpBackend(const MLPH_HostApi* host, const mlph::sdk::Options& options) : host_(host) {
    options.allow_only(mlph::sdk::with_compute_options({}), kName);
    mlph::sdk::read_compute_settings(options, {mlph::sdk::Precision::fp32}, kName);
  }

  std::unique_ptr<mlph::sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    if (ranks(comms) > 1)
      mlph::sdk::fail(MLPH_UNIMPLEMENTED, kName + ": runs on one rank (it does not average gradients over ranks)");
    return std::make_unique<MlpModel>(host_, compile_program(graph));
  }

 private:
  int32_t ranks(const MLPH_CommsHandle* comms) const {
    if (!comms) return 1;
    MLPH_Topology topology{sizeof(MLPH_Topology), nullptr, 0, 1, 0, 1, 1};
    mlph::sdk::check(host_, comms->api->topology(comms->comm, &topology), kName + ": comms topology");
    return topology.size;
  }

  const MLPH_HostApi* host_;  // errors from other plug-ins (the comms) are freed through it
};

}  // namespace mlp

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "mlp", "1.0.0",
                   "example backend built against the installed SDK: dense, relu, tanh, scale, mse, sgd_keras",
                   mlph::sdk::backend_api<mlp::MlpBackend>())
