// How comms/nccl's ranks get ready together, over the host communicator (MPI, or one rank alone): host
// code only, so it is tested under mpirun without a GPU.
//
// An NCCL communicator is made by every rank at once (ncclCommInitRank with a unique id that rank 0
// makes and the others receive), and a rank that gave up earlier (no such device, a CUDA error) would
// leave the others waiting for it. So each step's outcome is agreed first: every rank says how its
// step went (an allgather, bounded by comms.timeout_s), and either all go on or all fail, each with
// the line of the rank that failed.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#include "mlph/sdk/comms/plugin.hpp"

namespace mlph::comms::nccl {

// How one rank's step went: MLPH_OK, or a code and the one line saying why.
struct Outcome {
  MLPH_Code code = MLPH_OK;
  std::string message;
};

// Collective over `comm`. Returns when every rank's outcome is MLPH_OK. Otherwise throws on every
// rank: this rank's own failure, or `where` followed by the first failing rank's line.
void agree(mlph::sdk::Comm& comm, const std::string& where, const Outcome& mine);

namespace detail {
// What rank 0 broadcasts: the id, or why it could not make one.
struct Made {
  int32_t code = MLPH_OK;
  char message[1020] = {};
};
void fill(Made& made, MLPH_Code code, const std::string& message);
[[noreturn]] void fail_from_root(const Made& made, const std::string& where, int32_t rank);
}  // namespace detail

// Collective over `comm`: what `make` returns on rank 0 (NCCL's unique id), on every rank. If `make`
// throws on rank 0 the others learn why, and every rank throws.
template <class Id>
Id share_from_rank0(mlph::sdk::Comm& comm, const std::string& where, const std::function<Id()>& make) {
  static_assert(std::is_trivially_copyable_v<Id>);
  struct Message {
    detail::Made made;
    Id id;
  } message{};
  const int32_t rank = comm.topology().rank;
  if (rank == 0) {
    try {
      message.id = make();
    } catch (const sdk::Error& e) {
      detail::fill(message.made, e.code(), e.what());
    } catch (const std::exception& e) {
      detail::fill(message.made, MLPH_INTERNAL, e.what());
    }
  }
  comm.broadcast(&message, sizeof message, 0);
  if (message.made.code != MLPH_OK) detail::fail_from_root(message.made, where, rank);
  return message.id;
}

}  // namespace mlph::comms::nccl
