// backend/reference: plain C++ for every op, forward and backward. The oracle other backends are
// checked against, and a CPU backend that trains the mini configs.
#include <thread>

#include "mlph/sdk/backend.hpp"
#include "model.hpp"

namespace mlph::reference {
namespace {

class ReferenceBackend final : public sdk::Backend {
 public:
  ReferenceBackend(const MLPH_HostApi* host, const sdk::Options& options) : host_(host) {
    options.allow_only({"threads"}, "reference backend");
    const long long threads = options.get_int("threads", std::max(1u, std::thread::hardware_concurrency()));
    if (threads < 1) sdk::fail(MLPH_INVALID_ARGUMENT, "reference backend: option 'threads' must be >= 1");
    pool_ = std::make_shared<ThreadPool>(static_cast<unsigned>(threads));
  }
  std::unique_ptr<sdk::Model> compile(const MLPH_Graph& graph, const MLPH_CommsHandle* comms) override {
    return std::make_unique<ReferenceModel>(host_, pool_, graph, comms);
  }

 private:
  const MLPH_HostApi* host_;
  std::shared_ptr<ThreadPool> pool_;  // shared with the models, which may outlive nothing but use it
};

}  // namespace
}  // namespace mlph::reference

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "reference", "0.1.0", "plain C++ for every op, forward and backward: the oracle",
                   mlph::sdk::backend_api<mlph::reference::ReferenceBackend>())
