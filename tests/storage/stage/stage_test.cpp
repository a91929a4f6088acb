// storage/stage: shards, byte-identical copies (plain and tar.zst), gzip files inflated while
// staging, checksums, space and read faults with errors naming rank and file, untrusted manifests
// and archives, the clean-up when a run is abandoned, and an end-to-end timed run checked by the
// official checker.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../../integration/cli.hpp"
#include "manifest.hpp"
#include "mlph/core/host.hpp"
#include "mlph/core/plugin_loader.hpp"
#include "mlph/sdk/util/error.hpp"

namespace fs = std::filesystem;
using namespace mlph::test;
using mlph::core::host_api;

namespace {

// A comms table for one rank of a pretend topology: collectives are local, `peer_failed` is what
// the other ranks report to allgather, `tag` is what "rank 0" broadcasts.
struct FakeComm {
  MLPH_Topology topology;
  int32_t peer_failed = 0;
  uint64_t tag = 0x1234;
};
FakeComm* fake(MLPH_Comm* c) { return reinterpret_cast<FakeComm*>(c); }
const MLPH_CommsApi kFakeComms = {
    sizeof(MLPH_CommsApi), nullptr, nullptr, nullptr,
    [](MLPH_Comm* c, MLPH_Topology* out) -> MLPH_Error* { *out = fake(c)->topology; return nullptr; },
    [](MLPH_Comm*, void*, size_t, MLPH_DType, MLPH_ReduceOp) -> MLPH_Error* { return nullptr; },
    [](MLPH_Comm* c, void* data, size_t bytes, int32_t) -> MLPH_Error* {
      std::memcpy(data, &fake(c)->tag, std::min(bytes, sizeof(uint64_t)));
      return nullptr;
    },
    [](MLPH_Comm* c, const void* send, void* recv, size_t bytes) -> MLPH_Error* {
      // The others' outcome: `peer_failed` first, the rest (their node's name) empty.
      for (int32_t r = 0; r < fake(c)->topology.size; ++r) {
        char* slot = static_cast<char*>(recv) + r * bytes;
        if (r == fake(c)->topology.rank) {
          std::memcpy(slot, send, bytes);
        } else {
          std::memset(slot, 0, bytes);
          std::memcpy(slot, &fake(c)->peer_failed, std::min(bytes, sizeof(int32_t)));
        }
      }
      return nullptr;
    },
    [](MLPH_Comm*) -> MLPH_Error* { return nullptr; },
    nullptr,  // halo_exchange (ABI 1.1): not used by staging
    nullptr,  // split (ABI 1.2): not used by staging
    nullptr,  // halo_accumulate (ABI 1.5): not used by staging
};

FakeComm rank_of(int32_t rank, int32_t size, int32_t local_rank = 0, int32_t local_size = 1) {
  return {{sizeof(MLPH_Topology), nullptr, rank, size, local_rank, local_size, size / local_size}};
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != mlph::stage::kManifestName) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A stage storage object from the built plug-in, with the result of one stage call.
class Stager {
 public:
  explicit Stager(std::map<std::string, std::string> options)
      : plugin_(mlph::core::PluginLoader({MLPH_PLUGIN_DIR}).load(MLPH_KIND_STORAGE, "stage")),
        api_(plugin_.api<MLPH_StorageApi>()) {
    std::vector<MLPH_KeyValue> kv;
    for (const auto& [k, v] : options) kv.push_back({k.c_str(), v.c_str()});
    mlph::core::check(api_->create(host_api(), kv.data(), kv.size(), &storage_), "create");
  }
  ~Stager() { api_->destroy(storage_); }

  // Stages `source` as `comm`'s rank; returns "" or the error message (code in `code`).
  std::string stage(const fs::path& source, FakeComm& comm) {
    const MLPH_CommsHandle handle{sizeof(MLPH_CommsHandle), nullptr, &kFakeComms, reinterpret_cast<MLPH_Comm*>(&comm)};
    stats = {};
    stats.struct_size = sizeof stats;
    MLPH_Error* error = api_->stage(storage_, source.c_str(), &handle, &stats);
    if (!error) return "";
    code = mlph::core::error_code(error);
    std::string message = mlph::core::error_message(error);
    mlph::core::error_free(error);
    return message;
  }

  void abandon() { api_->abandon(storage_); }
  const MLPH_StorageApi* api() const { return api_; }
  MLPH_Storage* storage() const { return storage_; }

  std::vector<std::string> list(const fs::path& dir) {
    std::vector<std::string> out;
    mlph::core::check(api_->list(storage_, dir.c_str(), ".tfrecord",
                                 [](void* ctx, const char* p) { static_cast<std::vector<std::string>*>(ctx)->push_back(p); },
                                 &out));
    return out;
  }

  std::string read(const std::string& path) {
    std::string bytes;
    size_t size = 0;
    auto alloc = [](void* ctx, size_t n) -> void* {
      auto* s = static_cast<std::string*>(ctx);
      s->resize(n);
      return s->data();
    };
    mlph::core::check(api_->read(storage_, path.c_str(), alloc, &bytes, &size), "read");
    return bytes;
  }

  MLPH_StageStats stats{};
  MLPH_Code code = MLPH_OK;

