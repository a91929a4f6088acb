// Whether an MPI launcher started this process (mpirun, srun, a PMIx or PMI server): each sets its rank
// variables. Without one, comms/nccl is the only rank and never initializes MPI, so it runs where no MPI
// runtime is installed (the GPU test machines: one GPU, one rank).
#pragma once

#include <cstdlib>
#include <functional>

namespace mlph::comms::nccl {

inline bool started_by_launcher(const std::function<const char*(const char*)>& env = [](const char* name) {
  return std::getenv(name);
}) {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"})
    if (env(name)) return true;
  return false;
}

}  // namespace mlph::comms::nccl
