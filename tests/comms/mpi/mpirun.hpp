// How the tests launch 2-rank jobs: mpirun as root (containers, CI), more ranks than cores, and no
// cross-memory-attach single copy (refused inside most containers).
#pragma once

#include <cstdlib>
#include <string>

namespace mlph::test {

inline std::string mpirun_2_ranks() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  return std::string(MLPH_MPIEXEC) + " --oversubscribe -np 2 ";
}

}  // namespace mlph::test
