// comms/local: one process, one rank (local_comm.hpp).
#include "local_comm.hpp"

MLPH_DEFINE_PLUGIN(MLPH_KIND_COMMS, "local", "0.1.0", "a single rank: collectives are identities",
                   mlph::sdk::comms_api<mlph::comms::LocalComm>())
