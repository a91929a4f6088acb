// The arguments of MLPH_BackendApi.create_with (ABI 1.6) for a test that loads a backend on its own:
// one rank, the given host and options. Three tests filled the same five fields each.
#pragma once

#include <vector>

#include "mlph/backend.h"
#include "mlph/sdk/model/backend.hpp"

namespace mlph::test {

// `options` is borrowed: it must outlive the create_with call.
inline MLPH_BackendCreateArgs single_rank_create_args(const MLPH_HostApi* host,
                                                      const std::vector<MLPH_KeyValue>& options) {
  MLPH_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.host = host;
  args.options = options.data();
  args.n_options = options.size();
  args.topology = sdk::single_rank_topology();
  return args;
}

}  // namespace mlph::test