 private:
  mlph::core::LoadedPlugin plugin_;
  const MLPH_StorageApi* api_;
  MLPH_Storage* storage_ = nullptr;
};

class Stage : public ::testing::Test {
 protected:
  // One small generated CosmoFlow set for the whole suite: 16 train and 8 validation files, in a
  // folder of this process's own: CTest runs each test of the suite as a process of its own, in parallel.
  // No assertion here: gtest turns a failed suite set-up into skipped tests, which ctest reports as
  // Skipped. The failure is kept and each test's SetUp fails on it instead.
  static void SetUpTestSuite() {
    root_ = fresh_dir("stage-" + std::to_string(::getpid()));
    const CliResult r = run_cli("--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --set data.synthetic.train=16 "
                                "--set data.synthetic.valid=8 --generate-data " + (root_ / "data").string());
    if (r.exit_code != 0) setup_error_ = "generating the data: " + r.output;
  }
  void SetUp() override { ASSERT_EQ(setup_error_, ""); }
  static inline std::string setup_error_;
  static fs::path data() { return root_ / "data"; }
  static fs::path dir(const std::string& name) {
    fs::remove_all(root_ / name);
    fs::create_directories(root_ / name);
    return root_ / name;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static inline fs::path root_;
};

std::vector<std::string> every_other(const std::vector<std::string>& all, size_t rank, size_t size) {
  std::vector<std::string> out;
  for (size_t i = rank; i < all.size() / size * size; i += size) out.push_back(all[i]);
  return out;
}

// The staged copy of `source` a rank lists holds exactly files[rank::size] of `data`, byte for byte.
void expect_shard(Stager& s, const fs::path& source, const fs::path& data, const std::string& split, size_t rank,
                  size_t size) {
  const std::vector<std::string> listed = s.list(source / split);
  std::vector<std::string> listed_names;
  for (const std::string& p : listed) {
    EXPECT_EQ(s.read(p), slurp(data / split / fs::path(p).filename())) << p;
    listed_names.push_back(fs::path(p).filename().string());
  }
  EXPECT_EQ(listed_names, every_other(names(data / split), rank, size)) << split << " rank " << rank;
}

TEST_F(Stage, EachRankStagesItsShardOfADirectoryByteForByte) {
  const auto before = names(data() / "train");
  for (int32_t rank = 0; rank < 2; ++rank) {
    const fs::path target = dir("target" + std::to_string(rank));
    {
      Stager s({{"target", target.string()}});
      FakeComm comm = rank_of(rank, 2);
      ASSERT_EQ(s.stage(data(), comm), "");
      EXPECT_EQ(s.stats.files, 12u);  // (16 + 8) / 2
      EXPECT_EQ(s.stats.shard_index, 0);
      EXPECT_EQ(s.stats.shard_count, 1);  // one rank per node: it reads its whole staged shard
      EXPECT_EQ(s.stats.bytes_read, s.stats.bytes_written);
      expect_shard(s, data(), data(), "train", static_cast<size_t>(rank), 2);
      expect_shard(s, data(), data(), "validation", static_cast<size_t>(rank), 2);
      EXPECT_EQ(fs::path(s.list(data() / "train").front()).parent_path().parent_path().parent_path(), target);
    }
    EXPECT_TRUE(fs::is_empty(target)) << "the staged copy is removed at destroy";
  }
  EXPECT_EQ(names(data() / "train"), before) << "the source is never modified";
}

TEST_F(Stage, ThreeRanksStageWholeShardsAndKeepLeavesTheCopy) {
  const fs::path target = dir("target-keep");
  {
    Stager s({{"target", target.string()}, {"keep", "1"}, {"threads", "3"}});
    FakeComm comm = rank_of(2, 3);
    ASSERT_EQ(s.stage(data(), comm), "");
    EXPECT_EQ(s.stats.files, 5u + 2u);  // 15 of 16 train files and 6 of 8 validation: whole shards
    expect_shard(s, data(), data(), "train", 2, 3);
  }
  EXPECT_FALSE(fs::is_empty(target));
}

TEST_F(Stage, PackedArchivesUnpackToTheSameShard) {
  for (uint32_t parts : {4u, 3u}) {
    const fs::path packed = dir("packed" + std::to_string(parts));
    for (const char* split : {"train", "validation"})
      ASSERT_EQ(mlph::stage::pack_split(data() / split, packed / split, parts, 3).files, split == std::string("train") ? 16u : 8u);
    Stager s({{"target", dir("target-packed").string()}});
    FakeComm comm = rank_of(1, 2);
    ASSERT_EQ(s.stage(packed, comm), "");
    expect_shard(s, packed, data(), "train", 1, 2);
    expect_shard(s, packed, data(), "validation", 1, 2);
    // 4 parts over 2 ranks: rank 1 reads only parts 1 and 3; 3 parts: all of them.
    uint64_t expected = 0;
    for (const char* split : {"train", "validation"})
      for (uint32_t p = parts == 4 ? 1 : 0; p < parts; p += parts == 4 ? 2 : 1)
        expected += fs::file_size(packed / split / mlph::stage::part_name(p));
    EXPECT_EQ(s.stats.bytes_read, expected) << parts << " parts";
  }
}

TEST_F(Stage, ChecksumMismatchNamesTheFile) {
  const fs::path packed = dir("packed-bad");
  mlph::stage::pack_split(data() / "train", packed / "train", 2, 1);
  auto manifest = mlph::stage::read_manifest(packed / "train" / mlph::stage::kManifestName);
  manifest.entries[2].crc32 ^= 1;  // file 2 belongs to rank 0 of 2
  mlph::stage::write_manifest(packed / "train" / mlph::stage::kManifestName, manifest);
  Stager s({{"target", dir("target-bad").string()}});
  FakeComm comm = rank_of(0, 2);
  const std::string error = s.stage(packed, comm);
  EXPECT_EQ(s.code, MLPH_DATA_LOSS);
  EXPECT_NE(error.find("rank 0"), std::string::npos) << error;
  EXPECT_NE(error.find(manifest.entries[2].name), std::string::npos) << error;
  EXPECT_NE(error.find("checksum mismatch"), std::string::npos) << error;

  // A plain directory with a manifest whose file changed after it was written.
  const fs::path plain = dir("plain-bad");
  mlph::stage::pack_split(data() / "validation", plain / "validation", 0, 1);
  const auto victim = plain / "validation" / names(plain / "validation").front();  // file 0: rank 0's
  std::fstream(victim, std::ios::in | std::ios::out | std::ios::binary).put('\x7f');
  Stager t({{"target", dir("target-bad2").string()}});
  const std::string error2 = t.stage(plain, comm);
  EXPECT_EQ(t.code, MLPH_DATA_LOSS);
  EXPECT_NE(error2.find(victim.string()), std::string::npos) << error2;
}

TEST_F(Stage, UnreadableShardNamesRankAndFile) {
  const fs::path plain = dir("plain-missing");
  mlph::stage::pack_split(data() / "train", plain / "train", 0, 1);
  const auto victim = plain / "train" / names(plain / "train")[3];  // file 3: rank 1's
  fs::remove(victim);  // listed in the manifest, gone from the "parallel file system"
  Stager s({{"target", dir("target-missing").string()}});
  FakeComm comm = rank_of(1, 2);
  const std::string error = s.stage(plain, comm);
  EXPECT_EQ(s.code, MLPH_NOT_FOUND);
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find(victim.string()), std::string::npos) << error;
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;

  // The healthy rank learns that its peer failed and does not go on with half a dataset.
  Stager healthy({{"target", dir("target-peer").string()}});
  FakeComm peer = rank_of(0, 2);
  peer.peer_failed = 1;
  const std::string aborted = healthy.stage(plain, peer);
  EXPECT_EQ(healthy.code, MLPH_ABORTED);
  EXPECT_NE(aborted.find("rank 1 failed"), std::string::npos) << aborted;
}

TEST_F(Stage, NoSpaceIsAClearErrorBeforeCopying) {
  Stager s({{"target", dir("target-full").string()}, {"max_bytes", "1000"}});
  FakeComm comm = rank_of(1, 2);
  const std::string error = s.stage(data(), comm);
  EXPECT_EQ(s.code, MLPH_RESOURCE_EXHAUSTED);
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("storage.max_bytes = 1000"), std::string::npos) << error;

