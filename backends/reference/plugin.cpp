// libmlph-backend-reference.so: plain C++ for every op, forward and backward. The oracle other
// backends are checked against, and a CPU backend that trains the mini configs.
#include "mlph/sdk/util/plugin.hpp"

#include "backend.hpp"

MLPH_DEFINE_PLUGIN(MLPH_KIND_BACKEND, "reference", "0.1.0",
                   "plain C++ for every op, forward and backward: the oracle other backends are checked against",
                   mlph::sdk::backend_api<mlph::reference::ReferenceBackend>())
