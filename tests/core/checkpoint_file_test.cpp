// The checkpoint format on its own: what is written reads back exactly; the newest are kept and
// `latest` names the newest; a writer that dies before committing leaves the last good checkpoint
// (and `latest`) as they were, and its leftovers are cleared by the next commit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "mlph/core/checkpoint_file.hpp"

using namespace mlph::core;
namespace fs = std::filesystem;

namespace {

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("mlph-test-" + name);
  fs::remove_all(dir);
  return dir;
}

CheckpointIdentity identity() {
  CheckpointIdentity id;
  id.benchmark = "cosmoflow", id.workload = "cosmoflow", id.backend = "reference";
  id.graph_fingerprint = "0123456789abcdef", id.config_hash = "fedcba9876543210";
  id.seed = 18446744073709551557ULL;  // needs all 64 bits
  id.ranks = 4, id.accumulation = 2;
  id.hyperparameters = {{"optimizer.decay_boundaries", "[32, 64]"}, {"model.dropout", "0.5"}};
  return id;
}

void commit(const fs::path& dir, uint32_t epoch, uint32_t keep = 2) {
  CheckpointWriter w(dir, epoch);
  const float values[3] = {1.0f * static_cast<float>(epoch), -0.0f, 3.5f};
  w.add("w", "", MLPH_DTYPE_F32, {3}, values);
  w.commit(identity(), RunnerState{epoch, 10ULL * epoch, 5ULL * epoch, {}}, keep);
}

std::string latest(const fs::path& dir) {
  std::ifstream in(dir / "latest");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(CheckpointFile, WhatIsWrittenReadsBackExactly) {
  const fs::path dir = fresh("ckpt-roundtrip");
  const std::vector<float> weights = {0.1f, -2.5e-38f, std::nanf(""), 1e30f, 0.0f, -1.0f};
  const int64_t counter = -7;
  CheckpointWriter w(dir, 12);
  w.add("conv1.kernel", "", MLPH_DTYPE_F32, {1, 2, 3}, weights.data());
  w.add("conv1.kernel", "velocity", MLPH_DTYPE_F32, {1, 2, 3}, weights.data());
  w.add("steps", "", MLPH_DTYPE_I64, {}, &counter);
  const RunnerState state{12, 123456789012ULL, 61728394506ULL, {0.5, 0.1 + 0.2, std::nan(""), 1e-300}};
  EXPECT_EQ(w.commit(identity(), state, 2), dir / "epoch-000012");

  const CheckpointReader r(dir);  // through `latest`
  EXPECT_EQ(r.dir(), dir / "epoch-000012");
  const Manifest& m = r.manifest();
  EXPECT_EQ(m.identity.seed, identity().seed);
  EXPECT_EQ(m.identity.hyperparameters, identity().hyperparameters);
  EXPECT_EQ(m.identity.ranks, 4);
  EXPECT_EQ(m.identity.accumulation, 2u);
  EXPECT_EQ(m.state.micro_batches, state.micro_batches);
  EXPECT_EQ(m.state.optimizer_steps, state.optimizer_steps);
  ASSERT_EQ(m.state.metrics.size(), 4u);
  EXPECT_EQ(m.state.metrics[1], 0.1 + 0.2) << "metrics round-trip exactly";
  EXPECT_TRUE(std::isnan(m.state.metrics[2]));
  EXPECT_EQ(m.state.metrics[3], 1e-300);
  const TensorRecord* velocity = r.find("conv1.kernel", "velocity");
  ASSERT_NE(velocity, nullptr);
  EXPECT_EQ(velocity->offset % 64, 0u);
  EXPECT_EQ(velocity->shape, (std::vector<int64_t>{1, 2, 3}));
  const std::vector<std::byte> bytes = r.read(*velocity);
  ASSERT_EQ(bytes.size(), weights.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(bytes.data(), weights.data(), bytes.size()), 0);
  const TensorRecord* steps = r.find("steps", "");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(steps->dtype, MLPH_DTYPE_I64);
  EXPECT_TRUE(steps->shape.empty());
  EXPECT_EQ(r.find("conv1.kernel", "m"), nullptr);
}

TEST(CheckpointFile, TheNewestAreKeptAndLatestNamesTheNewest) {
  const fs::path dir = fresh("ckpt-keep");
  for (uint32_t epoch = 1; epoch <= 4; ++epoch) commit(dir, epoch);
  const std::vector<fs::path> kept = list_checkpoints(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].filename(), "epoch-000003");
  EXPECT_EQ(kept[1].filename(), "epoch-000004");
  EXPECT_EQ(latest(dir), "epoch-000004\n");
  commit(dir, 5, 1);
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
  EXPECT_THROW(commit(dir, 5), CheckpointError) << "the latest checkpoint is never replaced";
  EXPECT_EQ(CheckpointReader(dir).manifest().state.epochs_done, 5u);
}