  // A real small file system, when this process may mount one (root): the statvfs check fires.
  const fs::path tiny = dir("tiny");
  if (::mount("tmpfs", tiny.c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  std::string error2;
  {
    Stager t({{"target", tiny.string()}});
    error2 = t.stage(data(), comm);
    EXPECT_EQ(t.code, MLPH_RESOURCE_EXHAUSTED);
  }
  ::umount(tiny.c_str());
  EXPECT_NE(error2.find("no space to stage"), std::string::npos) << error2;
}

// Issue 36, defect 8: two ranks of one node staging into a RAM disk that holds both shards with a
// quarter to spare. Rank 1 starts only once rank 0 has copied (or a second on): had it measured the
// free space then, it would count rank 0's copies twice and refuse. Each rank measures before any
// copies (a collective between), so both stage. Collectives here are real: two threads meet.
namespace {

struct Meeting {
  std::barrier<> all{2};
  std::vector<char> slots;
};
struct ThreadComm {
  MLPH_Topology topology;
  Meeting* meeting;
};
ThreadComm* threaded(MLPH_Comm* c) { return reinterpret_cast<ThreadComm*>(c); }
const MLPH_CommsApi kThreadComms = {
    sizeof(MLPH_CommsApi), nullptr, nullptr, nullptr,
    [](MLPH_Comm* c, MLPH_Topology* out) -> MLPH_Error* { *out = threaded(c)->topology; return nullptr; },
    [](MLPH_Comm*, void*, size_t, MLPH_DType, MLPH_ReduceOp) -> MLPH_Error* { return nullptr; },
    [](MLPH_Comm*, void* data, size_t bytes, int32_t) -> MLPH_Error* {  // the same tag for both, no wait (as
      const uint64_t tag = 0x3636;                                      // MPI_Bcast's root may return at once)
      std::memcpy(data, &tag, std::min(bytes, sizeof tag));
      return nullptr;
    },
    [](MLPH_Comm* c, const void* send, void* recv, size_t bytes) -> MLPH_Error* {
      Meeting& m = *threaded(c)->meeting;
      const int32_t rank = threaded(c)->topology.rank;
      m.all.arrive_and_wait();
      if (rank == 0) m.slots.assign(2 * bytes, 0);
      m.all.arrive_and_wait();
      std::memcpy(m.slots.data() + static_cast<size_t>(rank) * bytes, send, bytes);
      m.all.arrive_and_wait();
      std::memcpy(recv, m.slots.data(), 2 * bytes);
      m.all.arrive_and_wait();
      return nullptr;
    },
    [](MLPH_Comm* c) -> MLPH_Error* { threaded(c)->meeting->all.arrive_and_wait(); return nullptr; },
    nullptr, nullptr, nullptr,
};

uint64_t pages(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += (e.file_size() + 4095) / 4096 * 4096;
  return total;
}

}  // namespace

TEST_F(Stage, TheNodesFreeSpaceIsMeasuredBeforeAnyRankCopies) {
  const fs::path ram = dir("target-node");
  const uint64_t both = pages(data());
  const uint64_t size = (both + both / 4 + 65536) / 4096 * 4096;
  if (::mount("tmpfs", ram.c_str(), "tmpfs", 0, ("size=" + std::to_string(size)).c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  Meeting meeting;
  std::string errors[2];
  {
    Stager rank0({{"target", ram.string()}}), rank1({{"target", ram.string()}});
    ThreadComm comm0{{sizeof(MLPH_Topology), nullptr, 0, 2, 0, 2, 1}, &meeting};
    ThreadComm comm1{{sizeof(MLPH_Topology), nullptr, 1, 2, 1, 2, 1}, &meeting};
    const auto stage = [&](Stager& s, ThreadComm& c, std::string& error) {
      const MLPH_CommsHandle handle{sizeof(MLPH_CommsHandle), nullptr, &kThreadComms, reinterpret_cast<MLPH_Comm*>(&c)};
      MLPH_StageStats stats{};
      stats.struct_size = sizeof stats;
      if (MLPH_Error* e = s.api()->stage(s.storage(), data().c_str(), &handle, &stats)) {
        error = mlph::core::error_message(e);
        mlph::core::error_free(e);
      }
    };
    std::thread first([&] { stage(rank0, comm0, errors[0]); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < deadline && pages(ram) < both / 4)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::thread second([&] { stage(rank1, comm1, errors[1]); });
    first.join();
    second.join();
  }
  ::umount(ram.c_str());
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST_F(Stage, ATargetSharedAcrossNodesIsRefused) {
  const fs::path target = dir("target-shared");
  Stager node0({{"target", target.string()}}), node1({{"target", target.string()}});
  FakeComm rank0 = rank_of(0, 2), rank1 = rank_of(1, 2);  // same broadcast tag: the same directory
  ASSERT_EQ(node0.stage(data(), rank0), "");
  const std::string error = node1.stage(data(), rank1);
  EXPECT_EQ(node1.code, MLPH_FAILED_PRECONDITION);
  EXPECT_NE(error.find("node-local"), std::string::npos) << error;
}

TEST_F(Stage, RamTargetIsDevShm) {
  Stager s(std::map<std::string, std::string>{{"target", "ram"}});
  FakeComm comm = rank_of(0, 1);
  ASSERT_EQ(s.stage(data(), comm), "");
  const auto listed = s.list(data() / "validation");
  ASSERT_EQ(listed.size(), 8u);
  EXPECT_EQ(listed.front().rfind("/dev/shm/mlperf-stage-", 0), 0u) << listed.front();
}

// ---- inflate=1: gzip files staged decompressed ----

// `members` written to `file` as a gzip stream of one member each (gzopen "ab" appends a member).
void write_gzip(const fs::path& file, const std::vector<std::string>& members) {
  fs::remove(file);
  for (const std::string& member : members) {
    gzFile gz = gzopen(file.c_str(), "ab");
    ASSERT_NE(gz, nullptr) << file;
    ASSERT_EQ(gzwrite(gz, member.data(), static_cast<unsigned>(member.size())), static_cast<int>(member.size()));
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
}

// What `file` inflates to, every member (zlib's gzread, as gzip -d).
std::string gunzip_file(const fs::path& file) {
  gzFile gz = gzopen(file.c_str(), "rb");
  std::string out;
  char buffer[1 << 16];
  for (int n; gz && (n = gzread(gz, buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
  if (gz) gzclose(gz);
  return out;
}

// Text that deflates about threefold: a real deflate stream (not stored blocks), more than the
// inflater's 1 MiB buffer.
std::string compressible(size_t bytes, uint32_t seed) {
  std::string out;
  for (uint32_t i = seed; out.size() < bytes; ++i) out += std::to_string(i * 2654435761u % 1000003u) + ' ';
  out.resize(bytes);
  return out;
}

class StageInflate : public Stage {
 protected:
  // train/: a.tfrecord (gzip, 3 MiB inflated), b.tfrecord (plain), c.tfrecord (gzip of three
  // members), d.tfrecord (one byte, gzip's first magic byte: plain); `inflated` what each stages as.
  fs::path make_source(const std::string& name) {
    const fs::path source = dir(name);
    fs::create_directories(source / "train");
    inflated = {{"a.tfrecord", compressible(3 << 20, 1)},
                {"b.tfrecord", "plain bytes, not gzip"},
                {"c.tfrecord", ""},
                {"d.tfrecord", "\x1f"}};
    const std::vector<std::string> members = {compressible(1 << 20, 2), "", compressible(1500000, 3)};
    for (const std::string& m : members) inflated["c.tfrecord"] += m;
    write_gzip(source / "train" / "a.tfrecord", {inflated["a.tfrecord"]});
    write_gzip(source / "train" / "c.tfrecord", members);
    std::ofstream(source / "train" / "b.tfrecord", std::ios::binary) << inflated["b.tfrecord"];
    std::ofstream(source / "train" / "d.tfrecord", std::ios::binary) << inflated["d.tfrecord"];
    return source;
  }
  // Each listed staged file of train/ by name, read through the plug-in.
  static std::map<std::string, std::string> staged(Stager& s, const fs::path& source) {
    std::map<std::string, std::string> out;
    for (const std::string& p : s.list(source / "train")) out[fs::path(p).filename().string()] = s.read(p);
    return out;
  }
  static uint64_t total_size(const std::map<std::string, std::string>& files) {
    uint64_t total = 0;
    for (const auto& [name, bytes] : files) total += bytes.size();
    return total;
  }
  std::map<std::string, std::string> inflated;
};

TEST_F(StageInflate, GzipFilesStageInflatedOthersAsTheyAre) {
  const fs::path source = make_source("gz-src");
  ASSERT_EQ(gunzip_file(source / "train" / "c.tfrecord"), inflated["c.tfrecord"]) << "three members, as gzip -d";
  std::map<std::string, std::string> raw;
  for (const auto& [name, bytes] : inflated) raw[name] = slurp(source / "train" / name);
  ASSERT_LT(raw["a.tfrecord"].size() * 2, inflated["a.tfrecord"].size()) << "a real deflate stream";
  FakeComm comm = rank_of(0, 1);
  {
    Stager s({{"target", dir("gz-target").string()}, {"inflate", "1"}, {"threads", "3"}});
    ASSERT_EQ(s.stage(source, comm), "");
    EXPECT_EQ(staged(s, source), inflated);
    EXPECT_EQ(s.stats.files, 4u);
    EXPECT_EQ(s.stats.bytes_read, total_size(raw));
    EXPECT_EQ(s.stats.bytes_written, total_size(inflated));
  }
  {
    Stager s({{"target", dir("gz-target").string()}, {"inflate", "0"}});
    ASSERT_EQ(s.stage(source, comm), "");
    EXPECT_EQ(staged(s, source), raw) << "inflate=0: gzip files are copied as they are";
    EXPECT_EQ(s.stats.bytes_written, total_size(raw));
  }
  // Packed in tar.zst parts: the unpacked entries go through the same inflater.
  const fs::path packed = dir("gz-packed");
  mlph::stage::pack_split(source / "train", packed / "train", 2, 1);
  Stager s({{"target", dir("gz-target").string()}, {"inflate", "1"}});
  ASSERT_EQ(s.stage(packed, comm), "");
  EXPECT_EQ(staged(s, packed), inflated);
  EXPECT_EQ(s.stats.bytes_written, total_size(inflated));
  EXPECT_EQ(s.stats.bytes_read, fs::file_size(packed / "train" / mlph::stage::part_name(0)) +
                                    fs::file_size(packed / "train" / mlph::stage::part_name(1)));
}

TEST_F(StageInflate, ACorruptOrTruncatedGzipFileFailsNamingIt) {
  const fs::path source = make_source("gz-bad");
  const fs::path victim = source / "train" / "a.tfrecord";
  const std::string good = slurp(victim);
  std::string corrupt = good;
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 64; ++i) corrupt[i] = static_cast<char>(~corrupt[i]);
  const std::string truncated = good.substr(0, good.size() / 2);
  FakeComm comm = rank_of(0, 1);
  for (const bool truncate : {false, true}) {
    std::ofstream(victim, std::ios::binary | std::ios::trunc) << (truncate ? truncated : corrupt);
    const fs::path target = dir("gz-bad-target");
    std::string error;
    {
      Stager s({{"target", target.string()}, {"inflate", "1"}, {"threads", "1"}});
      error = s.stage(source, comm);
      EXPECT_EQ(s.code, MLPH_DATA_LOSS);
    }
    EXPECT_NE(error.find("rank 0: " + victim.string() + ": cannot inflate: "), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    if (truncate) {
      EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    }
    EXPECT_TRUE(fs::is_empty(target)) << "the partial copy is removed";
    // The same file unpacked from an archive: named by part and entry.
    const fs::path packed = dir("gz-bad-packed");
    mlph::stage::pack_split(source / "train", packed / "train", 1, 1);
    Stager s({{"target", target.string()}, {"inflate", "1"}});
    const std::string error2 = s.stage(packed, comm);
    EXPECT_NE(error2.find((packed / "train" / mlph::stage::part_name(0)).string() + ": a.tfrecord: cannot inflate: "),
              std::string::npos)
        << error2;
  }
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << good.substr(0, 10);  // not even a header
  Stager s({{"target", dir("gz-bad-target").string()}, {"inflate", "1"}});
  EXPECT_NE(s.stage(source, comm).find(victim.string() + ": cannot inflate: truncated"), std::string::npos);
}

TEST_F(StageInflate, TheSpaceCheckCountsTheInflatedSizeAndInflatingStopsAtTheLimit) {
  const fs::path source = make_source("gz-space");
  uint64_t raw = 0;
  for (const auto& item : fs::directory_iterator(source / "train")) raw += item.file_size();
  const std::string limit = std::to_string(raw + 1000);  // the gzip files fit, inflated they do not
  FakeComm comm = rank_of(0, 1);
  Stager plain({{"target", dir("gz-space-target").string()}, {"max_bytes", limit}});
  EXPECT_EQ(plain.stage(source, comm), "");
  Stager s({{"target", dir("gz-space-target").string()}, {"max_bytes", limit}, {"inflate", "1"}});
  const std::string error = s.stage(source, comm);
  EXPECT_EQ(s.code, MLPH_RESOURCE_EXHAUSTED);
  // The estimate: each gzip trailer's ISIZE, for c.tfrecord its last member's (1500000 bytes).
  const uint64_t estimate = total_size(inflated) - inflated["c.tfrecord"].size() + 1500000;
  EXPECT_NE(error.find("needs " + std::to_string(estimate) + " bytes, more than storage.max_bytes = " + limit),
            std::string::npos)
      << error;

  // A trailer that understates (a last member of 10 bytes after 64 MiB of zeros, a "bomb"): the
  // estimate passes, the writes stop at the limit.
  const fs::path bomb = source / "train" / "a.tfrecord";
  write_gzip(bomb, {std::string(64 << 20, '\0'), "ten bytes!"});
  Stager t({{"target", dir("gz-space-target").string()}, {"max_bytes", "4000000"}, {"inflate", "1"}, {"threads", "1"}});
  const std::string error2 = t.stage(source, comm);
  EXPECT_EQ(t.code, MLPH_RESOURCE_EXHAUSTED);
  EXPECT_NE(error2.find(bomb.string() + ": inflates past the 4000000 bytes this rank may stage"), std::string::npos)
      << error2;
}

// Issue 36, defect 7: a bomb (a trailer that lies low) on a RAM disk of its own, no max_bytes: the
// writes stop with the target still about half free (what the files need, plus half the space beyond),
// not when it is full.
TEST_F(StageInflate, ABombStopsWithTheTargetStillHalfFree) {
  const fs::path source = make_source("gz-bomb");
  write_gzip(source / "train" / "a.tfrecord", {std::string(64 << 20, '\0'), "ten bytes!"});
  const fs::path ram = dir("gz-bomb-ram");
  constexpr uint64_t kSize = 16 << 20;
  if (::mount("tmpfs", ram.c_str(), "tmpfs", 0, ("size=" + std::to_string(kSize)).c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  std::string error;
  {
    Stager s({{"target", ram.string()}, {"inflate", "1"}, {"threads", "1"}});
    FakeComm comm = rank_of(0, 1);
    error = s.stage(source, comm);
    EXPECT_EQ(s.code, MLPH_RESOURCE_EXHAUSTED);
  }
  ::umount(ram.c_str());
  const std::string said = ": inflates past the ";
  const size_t at = error.find(said);
  ASSERT_NE(at, std::string::npos) << error;
  const uint64_t limit = std::stoull(error.substr(at + said.size()));
  const uint64_t need = total_size(inflated) - inflated["a.tfrecord"].size() + 10;  // the bomb's ISIZE: 10
  EXPECT_LE(limit, need + (kSize - need) / 2) << error;
  EXPECT_GT(limit, need) << error;
}

TEST_F(StageInflate, InflateIsZeroOrOne) {
  try {
    Stager s(std::map<std::string, std::string>{{"inflate", "2"}});
    ADD_FAILURE() << "inflate=2 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("must be an integer from 0 to 1"), std::string::npos) << e.what();
  }
}

// ---- untrusted manifests and archives ----

std::string manifest_error(const std::string& text) {
  try {
    mlph::stage::parse_manifest(text, "M");
  } catch (const mlph::sdk::Error& e) {
    EXPECT_EQ(e.code(), MLPH_DATA_LOSS) << text;
    return e.what();
  }
  return "(parsed)";
}

TEST(Manifest, EveryMalformedFieldIsOneLineNamingFileAndLine) {
  const std::string head = "mlph-manifest 1 parts 2\n";
  EXPECT_EQ(manifest_error(head + "10 zzzz a\n"), "M:2: the crc32 is not 1 to 8 hex digits");
  EXPECT_EQ(manifest_error(head + "10 0 a\n10 123456789 b\n"), "M:3: the crc32 is not 1 to 8 hex digits");
  EXPECT_EQ(manifest_error(head + "10 -1 a\n"), "M:2: the crc32 is not 1 to 8 hex digits");
  EXPECT_EQ(manifest_error(head + "-1 0 a\n"), "M:2: the size is not a number from 0 to 18446744073709551615");
  EXPECT_EQ(manifest_error(head + "18446744073709551616 0 a\n"), "M:2: the size is not a number from 0 to 18446744073709551615");
  EXPECT_EQ(manifest_error(head + "0x10 0 a\n"), "M:2: the size is not a number from 0 to 18446744073709551615");
  EXPECT_EQ(manifest_error("mlph-manifest 1 parts 4294967296\n"), "M:1: the part count is not a number from 0 to 4294967295");
  EXPECT_EQ(manifest_error("mlph-manifest 1 parts -1\n"), "M:1: the part count is not a number from 0 to 4294967295");
  EXPECT_EQ(manifest_error(""), "M:1: not an mlph-manifest 1 header ('mlph-manifest 1 parts K')");
  EXPECT_EQ(manifest_error("mlph-manifest 2 parts 1\n"), "M:1: not an mlph-manifest 1 header ('mlph-manifest 1 parts K')");
  EXPECT_EQ(manifest_error("mlph-manifest 1 parts 1 more\n"), "M:1: not an mlph-manifest 1 header ('mlph-manifest 1 parts K')");
  EXPECT_EQ(manifest_error(head + "10 abc\n"), "M:2: expected 'size crc32 name'");
  for (const char* name : {"..", ".", "a/b", "/etc", "a\x1b[31mred"})
    EXPECT_EQ(manifest_error(head + "1 0 " + name + "\n"),
              "M:2: the name is not a plain file name (empty, '.', '..', a path, or control characters)")
        << name;
  EXPECT_EQ(manifest_error(head + "1 0 b\n1 0 a\n"), "M:3: names are not sorted and unique");
  EXPECT_EQ(manifest_error(head + "1 0 a\n1 0 a\n"), "M:3: names are not sorted and unique");
}

TEST(Manifest, WhatIsWrittenIsReadBack) {
  const fs::path file = fresh_dir("manifest-" + std::to_string(::getpid())) / "MANIFEST.mlph";
  const mlph::stage::Manifest written{4294967295u, {{"a file with spaces", 18446744073709551615ull, 0xffffffffu},
                                                    {"b", 0, 0}}};
  mlph::stage::write_manifest(file, written);
  const mlph::stage::Manifest read = mlph::stage::read_manifest(file);
  EXPECT_EQ(read.parts, written.parts);
  ASSERT_EQ(read.entries.size(), 2u);
  EXPECT_EQ(read.entries[0].name, "a file with spaces");
  EXPECT_EQ(read.entries[0].size, 18446744073709551615ull);
  EXPECT_EQ(read.entries[0].crc32, 0xffffffffu);
  EXPECT_EQ(read.entries[1].name, "b");

  // A bad field in a file: the error names the file and the line (it used to say only "stoul").
  std::ofstream(file) << "mlph-manifest 1 parts 1\n3 zzzz a\n";
  try {
    mlph::stage::read_manifest(file);
    ADD_FAILURE() << "read";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()), file.string() + ":2: the crc32 is not 1 to 8 hex digits");
  }
  fs::remove_all(file.parent_path());
}

// File i lies in part i % K: 16 files packed in 16 parts are just as well described by K = 2^32 - 1,
// which must cost no more than the 16 parts (it used to allocate a job per part: 6.3 GB, then bad_alloc).
TEST_F(Stage, AManifestOfFourBillionPartsCostsNoMoreThanItsFiles) {
  const fs::path packed = dir("packed-huge-parts");
  ASSERT_EQ(mlph::stage::pack_split(data() / "train", packed / "train", 16, 1).parts, 16u);
  const fs::path manifest = packed / "train" / mlph::stage::kManifestName;
  mlph::stage::Manifest m = mlph::stage::read_manifest(manifest);
  m.parts = 4294967295u;
  mlph::stage::write_manifest(manifest, m);
  Stager s({{"target", dir("target-huge-parts").string()}});
  FakeComm comm = rank_of(1, 2);
  ASSERT_EQ(s.stage(packed, comm), "");
  expect_shard(s, packed, data(), "train", 1, 2);
}

TEST_F(Stage, PackDataRefusesNumbersOutOfRangeAndWritesNoEmptyPart) {
  const fs::path out = dir("pack-cli");
  const std::string pack = MLPH_BINARY_DIR "/bin/mlph-pack-data " + data().string() + " " + (out / "p").string();
  const CliResult huge = run_command(pack + " --parts 4294967296");
  EXPECT_EQ(huge.exit_code, 2) << huge.output;
  EXPECT_EQ(huge.output, "mlph-pack-data: --parts 4294967296: expected a whole number from 0 to 4294967295\n");
  const CliResult level = run_command(pack + " --level 4294967299");
  EXPECT_EQ(level.exit_code, 2) << level.output;
  EXPECT_EQ(level.output, "mlph-pack-data: --level 4294967299: expected a whole number from 1 to 22\n");
  EXPECT_FALSE(fs::exists(out / "p"));

  const CliResult many = run_command(pack + " --parts 100");  // more parts than files: a part per file
  ASSERT_EQ(many.exit_code, 0) << many.output;
  EXPECT_NE(many.output.find("train: 16 files in 16 part(s)"), std::string::npos) << many.output;
  EXPECT_NE(many.output.find("validation: 8 files in 8 part(s)"), std::string::npos) << many.output;
  EXPECT_EQ(mlph::stage::read_manifest(out / "p" / "train" / mlph::stage::kManifestName).parts, 16u);
  EXPECT_TRUE(fs::exists(out / "p" / "train" / mlph::stage::part_name(15)));
  EXPECT_FALSE(fs::exists(out / "p" / "train" / mlph::stage::part_name(16)));

  const CliResult plain = run_command(pack + "0 --parts 0");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("train: 16 files, copied plainly with a manifest"), std::string::npos) << plain.output;
}

// The staged directory of the one stage call of `target` (mlperf-stage-<tag>).
fs::path staged_root(const fs::path& target) {
  for (const auto& e : fs::directory_iterator(target)) return e.path();
  return {};
}

TEST_F(Stage, AnArchiveEntryOfAnotherSizeThanListedIsRefusedBeforeItIsWritten) {
  const fs::path packed = dir("packed-size");
  mlph::stage::pack_split(data() / "train", packed / "train", 2, 1);
  const fs::path manifest = packed / "train" / mlph::stage::kManifestName;
  auto m = mlph::stage::read_manifest(manifest);
  const uint64_t real = m.entries[2].size;
  m.entries[2].size = 100;  // file 2: part 0, rank 0 of 2; a small size, as a decompression bomb's manifest
  mlph::stage::write_manifest(manifest, m);
  const fs::path target = dir("target-size");
  Stager s({{"target", target.string()}, {"threads", "1"}});
  FakeComm comm = rank_of(0, 2);
  const std::string error = s.stage(packed, comm);
  EXPECT_EQ(s.code, MLPH_DATA_LOSS);
  EXPECT_NE(error.find((packed / "train" / mlph::stage::part_name(0)).string() + ": " + m.entries[2].name + ": " +
                       std::to_string(real) + " bytes in the archive, the manifest says 100"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(staged_root(target) / "train" / m.entries[2].name));
}

TEST_F(Stage, APlainFileLargerThanListedIsRefusedAtTheFirstByteTooMany) {
  const fs::path plain = dir("plain-grown");
  mlph::stage::pack_split(data() / "validation", plain / "validation", 0, 1);
  const auto victim = plain / "validation" / names(plain / "validation").front();  // file 0: rank 0's
  const uint64_t size = fs::file_size(victim);
  std::ofstream(victim, std::ios::app) << std::string(1 << 20, 'x');
  Stager s({{"target", dir("target-grown").string()}});
  FakeComm comm = rank_of(0, 2);
  const std::string error = s.stage(plain, comm);
  EXPECT_EQ(s.code, MLPH_DATA_LOSS);
  EXPECT_NE(error.find(victim.string() + ": larger than the " + std::to_string(size) + " bytes expected"),
            std::string::npos)
      << error;
}

TEST_F(Stage, AFifoInTheSourceIsRefusedWithoutWaitingOnIt) {
  const auto fifo_in_place_of = [](const fs::path& file) {
    fs::remove(file);
    ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  };
  FakeComm comm = rank_of(0, 2);
  const fs::path plain = dir("plain-fifo");
  mlph::stage::pack_split(data() / "validation", plain / "validation", 0, 1);
  const auto victim = plain / "validation" / names(plain / "validation").front();
  fifo_in_place_of(victim);
  Stager s({{"target", dir("target-fifo").string()}});
  EXPECT_NE(s.stage(plain, comm).find(victim.string() + ": not a regular file"), std::string::npos);

  const fs::path packed = dir("packed-fifo");
  mlph::stage::pack_split(data() / "validation", packed / "validation", 2, 1);
  fifo_in_place_of(packed / "validation" / mlph::stage::part_name(0));
  Stager t({{"target", dir("target-fifo2").string()}});
  const std::string error = t.stage(packed, comm);
  EXPECT_NE(error.find(mlph::stage::part_name(0) + ": not a regular file"), std::string::npos) << error;

  fifo_in_place_of(packed / "validation" / mlph::stage::kManifestName);
  Stager u({{"target", dir("target-fifo3").string()}});
  const std::string error2 = u.stage(packed, comm);
  EXPECT_NE(error2.find(std::string(mlph::stage::kManifestName) + ": not a regular file"), std::string::npos) << error2;
}

// ---- abandon (ABI 1.4): the process is ending without destroy ----

TEST_F(Stage, AbandonRemovesTheCopyAtOnceAndCreatesNothingAfter) {
  const fs::path target = dir("target-abandon");
  Stager s({{"target", target.string()}});
  FakeComm comm = rank_of(0, 1);
  ASSERT_EQ(s.stage(data(), comm), "");
  EXPECT_FALSE(fs::is_empty(target));
  s.abandon();
  EXPECT_TRUE(fs::is_empty(target)) << "the staged copy is removed while the instance lives";

  Stager late({{"target", target.string()}});
  late.abandon();
  const std::string error = late.stage(data(), comm);
  EXPECT_NE(error.find("not created: the run is ending"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_empty(target));

  Stager kept({{"target", target.string()}, {"keep", "1"}});
  ASSERT_EQ(kept.stage(data(), comm), "");
  kept.abandon();
  EXPECT_FALSE(fs::is_empty(target)) << "storage.keep=1 keeps the copy, however the run ends";
}

TEST_F(Stage, AbandonWhileTheCopyThreadsWorkLeavesNothing) {
  const fs::path target = dir("target-abandon-race");
  for (int delay_us : {0, 200, 1000, 5000}) {
    Stager s({{"target", target.string()}, {"threads", "3"}});
    FakeComm comm = rank_of(0, 1);
    std::thread staging([&] { s.stage(data(), comm); });
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    s.abandon();
    staging.join();
    EXPECT_TRUE(fs::is_empty(target)) << "abandoned " << delay_us << " us into staging";
  }
}

// mlperf-run --storage stage: staging inside the timed region by default (hpc 2.0.0 accepts it),
// before run_start with run.staging=untimed (3.0.0 accepts it, 2.0.0 must not), the breakdown keys,
// and a failing stage that ends the log aborted naming the rank.
class StageRun : public Stage {
 protected:
  CliResult run(const fs::path& out, const std::string& extra) {
    return run_cli("--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --storage stage --set train.epochs=1 "
                   "--seed 5 --set storage.target=" + dir("run-target").string() + " --data " + data().string() +
                   " --output " + out.string() + " " + extra);
  }
  // mlperf-run staging into `target` with steps of 60 s (the tracing backend), started in `pid` and
  // left running once its first step has begun, its copy in place.
  static void start_long_run(const fs::path& out, const fs::path& target, pid_t& pid) {
    const fs::path trace = out / "trace.txt";
    const std::string command =
        "exec " MLPH_BINARY_DIR "/bin/mlperf-run --config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --storage stage "
        "--set storage.target=" + target.string() + " --data " + data().string() + " --output " + out.string() +
        " --plugin-dir " MLPH_TEST_PLUGIN_DIR " --backend tracing --set backend.trace=" + trace.string() +
        " --set backend.step_seconds=60 > " + (out / "printed.txt").string() + " 2>&1";
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto started = std::chrono::steady_clock::now();
    while (read_lines(trace).empty() && std::chrono::steady_clock::now() - started < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_FALSE(read_lines(trace).empty()) << "no step started";
    ASSERT_FALSE(fs::is_empty(target)) << "nothing staged";
  }
  // Ends a run started by start_long_run with `signal` and waits for it (if it was started).
  static void end_run(pid_t pid, int signal) {
    if (pid <= 0) return;
    kill(pid, signal);
    waitpid(pid, nullptr, 0);
  }
  static std::vector<std::string> keys(const fs::path& log) {
    std::vector<std::string> out;
    for (const std::string& line : read_lines(log)) out.push_back(mllog_key(line));
    return out;
  }
  static size_t at(const std::vector<std::string>& keys, const std::string& key) {
    return static_cast<size_t>(std::find(keys.begin(), keys.end(), key) - keys.begin());
  }
};

TEST_F(StageRun, TimedAndUntimedStagingPassTheOfficialChecker) {
  const std::string checker = official_checker();
  for (const char* mode : {"timed", "untimed"}) {
    const fs::path out = dir(std::string("run-") + mode);
    const CliResult r = run(out, std::string("--set run.staging=") + mode);
    ASSERT_EQ(r.exit_code, 1) << r.output;  // one epoch: not converged
    EXPECT_NE(r.output.find("time: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("staging (rank 0): 24 files"), std::string::npos) << r.output;
    const auto k = keys(out / "result_0.txt");
    ASSERT_LT(at(k, "staging_stop"), k.size());
    EXPECT_LT(at(k, "staging_start"), at(k, "staging_stop"));
    EXPECT_EQ(at(k, "staging_start") > at(k, "run_start"), mode == std::string("timed"));
    EXPECT_LT(at(k, "mlph_time_breakdown"), at(k, "run_stop"));
    EXPECT_LT(at(k, "mlph_io"), at(k, "run_stop"));
    for (const std::string& line : read_lines(out / "result_0.txt"))
      if (mllog_key(line) == "train_samples") {
        EXPECT_NE(line.find("\"value\": 16,"), std::string::npos) << line;
      }
    if (checker.empty()) continue;  // ../shared is not beside a fresh clone: the checker assertions are skipped
    const fs::path patched = with_eval_error_under_target(out / "result_0.txt");
    const auto check = [&](const std::string& ruleset) {
      return run_command("PATH=/usr/bin:$PATH " + checker + " " + patched.string() + " " + ruleset);
    };
    EXPECT_EQ(check("3.0.0").exit_code, 0) << mode;
    const CliResult v2 = check("2.0.0");  // 2.0.0 requires staging inside the timed region
    EXPECT_EQ(v2.exit_code == 0, mode == std::string("timed")) << mode << "\n" << v2.output;
  }
  if (checker.empty()) GTEST_SKIP() << "../shared/tools/mllog-check is not beside this checkout: checker not run";
}

TEST_F(StageRun, AFailedStageEndsTheLogAbortedNamingTheRank) {
  const fs::path out = dir("run-fail");
  const auto before = names(data() / "train");
  const CliResult r = run(out, "--set storage.max_bytes=1000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 0"), std::string::npos) << r.output;
  const std::string last = read_lines(out / "result_0.txt").back();
  EXPECT_EQ(mllog_key(last), "run_stop");
  EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
  EXPECT_NE(last.find("storage.max_bytes"), std::string::npos) << last;
  EXPECT_EQ(names(data() / "train"), before);
}

// A CosmoFlow run on GZIP TFRecords staged with inflate=1 trains on the staged plain TFRecords:
// they are what the source inflates to, and the run reads exactly the bytes staging wrote.
TEST_F(StageRun, InflatedGzipTfrecordsTrain) {
  const fs::path out = dir("run-inflate"), target = dir("run-inflate-target");
  const CliResult r = run_cli("--config " MLPH_SOURCE_DIR "/configs/cosmoflow/mini.yaml --storage stage --set train.epochs=1 "
                              "--seed 5 --set storage.target=" + target.string() + " --set storage.inflate=1 "
                              "--set storage.keep=1 --data " + data().string() + " --output " + out.string());
  ASSERT_EQ(r.exit_code, 1) << r.output;  // one epoch: not converged
  EXPECT_NE(r.output.find("staging (rank 0): 24 files"), std::string::npos) << r.output;
  const auto k = keys(out / "result_0.txt");
  EXPECT_LT(at(k, "eval_error"), k.size()) << "it trained and evaluated";
  std::string io;
  for (const std::string& line : read_lines(out / "result_0.txt"))
    if (mllog_key(line) == "mlph_io") io = line;
  uint64_t source_bytes = 0, inflated_bytes = 0;
  for (const char* split : {"train", "validation"})
    for (const std::string& name : names(data() / split)) {
      const std::string staged = slurp(staged_root(target) / split / name);
      ASSERT_FALSE(staged.empty()) << name;
      EXPECT_NE(staged.substr(0, 2), "\x1f\x8b") << name << " staged as gzip";
      EXPECT_EQ(staged, gunzip_file(data() / split / name)) << name;
      source_bytes += fs::file_size(data() / split / name);
      inflated_bytes += staged.size();
    }
  EXPECT_NE(io.find("\"staged_bytes\": " + std::to_string(inflated_bytes) + ","), std::string::npos) << io;
  EXPECT_NE(io.find("\"staging_read_bytes\": " + std::to_string(source_bytes) + ","), std::string::npos) << io;
  EXPECT_NE(io.find("\"read_bytes\": " + std::to_string(inflated_bytes) + ","), std::string::npos) << io;
  fs::remove_all(target);  // kept (keep=1) to be inspected
}

// A signal during a step too long to wait for: the watcher ends the run (run_stop aborted) and the
// process exits at once, without destroying the plug-ins; the staged copy must go all the same.
TEST_F(StageRun, ASignalDuringALongStepLeavesNoStagedCopy) {
  for (const int signal : {SIGTERM, SIGINT}) {
    const fs::path out = dir("run-signal"), target = dir("run-target");
    pid_t run = -1;
    start_long_run(out, target, run);
    if (HasFatalFailure()) return;
    kill(run, signal);
    const auto signalled = std::chrono::steady_clock::now();
    int status = 0;
    while (waitpid(run, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - signalled > std::chrono::seconds(30)) {
        kill(run, SIGKILL);
        waitpid(run, &status, 0);
        FAIL() << "mlperf-run did not end within 30 s of the signal";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(10)) << "it waited for the step";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    const std::string last = read_lines(out / "result_0.txt").back();
    EXPECT_NE(last.find("\"status\": \"aborted\""), std::string::npos) << last;
    EXPECT_NE(last.find(signal == SIGTERM ? "SIGTERM while blocked" : "SIGINT while blocked"), std::string::npos) << last;
    EXPECT_TRUE(fs::is_empty(target)) << "the staged copy was left behind";
  }
}

// A run killed outright (SIGKILL: nothing of it runs again) cannot remove its copy; the next run
// staging into the same place finds no rank holding the copy's lock and removes it, naming it.
TEST_F(StageRun, ACopyLeftByAKilledRunIsRemovedByTheNext) {
  const fs::path target = dir("run-killed-target"), next = dir("run-after-kill");
  pid_t killed = -1, after = -1;
  start_long_run(dir("run-killed"), target, killed);
  if (HasFatalFailure()) return;
  end_run(killed, SIGKILL);
  std::vector<fs::path> left;
  for (const auto& item : fs::directory_iterator(target)) left.push_back(item.path());
  ASSERT_EQ(left.size(), 1u) << "the killed run's copy";
  ASSERT_TRUE(fs::exists(left[0] / ".alive-0"));

  start_long_run(next, target, after);  // returns once its first step runs: staging is over
  if (HasFatalFailure()) return end_run(after, SIGKILL);
  EXPECT_FALSE(fs::exists(left[0])) << "the stale copy is still there";
  end_run(after, SIGTERM);
  std::ifstream printed(next / "printed.txt");
  const std::string output((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  EXPECT_NE(output.find(left[0].string() + ": removed, a copy staged by a run that ended without removing it"),
            std::string::npos)
      << output;
  EXPECT_TRUE(fs::is_empty(target)) << "the next run's own copy was left behind";
}

// A copy in use is not stale: a second run staging beside a running one leaves its copy alone.
TEST_F(StageRun, ACopyInUseIsLeftAlone) {
  const fs::path target = dir("run-busy-target"), beside = dir("run-beside");
  pid_t busy = -1, second = -1;
  start_long_run(dir("run-busy"), target, busy);
  if (HasFatalFailure()) return end_run(busy, SIGKILL);
  start_long_run(beside, target, second);
  size_t copies = 0;
  for ([[maybe_unused]] const auto& item : fs::directory_iterator(target)) ++copies;
  end_run(second, SIGTERM);
  end_run(busy, SIGTERM);
  EXPECT_EQ(copies, 2u) << "both runs' copies while both ran";
  std::ifstream printed(beside / "printed.txt");
  const std::string output((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  EXPECT_EQ(output.find("removed, a copy staged"), std::string::npos) << output;
  EXPECT_TRUE(fs::is_empty(target)) << "each run removes its own copy";
}

}  // namespace
