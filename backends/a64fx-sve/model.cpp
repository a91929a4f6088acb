#include "model.hpp"

#include "mlph/sdk/host/executor.hpp"
#include "mlph/sdk/program/lower.hpp"

namespace mlph::a64fx {
namespace {
using sdk::fail;

const std::string kName = "a64fx-sve backend";

// The SDK's lowering of every op but the spatial ones (halo_exchange, spatial_gather); batch norm over
// several ranks is refused too.
Program lowered(const MLPH_Graph& graph) {
  Program p = sdk::program::lower_graph(graph, sdk::program::implements({OpKind::halo_exchange, OpKind::spatial_gather}));
  for (const Node& node : p.nodes)
    if (node.kind == OpKind::batch_norm && node.batch_norm.group_size != 1)
      fail(MLPH_UNIMPLEMENTED, kName + ": node '" + node.name + "' (batch_norm): group_size " +
                                   std::to_string(node.batch_norm.group_size) +
                                   " (batch norm over several ranks, SyncBatchNorm) is not supported yet; "
                                   "the reference backend runs it");
  return p;
}

}  // namespace

std::unique_ptr<sdk::Model> compile_model(const MLPH_HostApi* host, Threads threads, const MLPH_Graph& graph,
                                          const MLPH_CommsHandle* comms) {
  return std::make_unique<sdk::host::Executor<Kernels>>(host, comms, lowered(graph), kName, Kernels{threads, {}});
}

}  // namespace mlph::a64fx
