// comms/nccl's agreement between ranks: see bootstrap.hpp.
#include "bootstrap.hpp"

#include <vector>

namespace mlph::comms::nccl {
namespace {

struct Wire {
  int32_t code = MLPH_OK;
  char message[1020] = {};
};

std::string text_of(const char* message, size_t capacity) { return std::string(message, strnlen(message, capacity)); }

}  // namespace

namespace detail {
void fill(Made& made, MLPH_Code code, const std::string& message) {
  made.code = code == MLPH_OK ? MLPH_INTERNAL : code;
  std::strncpy(made.message, message.c_str(), sizeof made.message - 1);
}

void fail_from_root(const Made& made, const std::string& where, int32_t rank) {
  const std::string message = text_of(made.message, sizeof made.message);
  if (rank == 0) sdk::fail(static_cast<MLPH_Code>(made.code), message);
  sdk::fail(static_cast<MLPH_Code>(made.code), where + ": stopped because rank 0 failed: " + message);
}
}  // namespace detail

void agree(mlph::sdk::Comm& comm, const std::string& where, const Outcome& mine) {
  const MLPH_Topology topology = comm.topology();
  Wire sent;
  sent.code = mine.code;
  std::strncpy(sent.message, mine.message.c_str(), sizeof sent.message - 1);
  std::vector<Wire> all(static_cast<size_t>(topology.size));
  comm.allgather(&sent, all.data(), sizeof sent);
  if (mine.code != MLPH_OK) sdk::fail(mine.code, mine.message);
  const Wire* first = nullptr;
  int others = 0;
  for (const Wire& w : all) {
    if (w.code == MLPH_OK) continue;
    if (!first) first = &w;
    else ++others;
  }
  if (!first) return;
  std::string message = where + ": stopped because another rank failed: " + text_of(first->message, sizeof first->message);
  if (others) message += " (and " + std::to_string(others) + " more rank(s))";
  sdk::fail(static_cast<MLPH_Code>(first->code), message);
}

}  // namespace mlph::comms::nccl
