// How a rank's watchdog learns, over MPI, which ranks did not reach a device collective that timed out:
// every rank's watchdog thread answers questions with its progress (the last collective it enqueued)
// while the rest of its process may be hung; the one that timed out asks them all (MpiComm's progress
// questions) for up to 2 s. Host code only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace mlph::comms {
class MpiComm;
}

namespace mlph::comms::nccl {

struct Peers {
  std::function<std::string(uint64_t sequence)> missing;  // Hooks::missing
  std::function<void(uint64_t progress)> answer;           // Hooks::answer
};

// The questions over `mpi` (which outlives them); none (empty members) with one rank, or where MPI
// lacks MPI_THREAD_MULTIPLE (the watchdog thread would call MPI beside the caller's).
Peers peers_over(MpiComm& mpi, double timeout_s);

}  // namespace mlph::comms::nccl
