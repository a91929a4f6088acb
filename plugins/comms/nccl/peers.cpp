// comms/nccl's questions between watchdogs: see peers.hpp.
#include "peers.hpp"

#include <algorithm>

#include "mpi_transport.hpp"
#include "watchdog.hpp"

namespace mlph::comms::nccl {

Peers peers_over(MpiComm& mpi, double timeout_s) {
  if (mpi.size() < 2 || !mpi.answers_progress()) return {};
  Peers peers;
  peers.answer = [&mpi](uint64_t progress) { mpi.answer_progress(static_cast<int64_t>(progress)); };
  peers.missing = [&mpi, grace = std::min(2.0, timeout_s)](uint64_t sequence) {
    const auto answers = mpi.ask_progress(static_cast<int64_t>(sequence), grace);
    return describe_missing(sequence, answers, [&mpi](int r) { return std::to_string(mpi.world_rank(r)); });
  };
  return peers;
}

}  // namespace mlph::comms::nccl
