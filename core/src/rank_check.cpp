#include "mlph/core/rank_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "mlph/core/fnv1a.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/system_probe.hpp"
#include "mlph/core/text_input.hpp"

namespace mlph::core {
namespace {

void put_length(std::string& out, uint64_t n) { out.append(reinterpret_cast<const char*>(&n), sizeof n); }

// Every rank's `bytes` (of any length) through fixed-size allgathers: the lengths, then each padded to
// the longest.
std::vector<std::string> allgather_bytes(const Session& session, const std::string& bytes) {
  const auto ranks = static_cast<size_t>(session.topology().size);
  const MLPH_CommsApi* comms = session.comms_api();
  uint64_t mine = bytes.size();
  std::vector<uint64_t> lengths(ranks);
  check(comms->allgather(session.comm(), &mine, lengths.data(), sizeof mine), "comms: comparing the ranks' runs");
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::string padded = bytes;
  padded.resize(longest);
  std::string all(longest * ranks, '\0');
  check(comms->allgather(session.comm(), padded.data(), all.data(), longest), "comms: comparing the ranks' runs");
  std::vector<std::string> out;
  for (size_t r = 0; r < ranks; ++r) out.push_back(all.substr(r * longest, lengths[r]));
  return out;
}

}  // namespace

RunFacts run_facts(const Session& session, const CheckpointReader* resume) {
  std::map<std::string, std::string> facts;
  for (const auto& [key, value] : session.config().values()) facts["config " + key] = value.text;
  facts["config run.seed"] = std::to_string(session.seed());  // rank 0's, as every rank uses it
  for (const LoadedPlugin* p : session.plugins()) {
    const MLPH_Plugin& d = *p->descriptor;
    facts[fmt::format("{} plug-in", kind_name(d.kind))] =
        fmt::format("{} {} ({})", d.name, d.version ? d.version : "", p->file_hash);
  }
  facts["resumed from"] = resume ? resume_point(resume->manifest()) : "(none)";
  return {facts.begin(), facts.end()};
}

std::string resume_point(const Manifest& m) {
  Fnv1a tensors;  // the tensors' identities: another run's checkpoint of the same point differs here
  for (const TensorRecord& t : m.tensors) {
    tensors.add(t.name), tensors.add(t.slot);
    tensors.add(&t.crc32, sizeof t.crc32), tensors.add(&t.bytes, sizeof t.bytes);
  }
  return fmt::format("epoch {}, step {}, micro-batch {} of the checkpoint of seed {}, config {}, graph {}, tensors {}",
                     m.state.epochs_done, m.state.steps_done, m.state.micro_batches, m.identity.seed,
                     m.identity.config_hash, m.identity.graph_fingerprint, tensors.hex());
}

std::string encode_facts(const RunFacts& facts) {
  std::string out;
  for (const auto& [key, value] : facts) {
    put_length(out, key.size()), out += key;
    put_length(out, value.size()), out += value;
  }
  return out;
}

RunFacts decode_facts(const std::string& bytes) {
  RunFacts facts;
  size_t at = 0;
  const auto next = [&] {
    uint64_t n = 0;
    if (bytes.size() - at < sizeof n) throw RankMismatch("a rank sent facts that do not decode");
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += sizeof n;
    if (bytes.size() - at < n) throw RankMismatch("a rank sent facts that do not decode");
    at += n;
    return bytes.substr(at - n, n);
  };
  while (at < bytes.size()) {
    std::string key = next();
    facts.emplace_back(std::move(key), next());
  }
  return facts;
}

std::string first_difference(const std::vector<RunFacts>& per_rank, const std::vector<std::string>& nodes) {
  if (per_rank.empty()) return "";
  const bool several_nodes = nodes.size() == per_rank.size() &&
                             std::any_of(nodes.begin(), nodes.end(), [&](const std::string& n) { return n != nodes[0]; });
  const auto rank = [&](size_t r) {
    return several_nodes ? fmt::format("rank {} on node {}", r, escaped(nodes[r], 64)) : fmt::format("rank {}", r);
  };
  const std::map<std::string, std::string> first(per_rank[0].begin(), per_rank[0].end());
  for (size_t r = 1; r < per_rank.size(); ++r) {
    std::map<std::string, std::string> other(per_rank[r].begin(), per_rank[r].end());
    if (other == first) continue;
    // The first key (in order) that one lacks or that differs.
    auto a = first.begin();
    auto b = other.begin();
    while (a != first.end() && b != other.end() && *a == *b) ++a, ++b;
    const bool a_first = b == other.end() || (a != first.end() && a->first <= b->first);
    const std::string key = a_first ? a->first : b->first;
    const auto value = [&](const std::map<std::string, std::string>& facts) {
      const auto it = facts.find(key);
      return it == facts.end() ? std::string("(absent)") : fmt::format("'{}'", escaped(it->second, 120));
    };
    return fmt::format("{} does not run what {} runs: {} is {} there, {} on rank 0 (start every rank with "
                       "the same configuration, plug-ins and checkpoint)",
                       rank(r), rank(0), key, value(other), value(first));
  }
  return "";
}

void check_ranks_agree(const Session& session, const RunFacts& facts) {
  if (session.topology().size == 1) return;
  const std::string mine = encode_facts(facts);
  Fnv1a hash;
  hash.add(mine.data(), mine.size());
  const auto ranks = static_cast<size_t>(session.topology().size);
  std::vector<uint64_t> hashes(ranks);
  check(session.comms_api()->allgather(session.comm(), &hash.h, hashes.data(), sizeof hash.h),
        "comms: comparing the ranks' runs");
  if (std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })) return;
  std::vector<RunFacts> per_rank;
  for (const std::string& bytes : allgather_bytes(session, mine)) per_rank.push_back(decode_facts(bytes));
  const std::string difference = first_difference(per_rank, allgather_bytes(session, host_name()));
  throw RankMismatch(difference.empty() ? "the ranks' runs differ (their fingerprints do)" : difference);
}

}  // namespace mlph::core
