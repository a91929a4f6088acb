// Issue 28, defect 9: ranks that do not run the same thing are told apart at start. Their facts
// (rank_check.hpp) compared as every rank compares them after the allgather; the 2-rank run itself is
// in tests/comms/mpi/run_test.cpp (MpiRun.RanksThatDoNotRunTheSameThingAreRefusedNamingTheRankAndKey).
#include <gtest/gtest.h>

#include "mlph/core/rank_check.hpp"

using namespace mlph::core;

namespace {

RunFacts facts(const std::string& lr, const std::string& resumed = "(none)") {
  return {{"backend plug-in", "reference 1.0.0 (fnv1a64:0123)"},
          {"config optimizer.base_lr", lr},
          {"config train.epochs", "3"},
          {"resumed from", resumed}};
}

}  // namespace

TEST(RankCheck, FactsSurviveTheirEncodingWhateverTheyHold) {
  RunFacts odd = facts(std::string("a\0b\n=\x1b", 6));
  odd.emplace_back("", "");
  EXPECT_EQ(decode_facts(encode_facts(odd)), odd);
  std::string cut = encode_facts(odd);
  cut.pop_back();
  EXPECT_THROW(decode_facts(cut), RankMismatch);
  EXPECT_THROW(decode_facts(std::string(7, '\xff')), RankMismatch);
}

TEST(RankCheck, TheFirstRankAndKeyThatDifferAreNamed) {
  EXPECT_EQ(first_difference({facts("0.001"), facts("0.001"), facts("0.001")}), "");
  EXPECT_EQ(first_difference({facts("0.001"), facts("0.001"), facts("0.002"), facts("0.5")}),
            "rank 2 does not run what rank 0 runs: config optimizer.base_lr is '0.002' there, '0.001' on rank 0 (start "
            "every rank with the same configuration, plug-ins and checkpoint)");
  const std::string resumed = first_difference({facts("0.001", "epoch 2, micro-batch 8"), facts("0.001", "epoch 1, micro-batch 4")});
  EXPECT_NE(resumed.find("rank 1 does not run what rank 0 runs: resumed from is 'epoch 1, micro-batch 4' there, 'epoch 2, "
                         "micro-batch 8' on rank 0"),
            std::string::npos)
      << resumed;
  RunFacts fewer = facts("0.001");
  fewer.erase(fewer.begin() + 2);  // no train.epochs: another workload's schema
  EXPECT_NE(first_difference({facts("0.001"), fewer}).find("config train.epochs is (absent) there, '3' on rank 0"),
            std::string::npos);
  RunFacts more = facts("0.001");
  more.insert(more.begin() + 1, {"config model.extra", "1"});
  EXPECT_NE(first_difference({facts("0.001"), more}).find("config model.extra is '1' there, (absent) on rank 0"),
            std::string::npos);
  EXPECT_NE(first_difference({facts("0.001"), facts("0.001\n\x1b[2J")}).find("'0.001\\n\\u001b[2J' there"),
            std::string::npos)
      << "quoted escaped";
}

// Issue 36, defect 5: ranks resuming two runs' checkpoints of the same point (after epoch 1) would
// train on from different weights. The resume point states the checkpoint's identity: seed, config
// hash, graph fingerprint and a digest of its tensors' CRCs; any of them differing is a difference.
TEST(RankCheck, TheResumePointNamesTheCheckpointNotOnlyItsPosition) {
  Manifest a;
  a.identity.seed = 41, a.identity.config_hash = "00000000000000aa", a.identity.graph_fingerprint = "00000000000000bb";
  a.state.epochs_done = 1, a.state.micro_batches = 4;
  a.tensors = {TensorRecord{"conv1.kernel", "", MLPH_DTYPE_F32, {3}, 0, 12, 0x1234},
               TensorRecord{"conv1.kernel", "m", MLPH_DTYPE_F32, {3}, 64, 12, 0x5678}};
  EXPECT_EQ(resume_point(a), resume_point(Manifest(a)));
  EXPECT_NE(resume_point(a).find("epoch 1, step 0, micro-batch 4 of the checkpoint of seed 41, config 00000000000000aa, "
                                 "graph 00000000000000bb, tensors "),
            std::string::npos)
      << resume_point(a);
  Manifest other_weights = a;  // another run's checkpoint after epoch 1: the same position
  other_weights.tensors[0].crc32 = 0x4321;
  Manifest other_seed = a;
  other_seed.identity.seed = 42;
  Manifest other_config = a;
  other_config.identity.config_hash = "00000000000000ab";
  Manifest other_graph = a;
  other_graph.identity.graph_fingerprint = "00000000000000bc";
  Manifest swapped_slots = a;
  std::swap(swapped_slots.tensors[0].slot, swapped_slots.tensors[1].slot);
  for (const Manifest* m : {&other_weights, &other_seed, &other_config, &other_graph, &swapped_slots}) {
    EXPECT_NE(resume_point(*m), resume_point(a));
    const std::string said = first_difference({facts("0.001", resume_point(a)), facts("0.001", resume_point(*m))});
    EXPECT_NE(said.find("rank 1 does not run what rank 0 runs: resumed from is"), std::string::npos) << said;
  }
}

// Issue 39: across nodes, the line names each rank's node too (a node with another plug-in file or
// configuration); on one node it says only the rank, as before.
TEST(RankCheck, RanksOnSeveralNodesAreNamedWithTheirNode) {
  const std::vector<RunFacts> ranks = {facts("0.001"), facts("0.001"), facts("0.001"), facts("0.002")};
  EXPECT_EQ(first_difference(ranks, {"node1", "node1", "node2", "node2"}),
            "rank 3 on node node2 does not run what rank 0 on node node1 runs: config optimizer.base_lr is '0.002' "
            "there, '0.001' on rank 0 (start every rank with the same configuration, plug-ins and checkpoint)");
  EXPECT_EQ(first_difference(ranks, {"box", "box", "box", "box"}).rfind("rank 3 does not run what rank 0 runs: ", 0), 0u);
  EXPECT_NE(first_difference(ranks, {"node1", "node1", "node2", "node2\x1b[2J"}).find("rank 3 on node node2\\u001b[2J "),
            std::string::npos)
      << "a host name is quoted escaped";
}