TEST(CheckpointFile, AWriterKilledBeforeCommittingLeavesTheLastGoodOne) {
  const fs::path dir = fresh("ckpt-crash");
  commit(dir, 1);
  const pid_t child = fork();
  if (child == 0) {  // dies half-way through writing epoch 2, as under SIGKILL: no destructor runs
    CheckpointWriter w(dir, 2);
    const float big[1024] = {};
    w.add("w", "", MLPH_DTYPE_F32, {1024}, big);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(fs::exists(dir / ".epoch-000002.tmp")) << "the dead writer's leftovers";
  EXPECT_EQ(latest(dir), "epoch-000001\n");
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
  EXPECT_EQ(CheckpointReader(dir).manifest().state.epochs_done, 1u);
  commit(dir, 2);
  EXPECT_FALSE(fs::exists(dir / ".epoch-000002.tmp"));
  EXPECT_EQ(CheckpointReader(dir).manifest().state.epochs_done, 2u);
  // Killed after epoch 3's rename but before `latest` moved on: the run goes on from epoch 2 and writes
  // epoch 3 again, replacing the complete one that `latest` never named.
  commit(dir, 3);
  std::ofstream(dir / "latest") << "epoch-000002\n";
  commit(dir, 3);
  EXPECT_EQ(latest(dir), "epoch-000003\n");
}

TEST(CheckpointFile, ALatestNamingNothingIsAnError) {
  const fs::path dir = fresh("ckpt-dangling");
  commit(dir, 1);
  std::ofstream(dir / "latest") << "epoch-000009\n";
  try {
    CheckpointReader r(dir);
    FAIL() << "opened";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("latest: names 'epoch-000009', which holds no manifest.json"), std::string::npos)
        << e.what();
  }
}

// Issue 36, defect 12: a run killed between a checkpoint's rename and latest's leaves whole checkpoints
// and no `latest` (the first one) or an older one: resuming the directory takes the newest whole
// checkpoint, not a leftover temporary one; a directory with neither is still an error naming it.
TEST(CheckpointFile, WithoutLatestTheNewestWholeCheckpointResumes) {
  const fs::path dir = fresh("ckpt-no-latest");
  commit(dir, 1);
  commit(dir, 2);
  fs::remove(dir / "latest");
  fs::create_directories(dir / ".epoch-000003.tmp");  // a writer that died before its rename
  fs::create_directories(dir / "epoch-000004");       // no manifest: not whole
  EXPECT_EQ(CheckpointReader(dir).dir(), dir / "epoch-000002");
  EXPECT_EQ(CheckpointReader(dir).manifest().state.epochs_done, 2u);
  const fs::path empty = fresh("ckpt-no-latest-empty");
  fs::create_directories(empty / "epoch-000001");
  try {
    CheckpointReader r(empty);
    FAIL() << "opened";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("holds neither a checkpoint (manifest.json) nor a 'latest'"), std::string::npos)
        << e.what();
  }
}

// A checkpoint inside an epoch (a run stopped by a signal): named after its step, version 2 (a
// version 1 reader would resume it at the epoch's start), its position read back; the checkpoint at
// an epoch's end stays version 1, which older builds read.
TEST(CheckpointFile, InsideAnEpochIsVersion2AndSortsByStep) {
  const fs::path dir = fresh("ckpt-step");
  commit(dir, 2);
  CheckpointWriter w(dir, 2, 5);
  const float values[3] = {1, 2, 3};
  w.add("w", "", MLPH_DTYPE_F32, {3}, values);
  w.add("w", "rank-1", MLPH_DTYPE_F32, {3}, values);
  EXPECT_EQ(w.commit(identity(), RunnerState{2, 25, 12, {0.5, 0.25}, 5}, 3), dir / "epoch-000002-step-000005");
  commit(dir, 3, 3);
  const std::vector<fs::path> kept = list_checkpoints(dir);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[1].filename(), "epoch-000002-step-000005") << "between the epochs it lies between";

  const CheckpointReader inside(kept[1]);
  EXPECT_EQ(inside.manifest().state.epochs_done, 2u);
  EXPECT_EQ(inside.manifest().state.steps_done, 5u);
  EXPECT_EQ(inside.manifest().state.micro_batches, 25u);
  EXPECT_NE(inside.find("w", "rank-1"), nullptr);
  const auto version_of = [](const fs::path& checkpoint) {
    std::ifstream in(checkpoint / "manifest.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.substr(text.find("\"version\": ") + 11, 1);
  };
  EXPECT_EQ(version_of(kept[1]), "2");
  EXPECT_EQ(version_of(kept[0]), "1");
  EXPECT_EQ(CheckpointReader(kept[0]).manifest().state.steps_done, 0u);

  // A version from a later build is refused, naming it.
  std::ifstream in(kept[1] / "manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"version\": 2"), 12, "\"version\": 3");
  std::ofstream(kept[1] / "manifest.json") << text;
  try {
    CheckpointReader r(kept[1]);
    FAIL() << "opened";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint format version 3; this build reads versions 1 to 2"), std::string::npos)
        << e.what();
  }
}
