// A 2-rank program that misbehaves on purpose, for comms_mpi_fault_test: rank 1 skips a barrier
// ("skip") or dies ("kill") while rank 0 waits in it, or the ranks broadcast different sizes
// ("truncate"); or, on a communicator split from the job's (as a spatially split sample's ranks),
// rank 1 hangs ("halo-skip") or dies ("halo-kill") after one halo exchange while rank 0 goes on to a
// second. Prints what rank 0's call returned. The plug-in is comms/mpi, or the one named after the
// timeout (nccl: its host side).
// On several nodes (tests/cluster), "topology" prints each rank's place as the plug-in sees it, and
// "allreduce-rate" times allreduces of CosmoFlow's 8.9 M fp32 gradients.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "comms_fixture.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: comms_probe skip|kill|truncate|halo-skip|halo-kill|topology|allreduce-rate TIMEOUT_S [PLUGIN]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  mlph::test::LoadedComm comm(argc == 4 ? argv[3] : "mpi", {{"timeout_s", argv[2]}});
  if (scenario == "topology") {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const MLPH_Topology& t = comm.topology();
    std::printf("rank %d of %d: local rank %d of %d, %d nodes, on %s\n", t.rank, t.size, t.local_rank, t.local_size,
                t.nodes, host);
    std::fflush(stdout);
    return 0;
  }
  if (scenario == "allreduce-rate") {
    std::vector<float> gradients(8'900'000, 1.0f);  // CosmoFlow's parameters, in fp32
    const auto reduce = [&] {
      return mlph::test::LoadedComm::outcome(
          comm.api()->allreduce(comm.comm(), gradients.data(), gradients.size(), MLPH_DTYPE_F32, MLPH_REDUCE_AVERAGE));
    };
    if (reduce().first != MLPH_OK) return 3;  // connections set up outside the timing
    constexpr int kRounds = 5;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i)
      if (reduce().first != MLPH_OK) return 3;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRounds;
    if (comm.rank() == 0)
      std::printf("allreduce of %zu fp32 over %d ranks on %d nodes: %.1f ms, %.2f GB/s of gradients\n", gradients.size(),
                  comm.size(), comm.topology().nodes, 1e3 * s, gradients.size() * 4.0 / s / 1e9);
    std::fflush(stdout);
    return 0;
  }
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
