// The CPUs this process may run on: its affinity mask (srun --cpu-bind, mpirun's binding, taskset),
// not the machine's count. The default thread count of a backend: a task that Slurm gave 4 of a
// node's 128 CPUs runs 4 threads, not 128 on 4.
#pragma once

#include <algorithm>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

namespace mlph::sdk {

inline unsigned available_cpus() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace mlph::sdk
