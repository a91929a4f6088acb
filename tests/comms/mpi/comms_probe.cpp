// A 2-rank program that misbehaves on purpose, for comms_mpi_fault_test: rank 1 skips a barrier
// ("skip") or dies ("kill") while rank 0 waits in it, or the ranks broadcast different sizes
// ("truncate"). Prints what rank 0's call returned.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comms_fixture.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: comms_probe skip|kill|truncate TIMEOUT_S\n");
    return 2;
  }
  const std::string scenario = argv[1];
  mlph::test::LoadedComm comm("mpi", {{"timeout_s", argv[2]}});
  if (scenario == "truncate") {
    char buffer[64] = {};
    const size_t bytes = comm.rank() == 0 ? 64 : 16;  // rank 1 expects less than the root sends
    const auto [code, message] = mlph::test::LoadedComm::outcome(comm.api()->broadcast(comm.comm(), buffer, bytes, 0));
    std::printf("rank %d: broadcast returned code %d: %s\n", comm.rank(), static_cast<int>(code), message.c_str());
    std::fflush(stdout);
    return code == MLPH_OK ? 0 : 3;
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
