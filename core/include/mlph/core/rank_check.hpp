// What every rank of a run must share, compared before the log begins. Ranks started with another
// configuration (a learning rate), other plug-in builds, or resumed from another checkpoint would
// train on, each its own way, with only rank 0's log to show for it; so each rank states its facts,
// the ranks compare their hashes (allgather) and, when one differs, the facts themselves, and every
// rank refuses the run with the one line that names the rank and the key.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlph/core/checkpoint_file.hpp"
#include "mlph/core/session.hpp"

namespace mlph::core {

// Ranks that do not run the same thing: one line naming the rank and the key.
class RankMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using RunFacts = std::vector<std::pair<std::string, std::string>>;  // key, value; by key

// This rank's facts: every configuration key the schema knows (the plug-ins' pass-through options
// may differ by node: threads, local paths), the seed in use, each plug-in's name, version and file
// hash, and where a resumed run goes on from.
RunFacts run_facts(const Session& session, const CheckpointReader* resume);

// Where a resumed run goes on from, and from which checkpoint: its position, and its identity (seed,
// config hash, graph fingerprint, and a digest of its tensors' names and CRCs), for two runs'
// checkpoints of the same epoch differ only there.
std::string resume_point(const Manifest& manifest);

// The facts as bytes and back (length-prefixed, so a value may hold any byte). decode_facts throws
// RankMismatch for bytes that are not an encoding.
std::string encode_facts(const RunFacts& facts);
RunFacts decode_facts(const std::string& bytes);

// "" when every rank's facts equal rank 0's; else one line naming the first rank that differs and
// its first key that does, with both values; with `nodes` (each rank's host name) spanning more than one
// node, each rank named with its node.
std::string first_difference(const std::vector<RunFacts>& per_rank, const std::vector<std::string>& nodes = {});

// Compares `facts` across the ranks of `session` through its comms plug-in; throws RankMismatch on
// every rank when they differ (the same line on each).
void check_ranks_agree(const Session& session, const RunFacts& facts);

}  // namespace mlph::core
