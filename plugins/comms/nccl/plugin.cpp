// comms/nccl's plug-in entry (nccl_comm.hpp).
#include "nccl_comm.hpp"

MLPH_DEFINE_PLUGIN(MLPH_KIND_COMMS, "nccl", "0.1.0",
                   "NCCL on CUDA devices, bootstrapped and with host collectives over MPI (one rank without a "
                   "launcher); every collective bounded by comms.timeout_s",
                   mlph::sdk::comms_api<mlph::comms::nccl::NcclComm>())
