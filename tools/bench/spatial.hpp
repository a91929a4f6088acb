// What spatial parallelism (parallel.spatial) costs a training step, per rank: the halo exchanges'
// bytes and time and the gather's, each measured on its own over the sample's ranks with the graph's
// shapes and the code the host backends run (sdk/comms/spatial.hpp), and the process's peak memory.
#pragma once

#include "mlph/core/session.hpp"

namespace mlph::bench {

struct SpatialCost {
  size_t halo_exchanges = 0;      // halo_exchange nodes; each runs forward, and backward but the first
  double halo_bytes = 0;          // sent by this rank per training step (as many arrive)
  double halo_s = 0;              // seconds per training step, measured alone
  double gather_block_bytes = 0;  // this rank's block at the spatial_gather (allgathered, forward)
  double gather_whole_bytes = 0;  // the whole gathered activation (allreduced, backward)
  double gather_s = 0;            // seconds per training step, measured alone
};

// Collective over the session's ranks. `repeats` timed rounds after one untimed.
SpatialCost spatial_cost(core::Session& session, const MLPH_Graph& graph, int repeats);

// This process's peak resident memory so far, in bytes (getrusage).
double peak_rss_bytes();

}  // namespace mlph::bench
