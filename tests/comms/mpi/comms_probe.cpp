// A 2-rank program that misbehaves on purpose, for comms_mpi_fault_test: rank 1 skips a barrier
// ("skip") or dies ("kill") while rank 0 waits in it, or the ranks broadcast different sizes
// ("truncate"); or, on a communicator split from the job's (as a spatially split sample's ranks),
// rank 1 hangs ("halo-skip") or dies ("halo-kill") after one halo exchange while rank 0 goes on to a
// second. Prints what rank 0's call returned. The plug-in is comms/mpi, or the one named after the
// timeout (nccl: its host side).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "comms_fixture.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: comms_probe skip|kill|truncate|halo-skip|halo-kill TIMEOUT_S [PLUGIN]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  mlph::test::LoadedComm comm(argc == 4 ? argv[3] : "mpi", {{"timeout_s", argv[2]}});
  if (scenario == "truncate") {
    char buffer[64] = {};
    const size_t bytes = comm.rank() == 0 ? 64 : 16;  // rank 1 expects less than the root sends
    const auto [code, message] = mlph::test::LoadedComm::outcome(comm.api()->broadcast(comm.comm(), buffer, bytes, 0));
    std::printf("rank %d: broadcast returned code %d: %s\n", comm.rank(), static_cast<int>(code), message.c_str());
    std::fflush(stdout);
    return code == MLPH_OK ? 0 : 3;
  }
  if (scenario == "halo-skip" || scenario == "halo-kill") {
    MLPH_Comm* sample = nullptr;
    if (comm.api()->split(comm.comm(), 0, comm.rank(), &sample)) return 4;
    std::vector<float> block(6 * 4, 1.0f);  // rows split over the 2 ranks: interior 4, halos of 1
    MLPH_HaloSpec spec{};
    spec.struct_size = sizeof spec;
    spec.dtype = MLPH_DTYPE_F32;
    spec.ndim = 2, spec.grid_ndim = 1;
    spec.shape[0] = 6, spec.shape[1] = 4;
    spec.grid[0] = 2, spec.halo[0] = 1;
    for (int round = 0; round < 2; ++round) {
      if (round == 1 && comm.rank() == 1) {
        if (scenario == "halo-kill") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(60));  // hung in the middle of the exchanges
        return 0;
      }
      const auto [code, message] =
          mlph::test::LoadedComm::outcome(comm.api()->halo_exchange(sample, block.data(), &spec));
      std::printf("rank %d: halo exchange %d returned code %d: %s\n", comm.rank(), round + 1, static_cast<int>(code),
                  message.c_str());
      std::fflush(stdout);
      if (code != MLPH_OK) {
        comm.api()->destroy(sample);  // broken: aborts the job
        return 3;
      }
    }
    comm.api()->destroy(sample);
    return 0;
  }
  if (comm.rank() == 1) {
    if (scenario == "kill") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // skips the barrier: hung
    return 0;
  }
  const auto [code, message] = mlph::test::LoadedComm::outcome(comm.api()->barrier(comm.comm()));
  std::printf("rank 0: barrier returned code %d: %s\n", static_cast<int>(code), message.c_str());
  std::fflush(stdout);
  return code == MLPH_OK ? 0 : 3;  // ~LoadedComm aborts the job on a broken communicator
}
