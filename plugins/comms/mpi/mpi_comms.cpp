// comms/mpi: ranks of an MPI job (mpirun, srun), over the MPI transport (mpi_transport.hpp): bounded
// collectives naming the ranks that did not arrive, f16/bf16 reductions, halo exchange and its transpose.
#include "mpi_transport.hpp"

MLPH_DEFINE_PLUGIN(MLPH_KIND_COMMS, "mpi", "0.1.0",
                   "MPI ranks (mpirun, srun): bounded collectives, f16/bf16 reductions, halo exchange and its transpose",
                   mlph::sdk::comms_api<mlph::comms::MpiComm>())
