// The MPI transport of the comms plug-ins (comms/mpi, and comms/nccl's host side): ranks of an MPI job
// (mpirun, srun). Every collective is nonblocking underneath and polled against a deadline (timeout_s),
// so a dead or hung rank becomes an error naming the operation and the ranks that did not arrive
// instead of a hang; the communicator is then broken, and destroying it aborts the whole job
// (MPI_Abort) so that every rank exits non-zero once the caller has reported the error (the run log
// ends "aborted"). A static library of its own, linked into each plug-in that uses it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlph/sdk/comms/plugin.hpp"

namespace mlph::comms {

class MpiComm : public mlph::sdk::Comm {
 public:
  // comms/mpi: its options (timeout_s) and its name in messages.
  MpiComm(const MLPH_HostApi* host, const mlph::sdk::Options& options);
  // Another plug-in's host side: `name` ("comms/nccl") starts its messages.
  MpiComm(const MLPH_HostApi* host, std::string name, double timeout_s);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MLPH_Topology topology() override;
  void allreduce(void* data, size_t count, MLPH_DType dtype, MLPH_ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int32_t root) override;
  void allgather(const void* send, void* recv, size_t bytes_per_rank) override;
  void barrier() override;
  std::unique_ptr<mlph::sdk::Comm> split(int32_t color, int32_t key) override { return split_mpi(color, key); }
  void halo_exchange(void* data, const MLPH_HaloSpec& spec) override;
  void halo_accumulate(void* data, const MLPH_HaloSpec& spec) override;

  // For a plug-in built on this transport.
  std::unique_ptr<MpiComm> split_mpi(int32_t color, int32_t key);
  // "comms/mpi: rank 1 of 2", or "comms/mpi: rank 3 (1 of 2 in a split communicator)": ranks as the job
  // knows them (MPI_COMM_WORLD).
  std::string where() const;
  int world_rank(int r) const { return world_ranks_[static_cast<size_t>(r)]; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // Marks the communicator broken for `reason` (a failure found elsewhere, e.g. on a device): later
  // calls fail, and destroying it aborts the job as after a failed collective.
  void break_with(const std::string& reason);

  // Progress questions between the ranks' watchdog threads (they need MPI_THREAD_MULTIPLE:
  // answers_progress() says whether this MPI has it). A rank whose work timed out asks every other
  // rank how far it got; every rank answers from its watchdog thread, which keeps running while the
  // rest of the process is hung. Neither call touches the collectives' state.
  bool answers_progress() const;
  // Answers the questions that have arrived with `progress`. Never blocks.
  void answer_progress(int64_t progress);
  // Each rank's answer within `grace_s` seconds (this rank's is `mine`; std::nullopt: no answer: dead
  // or its whole process hung), answering others' questions meanwhile.
  std::vector<std::optional<int64_t>> ask_progress(int64_t mine, double grace_s);

 private:
  struct Split {};
  MpiComm(Split, const MpiComm& parent, MPI_Comm comm, MPI_Comm notices);

  void set_up();
  void initialize_mpi();
  void find_world_ranks();
  void find_node();
  void find_node_names();
  std::string node_of(int r) const;
  size_t halo_bytes(const MLPH_HaloSpec& spec) const;
  void move_faces(int32_t dim, mlph::sdk::halo::Transfer& t);
  void check(int result, const char* call);
  void check_rank(int32_t r, const char* what) const;
  void begin(const char* operation, size_t bytes);
  void wait(std::vector<MPI_Request>& requests);
  [[noreturn]] void time_out();
  MPI_Op reduce_op(MLPH_DType t, MLPH_ReduceOp op) const;

  const MLPH_HostApi* host_;
  std::string name_ = "comms/mpi";
  double timeout_s_ = 300;
  bool owns_mpi_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  // Where a rank that timed out says which call it is stuck in, and where watchdogs ask for progress.
  MPI_Comm notices_ = MPI_COMM_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL, f16_max_ = MPI_OP_NULL, bf16_sum_ = MPI_OP_NULL, bf16_max_ = MPI_OP_NULL;
  bool split_ = false;            // split from another communicator: messages add the rank within it
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
  std::vector<int> world_ranks_;  // this communicator's ranks in MPI_COMM_WORLD
  std::vector<std::string> node_names_;  // each world rank's node (MPI_Get_processor_name)
  // The call in flight, for the timeout message; and why the communicator became unusable.
  uint64_t sequence_ = 0;
  std::string operation_;
  size_t bytes_ = 0;
  std::string broken_;
};

}  // namespace mlph::comms
