#include "spatial.hpp"

#include <sys/resource.h>

#include <chrono>

#include "mlph/core/host.hpp"
#include "mlph/sdk/comms/spatial.hpp"
#include "mlph/sdk/graph/validate.hpp"

namespace mlph::bench {
namespace {

template <class F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Values a gradient flows into from a trainable parameter: the halos whose backward runs.
std::vector<bool> from_parameters(const sdk::ValidGraph& g) {
  std::vector<bool> from(g.values.size(), false);
  for (const sdk::ValidParam& p : g.params) from[static_cast<size_t>(p.value)] = p.trainable;
  for (const sdk::ValidNode& n : g.nodes)
    for (int32_t in : n.inputs)
      if (n.gradient() && from[static_cast<size_t>(in)]) from[static_cast<size_t>(n.output)] = true;
  return from;
}

}  // namespace

SpatialCost spatial_cost(core::Session& session, const MLPH_Graph& graph, int repeats) {
  const sdk::ValidGraph g = sdk::validate_graph(graph, sdk::Implements::everything());
  const std::vector<bool> needs_gradient = from_parameters(g);
  sdk::RankGroups groups(core::host_api(), session.topology().size > 1 ? session.comms_handle() : nullptr,
                                  "mlperf-bench");
  SpatialCost cost;
  for (const sdk::ValidNode& n : g.nodes) {
    if (n.op != "halo_exchange" && n.op != "spatial_gather") continue;
    const sdk::spatial::Dims grid = n.attrs.ints("grid"), x_shape = g.value(n.inputs[0]).shape;
    const MLPH_CommsHandle* group = groups.group(sdk::spatial::ranks(grid), n.where());
    std::vector<float> x(static_cast<size_t>(sdk::spatial::volume(x_shape)), 1.0f), dx(x.size());
    std::vector<float> y(static_cast<size_t>(g.value(n.output).numel()), 1.0f);
    const bool backward = needs_gradient[static_cast<size_t>(n.inputs[0])];
    double total = 0;
    const auto measure = [&](auto& op) {
      for (int round = 0; round <= repeats; ++round) {
        const double s = seconds([&] {
          op.forward(x.data(), y.data());
          if (backward) op.backward(y.data(), dx.data(), false);
        });
        if (round > 0) total += s / repeats;
      }
    };
    if (n.op == "halo_exchange") {
      const std::vector<int64_t> halo = n.attrs.ints("halo");
      const auto spatial = static_cast<long>(grid.size());
      sdk::spatial::HaloExchange op(core::host_api(), group, x_shape, grid, {halo.begin(), halo.begin() + spatial},
                                    {halo.end() - spatial, halo.end()}, "mlperf-bench: " + n.where());
      measure(op);
      ++cost.halo_exchanges;
      cost.halo_bytes += static_cast<double>(op.bytes_sent()) * (backward ? 2 : 1);
      cost.halo_s += total;
    } else {
      sdk::spatial::SpatialGather op(core::host_api(), group, x_shape, grid, "mlperf-bench: " + n.where());
      measure(op);
      cost.gather_block_bytes += static_cast<double>(x.size() * sizeof(float));
      cost.gather_whole_bytes += static_cast<double>(y.size() * sizeof(float));
      cost.gather_s += total;
    }
  }
  return cost;
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: KiB
}

}  // namespace mlph::bench
